// What Python reads and sets on a group beyond c10d's interface (ringguard.counters, set_fault, fault,
// transport): integrity counters summed over the group's communicators and lanes, fault injection, and the
// name of each device type's transport; and the replica check's all-gather of host words.
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/env.h"
#include "ringguard/runtime/point_to_point.h"
#include "ringguard/torch/process_group.h"
#include "torch/tensor_checks.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace ringguard {

Counters ProcessGroupRingguard::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Counters c;
  if (cpu_) c += cpu_->counters();
  if (cuda_) c += cuda_->counters();
  if (p2p_) c += p2p_->counters();
  return c;
}

void ProcessGroupRingguard::setFault(const std::map<std::string, std::string>& fault) {
  releaseHeldP2p();  // send/recv called before it run with the faults they were called with
  if (Status nul = checkSettingMap(fault); !nul.isOk())
    throw std::invalid_argument("ringguard: set_fault: " + nul.message());
  for (const auto& kv : fault) {
    if (kv.first.rfind("RINGGUARD_FAULT_", 0) != 0) {
      throw std::invalid_argument("ringguard: set_fault: '" + kv.first +
                                  "' is not a RINGGUARD_FAULT_* option");
    }
  }
  // Fault options not named keep their defaults: set_fault replaces the whole setting.
  ringguard::Options o;
  Status st = ringguard::Options::fromLookup(
      [&fault](const char* name) -> const char* {
        auto it = fault.find(name);
        return it != fault.end() ? it->second.c_str() : nullptr;
      },
      &o);
  if (!st.isOk()) throw std::invalid_argument("ringguard: set_fault: " + st.message());
  std::lock_guard<std::mutex> lock(mutex_);
  fault_ = o.fault;
  if (p2p_) {
    st = p2p_->setFault(fault_);
    if (!st.isOk()) throw std::invalid_argument("ringguard: set_fault: " + st.message());
  }
  for (Communicator* c : {cpu_.get(), cuda_.get()}) {
    if (!c) continue;
    st = c->setFault(fault_);
    if (!st.isOk()) throw std::invalid_argument("ringguard: set_fault: " + st.message());
  }
}

std::map<std::string, std::string> ProcessGroupRingguard::fault() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, std::string> m;
  m["RINGGUARD_FAULT_MODE"] = faultModeName(fault_.mode);
  std::ostringstream p;
  p << fault_.probability;
  m["RINGGUARD_FAULT_PROB"] = p.str();
  std::string schedule;
  for (const auto& e : fault_.schedule) {
    if (!schedule.empty()) schedule += ",";
    schedule += std::to_string(e.collective) + ":" + std::to_string(e.step) + ":" + std::to_string(e.slice) +
                ":" + std::to_string(e.rank);
  }
  m["RINGGUARD_FAULT_SCHEDULE"] = schedule;
  m["RINGGUARD_FAULT_SEED"] = std::to_string(fault_.seed);
  m["RINGGUARD_FAULT_BITS"] = std::to_string(fault_.bits);
  m["RINGGUARD_FAULT_BURST_BITS"] = std::to_string(fault_.burstBits);
  m["RINGGUARD_FAULT_DELAY_MS"] = std::to_string(fault_.delayMs);
  m["RINGGUARD_FAULT_REPEAT"] = std::to_string(fault_.repeat);
  return m;
}

// A replica check's all-gather outside the lanes: held send/recv released first, as every other operation of
// the group does, then counted while it uses a communicator (stop() waits for the count to fall to 0 before
// it releases them), or refused once the group stopped.
Status ProcessGroupRingguard::enterWordsCall(const char* op) {
  releaseHeldP2p();
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_) return Status(StatusCode::kAborted, std::string("ringguard: ") + op + " after " + stoppedBy_);
  ++wordsInFlight_;
  return Status::ok();
}

void ProcessGroupRingguard::leaveWordsCall() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--wordsInFlight_ == 0) wordsDone_.notify_all();
}

Status ProcessGroupRingguard::allgatherHostWords(const std::vector<uint32_t>& mine,
                                                 std::vector<uint32_t>* all) {
  RINGGUARD_RETURN_IF_ERROR(enterWordsCall("the replica check's all-gather"));
  Communicator* comm = cpu_.get();  // made with the group, released only by stop() after the count
  all->assign(mine.size() * static_cast<size_t>(size_), 0);
  const Status st = comm->allgather(mine.data(), all->data(), mine.size(), DataType::kInt32);
  leaveWordsCall();
  return st;
}

Status ProcessGroupRingguard::allgatherDeviceWords(const at::Tensor& in, const at::Tensor& out) {
#if RINGGUARD_TORCH_CUDA
  const char* op = "the replica check's device all-gather";
  if (!in.is_cuda() || !out.is_cuda() || in.device() != out.device() || in.scalar_type() != at::kInt ||
      out.scalar_type() != at::kInt || !in.is_contiguous() || !out.is_contiguous() ||
      out.numel() != in.numel() * size_) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(op) + ": expects contiguous int32 CUDA tensors on one device, the output " +
                      std::to_string(size_) + " times the input's " + std::to_string(in.numel()) +
                      " elements; got " + describe(in) + " and " + describe(out));
  }
  RINGGUARD_RETURN_IF_ERROR(enterWordsCall(op));  // before the lookup: cuda_ outlives this call
  Status st;
  try {
    Communicator* comm = communicatorFor(in, op);  // made here if no CUDA collective made it yet
    void* stream = c10::cuda::getCurrentCUDAStream(in.device().index()).stream();
    st = comm->allgatherAsync(in.data_ptr(), out.data_ptr(), size_t(in.numel()), DataType::kInt32, stream)
             ->wait();
  } catch (const std::exception& e) {
    st = Status(StatusCode::kInternal, std::string(op) + ": " + e.what());
  }
  leaveWordsCall();
  return st;
#else
  return Status(StatusCode::kInvalidArgument, "ringguard: this build has no CUDA support");
#endif
}

std::string ProcessGroupRingguard::transport(const std::string& deviceType) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (deviceType == "cpu" && cpu_) return cpu_->transportName();
  if (deviceType == "cuda" && cuda_) return cuda_->transportName();
  return "";
}

}  // namespace ringguard
