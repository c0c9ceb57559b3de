// How an override becomes a c10d Work: launch() starts one collective on the communicator of the tensor's
// device and hands its completion to the group's completion lane (torch/completion.h), which completes the
// Work's Future; launchAllreduce and launchGather are its two shapes that several overrides share; and
// coalescing, one Work over every operation issued between startCoalescing and endCoalescing.
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "ringguard/torch/process_group.h"
#include "torch/completion.h"
#include "torch/rejection.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace ringguard {

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::launchAllreduce(const char* op,
                                                                      const at::Tensor& buffer, size_t count,
                                                                      DataType dtype, ReduceOp rop,
                                                                      std::vector<at::Tensor> outputs,
                                                                      std::function<void()> after) {
  void* data = buffer.data_ptr();
  return launch(
      op, buffer,
      [=](Communicator* comm, void* stream) {
        return comm->allreduceAsync(data, data, count, dtype, rop, stream);
      },
      std::move(outputs), std::move(after));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::launch(const char* op, const at::Tensor& buffer,
                                                             Start start, std::vector<at::Tensor> outputs,
                                                             std::function<void()> after, bool nestedOutputs,
                                                             std::vector<at::Tensor> keep) {
  releaseHeldP2p();  // held lone send/recv go first, in the order the rank called them
  Communicator* comm = communicatorFor(buffer, op);
  auto p = std::make_shared<PendingCollective>();
  std::vector<c10::Device> devices;
  void* stream = nullptr;
#if RINGGUARD_TORCH_CUDA
  if (buffer.is_cuda()) {
    devices.push_back(buffer.device());
    p->device = buffer.device().index();
    stream = c10::cuda::getCurrentCUDAStream(buffer.device().index()).stream();
  }
#endif
  p->stream = stream;
  c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  if (nestedOutputs) {
    type = c10::ListType::create(type);
    c10::List<c10::List<at::Tensor>> nested;
    nested.push_back(c10::List<at::Tensor>(outputs));
    p->value = c10::IValue(nested);
  } else {
    p->value = c10::IValue(outputs);
  }
  p->future = c10::make_intrusive<c10::ivalue::Future>(type, devices);
  p->c10dWork = c10::make_intrusive<C10dWork>(rank_, c10d::OpType::UNKNOWN, op, outputs, p->future);
  p->keep = outputs;
  p->keep.push_back(buffer);
  p->keep.insert(p->keep.end(), keep.begin(), keep.end());
  p->after = std::move(after);
  ++sequence_;
  markCollectiveStarted();  // an exception from here on is not a rejected call (rejected())
  p->work = start(comm, stream);
  c10::intrusive_ptr<c10d::Work> work = p->c10dWork;
  (buffer.is_cuda() ? cudaLane_ : cpuLane_)->push(std::move(p));
  coalesce(work);
  return work;
}

// Gather and scatter are all-to-all exchanges in which only the root receives (gather) or sends
// (scatter): N - 1 verified flows, each block moved once.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::launchGather(const char* op, const at::Tensor& in,
                                                                   const at::Tensor& out, int root,
                                                                   std::vector<at::Tensor> outputs,
                                                                   std::function<void()> after,
                                                                   bool nestedOutputs, DataType dt) {
  const size_t n = size_t(in.numel());
  std::vector<size_t> sc(size_t(size_), 0), sd(size_t(size_), 0), rc(size_t(size_), 0), rd(size_t(size_), 0);
  sc[size_t(root)] = n;
  if (rank_ == root) {
    for (int p = 0; p < size_; ++p) {
      rc[size_t(p)] = n;
      rd[size_t(p)] = size_t(p) * n;
    }
  }
  return launch(op, in,
                [in, out, sc, sd, rc, rd, dt](Communicator* comm, void* stream) {
                  return comm->alltoallAsync(in.data_ptr(), sc, sd, out.data_ptr(), rc, rd, dt, stream);
                },
                std::move(outputs), std::move(after), nestedOutputs, {out});
}

void ProcessGroupRingguard::coalesce(const c10::intrusive_ptr<c10d::Work>& work) {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  if (coalescing_) coalesced_.push_back(work);
}

void ProcessGroupRingguard::startCoalescing() {
  // What this thread holds on this group for the current stream joins the block; the rest goes first.
  int heldDevice = -1;
  DeviceP2pOps joining = takeHeldForBlock(&heldDevice);
  releaseHeldP2p();
  DeviceP2pOps abandoned;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    // A block that ended in an exception never reached endCoalescing (as with NCCL): start afresh. Its
    // send/recv on the peer windows were never issued: their Works fail (below, unlocked) rather than wait
    // forever.
    coalesced_.clear();
    abandoned.swap(deviceP2p_);
    deviceP2p_ = std::move(joining);
    if (!deviceP2p_.empty()) deviceP2pDevice_ = heldDevice;
    coalescing_ = true;
  }
  failNotHandedOver(abandoned, Status(StatusCode::kAborted,
                                      "send/recv of a coalescing block that never reached endCoalescing"));
}

// One Work over the block's operations: its Future completes (with every output) once each of theirs has,
// with the first error if any failed; then the Work. Each operation's own completion runs the countdown, so
// nothing waits on a thread of its own.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::endCoalescing() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  DeviceP2pOps deviceOps;
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    TORCH_CHECK(coalescing_, "ringguard: endCoalescing without startCoalescing");
    coalescing_ = false;
    works.swap(coalesced_);
    deviceOps.swap(deviceP2p_);
    device = deviceP2pDevice_;
  }
  // The block's send/recv on the peer windows: one grouped call, which cannot deadlock whatever order each
  // rank issued them in (their Works are among `works`).
  if (!deviceOps.empty()) {
    void* stream = nullptr;
#if RINGGUARD_TORCH_CUDA
    stream = c10::cuda::getCurrentCUDAStream(device).stream();
#endif
    try {
      issueDeviceP2p(deviceOps, device, stream);
    } catch (const std::exception& e) {
      failNotHandedOver(deviceOps,
                        Status(StatusCode::kInternal, e.what()));  // none left that nothing completes
      throw;
    }
  }
  if (works.empty()) return nullptr;
  std::vector<at::Tensor> outputs;
  std::vector<c10::Device> devices;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
  for (const auto& w : works) {
    for (const at::Tensor& t : w->result()) outputs.push_back(t);
    futures.push_back(w->getFuture());
    for (const c10::Device& d : futures.back()->devices()) {
      if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
    }
  }
  auto future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
  auto all = c10::make_intrusive<RgWork>(rank_, c10d::OpType::COALESCED, "coalesced", outputs, future);
  struct Countdown {
    std::mutex mutex;
    size_t left;
    std::exception_ptr error;
  };
  auto state = std::make_shared<Countdown>();
  state->left = futures.size();
  for (const auto& f : futures) {
    f->addCallback([state, all, future, outputs](c10::ivalue::Future& done) {
      std::exception_ptr error;
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (done.hasError() && !state->error) state->error = done.exception_ptr();
        if (--state->left > 0) return;
        error = state->error;
      }
      if (error) {
        future->setError(error);
      } else {
        future->markCompleted(c10::IValue(outputs));
      }
      all->complete(error);
    });
  }
  return all;
}

}  // namespace ringguard
