// ringguard._C.ReplicaCheck: the C++ replica checker (src/replicas) driven from Python. The sequence, the
// comparison and the decision stay in C++; Python hands over the tensors (parameters, optimizer state,
// buffers) and the group's collectives as callables (python/ringguard/replicas.py is the layer on top).
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ringguard/replicas/gradient_outliers.h"
#include "ringguard/replicas/replica_check.h"
#include "ringguard/torch/process_group.h"
#include "torch/guard/tensor_buffer.h"
#if RINGGUARD_GUARD_CUDA
#include "ringguard/cuda/crc32_many.h"
#include "ringguard/replicas/device_backend.h"
#endif

namespace py = pybind11;

namespace ringguard {
namespace {

// Status -> Python exception: bad input is ValueError, a mismatch the policy raises is ReplicaMismatchError.
[[noreturn]] void raiseReplica(const Status& st) {
  if (st.code() == StatusCode::kInvalidArgument) throw py::value_error(st.message());
  if (st.code() == StatusCode::kCorruption) {
    const py::object type = py::module_::import("ringguard.replicas").attr("ReplicaMismatchError");
    PyErr_SetString(type.ptr(), st.message().c_str());
    throw py::error_already_set();
  }
  throw std::runtime_error(st.toString());
}

// sync=False on CUDA: the handle start_gather returned (python/ringguard/replicas.py, _DeviceGather): ready()
// is an event query, take() the gathered words in pinned host memory.
class PyPending final : public ReplicaPending {
 public:
  explicit PyPending(py::object handle) : handle_(std::move(handle)) {}
  bool ready() override { return handle_.attr("ready")().cast<bool>(); }
  Status take(std::vector<uint32_t>* all) override {
    try {
      at::Tensor got = py::cast<at::Tensor>(handle_.attr("take")()).contiguous();
      all->resize(static_cast<size_t>(got.numel()));
      std::memcpy(all->data(), got.data_ptr(), all->size() * sizeof(uint32_t));
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal,
                    std::string("replica check: the deferred all-gather failed: ") + e.what());
    }
  }

 private:
  py::object handle_;
};

// The group's collectives as Python callables: all_gather(int32 tensor) -> int32 tensor of size() blocks;
// broadcast(name, root) broadcasts the named tensor from group rank `root`; start_gather(words, crcs, index)
// (sync=False on CUDA, else None): copies the host words to the device, puts the device CRCs `crcs` at
// message words `index`, all-gathers on the stream and returns a handle with ready() and take().
// hostGroup: the group's CPU backend when it is ringguard's (else None): the host words are then gathered by
// its communicator directly (ProcessGroupRingguard::allgatherHostWords), not through all_gather.
class PyReplicaExchange final : public ReplicaExchange {
 public:
  PyReplicaExchange(int rank, int size, py::function allGather, py::function broadcast,
                    py::object startGather, int cudaDevice, py::object hostGroup)
      : rank_(rank),
        size_(size),
        cudaDevice_(cudaDevice),
        allGather_(std::move(allGather)),
        broadcast_(std::move(broadcast)),
        startGather_(std::move(startGather)),
        hostGroupObject_(std::move(hostGroup)) {
    if (!hostGroupObject_.is_none()) hostGroup_ = py::cast<ProcessGroupRingguard*>(hostGroupObject_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool fingerprintsOnDevice() const override { return !startGather_.is_none(); }

  // The device CRCs by crc32ManyDevice on `stream` into a device tensor (torch's allocator, in the stream's
  // order: scratch freed here is reused only by later work on the same stream), then the message is put
  // together and gathered on the device by start_gather: no host wait anywhere.
  Status startCheck(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>& tensors,
                    const std::vector<size_t>& deviceIndices, void* stream,
                    std::unique_ptr<ReplicaPending>* out) override {
    if (startGather_.is_none()) return ReplicaExchange::startCheck(mine, tensors, deviceIndices, stream, out);
    try {
      at::Tensor words = at::empty({static_cast<int64_t>(mine.size())}, at::kInt);
      std::memcpy(words.data_ptr(), mine.data(), mine.size() * sizeof(uint32_t));
      const int64_t n = static_cast<int64_t>(deviceIndices.size());
      at::Tensor index = at::empty({n}, at::kLong);
      for (int64_t i = 0; i < n; ++i)
        index.data_ptr<int64_t>()[i] = static_cast<int64_t>(ReplicaMessage::kHeaderWords + deviceIndices[i]);
      at::Tensor crcs = at::empty({0}, at::kInt);
#if RINGGUARD_GUARD_CUDA
      if (n > 0) {
        std::vector<Crc32Span> spans(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          spans[i] = Crc32Span{tensors[deviceIndices[i]].data, tensors[deviceIndices[i]].bytes};
        const size_t scratchBytes = crc32ManyDeviceScratchBytes(spans.data(), spans.size());
        const auto onDevice = at::TensorOptions().device(at::kCUDA, cudaDevice_);
        at::Tensor scratch =
            at::empty({static_cast<int64_t>(std::max<size_t>(scratchBytes, 16))}, onDevice.dtype(at::kByte));
        crcs = at::empty({n}, onDevice.dtype(at::kInt));
        RINGGUARD_RETURN_IF_ERROR(
            crc32ManyDevice(spans.data(), spans.size(), reinterpret_cast<uint32_t*>(crcs.data_ptr()),
                            scratch.data_ptr(), scratchBytes, static_cast<cudaStream_t>(stream)));
      }
#else
      if (n > 0) {
        return Status(StatusCode::kInvalidArgument,
                      "replica check: this build of ringguard has no CUDA layer");
      }
#endif
      *out = std::make_unique<PyPending>(startGather_(words, crcs, index));
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal,
                    std::string("replica check: starting the deferred check failed: ") + e.what());
    }
  }

  Status allGather(const std::vector<uint32_t>& mine, std::vector<uint32_t>* all) override {
    if (hostGroup_ != nullptr) {
      Status st;
      {
        py::gil_scoped_release release;  // the peers' checks may need this process's other threads
        st = hostGroup_->allgatherHostWords(mine, all);
      }
      if (st.isOk()) return st;
      // kInternal, as the callback's failures: the communicator's own code would turn into the Python class
      // of a replica mismatch (kCorruption) or of bad input (kInvalidArgument); its name stays in the text.
      return Status(StatusCode::kInternal, "replica check: the all-gather failed: " + st.toString());
    }
    try {
      at::Tensor t = at::empty({static_cast<int64_t>(mine.size())}, at::kInt);
      std::memcpy(t.data_ptr(), mine.data(), mine.size() * sizeof(uint32_t));
      at::Tensor got = py::cast<at::Tensor>(allGather_(t)).to(at::kCPU).contiguous();
      if (got.scalar_type() != at::kInt || got.numel() != static_cast<int64_t>(mine.size()) * size_) {
        return Status(StatusCode::kInternal, "replica check: the all-gather callback returned " +
                                                 std::to_string(got.numel()) + " elements");
      }
      all->resize(static_cast<size_t>(got.numel()));
      std::memcpy(all->data(), got.data_ptr(), all->size() * sizeof(uint32_t));
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal, std::string("replica check: the all-gather failed: ") + e.what());
    }
  }

  Status broadcast(const ReplicaTensor& tensor, int root, void*) override {
    try {
      broadcast_(tensor.name, root);
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal,
                    "replica repair: the broadcast of '" + tensor.name + "' failed: " + e.what());
    }
  }

 private:
  int rank_, size_, cudaDevice_;
  py::function allGather_, broadcast_;
  py::object startGather_;
  py::object hostGroupObject_;  // keeps hostGroup_ alive
  ProcessGroupRingguard* hostGroup_ = nullptr;
};

std::vector<ReplicaTensor> replicaTensors(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  std::vector<ReplicaTensor> out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) {
    GuardBuffer b;
    const Status st = tensorBuffer(t, name, &b);
    if (!st.isOk()) raiseReplica(st);
    ReplicaTensor r;
    r.name = name;
    r.data = b.data;
    r.bytes = b.bytes;
    r.dtype = b.dtype;
    r.kind = b.kind;
    out.push_back(std::move(r));
  }
  return out;
}

py::dict countersDict(const ReplicaCounters& c) {
  py::dict d;
  d["steps"] = c.steps;
  d["checks"] = c.checks;
  d["mismatches"] = c.mismatches;
  d["repairs"] = c.repairs;
  d["repaired_tensors"] = c.repairedTensors;
  d["escalations"] = c.escalations;
  d["warnings"] = c.warnings;
  d["raised"] = c.raised;
  d["injected"] = c.injected;
  d["bytes_fingerprinted"] = c.bytesFingerprinted;
  d["host_waits"] = c.hostWaits;
  d["deferred_waits"] = c.deferredWaits;
  d["locate_rounds"] = c.locateRounds;
  return d;
}

py::object reportDict(const ReplicaReport& r) {
  if (!r.checked) return py::none();
  py::dict d;
  d["step"] = r.step;
  d["read_at_step"] = r.readAtStep;
  d["mismatch"] = r.mismatch;
  d["odd_ranks"] = r.comparison.oddRanks;
  d["majority"] = r.comparison.majority;
  d["source"] = r.comparison.source;
  d["tensors"] = r.tensors;
  d["first_elements"] = r.firstElements;
  d["action"] = replicaActionName(r.decision.action);
  d["escalated"] = r.decision.escalated;
  d["repaired"] = r.repaired;
  d["message"] = r.message;
  return d;
}

class PyReplicaCheck {
 public:
  PyReplicaCheck(const std::string& onMismatch, int64_t every, int rank, int size, py::function allGather,
                 py::function broadcast, int cudaDevice, bool sync, py::object startGather,
                 py::object hostGroup) {
    ReplicaCheckOptions o;
    if (!parseReplicaPolicy(onMismatch, &o.onMismatch)) {
      throw py::value_error("ReplicaCheck: on_mismatch='" + onMismatch +
                            "': expected one of raise, repair, warn");
    }
    if (every < 1) throw py::value_error("ReplicaCheck: every=" + std::to_string(every) + ": expected >= 1");
    o.every = static_cast<uint64_t>(every);
    o.sync = sync;
    std::unique_ptr<ReplicaBackend> device;
#if RINGGUARD_GUARD_CUDA
    if (cudaDevice >= 0) {
      DeviceReplicaBackendOptions d;
      d.device = cudaDevice;
      const Status st = makeDeviceReplicaBackend(d, &device);
      if (!st.isOk()) raiseReplica(st);
    }
#else
    if (cudaDevice >= 0) throw py::value_error("ReplicaCheck: this build of ringguard has no CUDA layer");
#endif
    check_ = std::make_unique<ReplicaChecker>(
        o,
        std::make_unique<PyReplicaExchange>(rank, size, std::move(allGather), std::move(broadcast),
                                            std::move(startGather), cudaDevice, std::move(hostGroup)),
        makeHostReplicaBackend(), std::move(device));
  }

  void afterStep(uint64_t step, const std::vector<std::pair<std::string, at::Tensor>>& named,
                 uintptr_t stream) {
    const Status st = check_->afterStep(step, replicaTensors(named), reinterpret_cast<void*>(stream));
    if (!st.isOk()) raiseReplica(st);
  }

  void checkNow(uint64_t step, const std::vector<std::pair<std::string, at::Tensor>>& named,
                uintptr_t stream) {
    const Status st = check_->checkNow(step, replicaTensors(named), reinterpret_cast<void*>(stream));
    if (!st.isOk()) raiseReplica(st);
  }

  void flush(uint64_t step, const std::vector<std::pair<std::string, at::Tensor>>& named, uintptr_t stream) {
    const Status st = check_->flush(step, replicaTensors(named), reinterpret_cast<void*>(stream));
    if (!st.isOk()) raiseReplica(st);
  }

  void setFault(const std::string& spec) {
    ReplicaFault f;
    bool on = false;
    Status st = parseReplicaFault(spec, &f, &on);
    if (st.isOk()) st = on ? check_->setFault(f) : Status::ok();
    if (!st.isOk()) raiseReplica(st);
    if (!on) check_->clearFault();
  }

  ReplicaChecker& check() { return *check_; }

 private:
  std::unique_ptr<ReplicaChecker> check_;
};

}  // namespace
}  // namespace ringguard

// Called from module.cc's PYBIND11_MODULE.
void ringguardRegisterReplicaBindings(py::module_& m) {
  using ringguard::PyReplicaCheck;
  py::class_<PyReplicaCheck>(m, "ReplicaCheck")
      .def(py::init<const std::string&, int64_t, int, int, py::function, py::function, int, bool, py::object,
                    py::object>(),
           py::arg("on_mismatch"), py::arg("every"), py::arg("rank"), py::arg("size"), py::arg("all_gather"),
           py::arg("broadcast"), py::arg("cuda_device") = -1, py::arg("sync") = true,
           py::arg("start_gather") = py::none(), py::arg("host_group") = py::none())
      .def("after_step", &PyReplicaCheck::afterStep, py::arg("step"), py::arg("tensors"),
           py::arg("stream") = 0)
      .def(
          "needs_tensors", [](PyReplicaCheck& c, uint64_t step) { return c.check().needsTensors(step); },
          py::arg("step"))
      .def("check_now", &PyReplicaCheck::checkNow, py::arg("step"), py::arg("tensors"), py::arg("stream") = 0)
      .def("flush", &PyReplicaCheck::flush, py::arg("step"), py::arg("tensors"), py::arg("stream") = 0)
      .def("set_fault", &PyReplicaCheck::setFault, py::arg("spec"))
      .def("counters", [](PyReplicaCheck& c) { return ringguard::countersDict(c.check().counters()); })
      .def("last_report", [](PyReplicaCheck& c) { return ringguard::reportDict(c.check().lastReport()); });
  // The gradient-outlier verdict on one bucket's gathered norms (python/ringguard/replica_outliers.py):
  // (ranks, message); a report is counted in the run summary and put on the timeline.
  m.def(
      "find_gradient_outliers",
      [](const std::vector<double>& norms, double factor, uint64_t step, size_t bucket) {
        const ringguard::GradientOutliers o = ringguard::findGradientOutliers(norms, factor);
        ringguard::recordGradientOutliers(step, bucket, o);
        return py::make_tuple(o.ranks, o.ranks.empty() ? std::string() : o.describe(step, bucket));
      },
      py::arg("norms"), py::arg("factor"), py::arg("step"), py::arg("bucket"));
}
