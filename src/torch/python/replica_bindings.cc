// ringguard._C.ReplicaCheck: the C++ replica checker (src/replicas) driven from Python. The sequence, the
// comparison and the decision stay in C++; the tensors (parameters, optimizer state, buffers) are listed by
// ReplicaListing (replica_listing.h), and Python supplies the group's collectives as callables where the
// group's ringguard backends are not called directly (python/ringguard/replicas.py is the layer on top).
#include <ATen/record_function.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ringguard/replicas/gradient_outliers.h"
#include "ringguard/replicas/replica_check.h"
#include "ringguard/torch/process_group.h"
#include "torch/guard/tensor_buffer.h"
#include "torch/python/replica_listing.h"
#if RINGGUARD_GUARD_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ringguard/cuda/crc32_many.h"
#include "ringguard/replicas/device_backend.h"
#include "ringguard/replicas/gate.h"
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

#if RINGGUARD_GUARD_CUDA
// sync=False on CUDA: the gathered words copied into pinned host memory on the stream, and an event after the
// copy that says when the next check may read them (ready()); take() waits only for a check not ready yet.
class DevicePending final : public ReplicaPending {
 public:
  DevicePending(at::Tensor host, std::unique_ptr<at::cuda::CUDAEvent> done, std::vector<at::Tensor> keep)
      : host_(std::move(host)), done_(std::move(done)), keep_(std::move(keep)) {}
  bool ready() override { return done_->query(); }
  Status take(std::vector<uint32_t>* all) override {
    try {
      std::optional<py::gil_scoped_release> release;
      if (PyGILState_Check()) release.emplace();
      done_->synchronize();
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal,
                    std::string("replica check: the deferred all-gather failed: ") + e.what());
    }
    all->resize(static_cast<size_t>(host_.numel()));
    std::memcpy(all->data(), host_.data_ptr(), all->size() * sizeof(uint32_t));
    return Status::ok();
  }

 private:
  at::Tensor host_;
  std::unique_ptr<at::cuda::CUDAEvent> done_;
  std::vector<at::Tensor> keep_;  // the gathered device tensor the stream still uses
};
#endif

// The group's collectives: all_gather(int32 tensor) -> int32 tensor of size() blocks, on the host words;
// broadcast(name, root) broadcasts the named tensor from group rank `root`.
// deviceAllGather (sync=False or the gate, on CUDA; else None): all_gather_into_tensor of a device message on
// the current stream -> the gathered device tensor; not called when the group's CUDA backend is ringguard's
// (deviceGroup): its all-gather is then called here, in C++, on the training thread in the group's order, as
// the Python call would. The message itself is built here (deviceMessage), on the stream.
// hostGroup: the group's CPU backend when it is ringguard's (else None): the host words are then gathered by
// its communicator directly (ProcessGroupRingguard::allgatherHostWords), not through all_gather.
class PyReplicaExchange final : public ReplicaExchange {
 public:
  PyReplicaExchange(int rank, int size, py::function allGather, py::function broadcast,
                    py::object deviceAllGather, int cudaDevice, py::object hostGroup, py::object deviceGroup)
      : rank_(rank),
        size_(size),
        cudaDevice_(cudaDevice),
        allGather_(std::move(allGather)),
        broadcast_(std::move(broadcast)),
        deviceAllGather_(std::move(deviceAllGather)),
        hostGroupObject_(std::move(hostGroup)),
        deviceGroupObject_(std::move(deviceGroup)) {
    if (!hostGroupObject_.is_none()) hostGroup_ = py::cast<ProcessGroupRingguard*>(hostGroupObject_);
    if (!deviceGroupObject_.is_none()) deviceGroup_ = py::cast<ProcessGroupRingguard*>(deviceGroupObject_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool fingerprintsOnDevice() const override { return !deviceAllGather_.is_none(); }

  // The device CRCs by the exchange's Crc32ManyPlan on `stream`, the message put together and gathered on the
  // device, the gathered words copied back into pinned memory: no host wait anywhere.
  Status startCheck(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>& tensors,
                    const std::vector<size_t>& deviceIndices, void* stream,
                    std::unique_ptr<ReplicaPending>* out) override {
    if (deviceAllGather_.is_none())
      return ReplicaExchange::startCheck(mine, tensors, deviceIndices, stream, out);
#if RINGGUARD_GUARD_CUDA
    // Its own profiler range inside the check's: what comes before it is the listing and encodeMine (the
    // layout hash, the host tensors' CRCs); it ends after the copy into pinned memory and its event.
    RECORD_FUNCTION("ringguard::replica_gather", std::vector<c10::IValue>());
    try {
      const c10::cuda::CUDAStreamGuard onStream(streamOf(stream));
      at::Tensor msg, gathered;
      RINGGUARD_RETURN_IF_ERROR(gatherMessage(mine, tensors, deviceIndices, stream, &msg, &gathered));
      at::Tensor host = at::empty(gathered.sizes(), at::TensorOptions().dtype(at::kInt).pinned_memory(true));
      host.copy_(gathered, /*non_blocking=*/true);
      auto done = std::make_unique<at::cuda::CUDAEvent>();
      done->record(streamOf(stream));
      // (msg is a view of the plan's message buffer or of this rank's block of the kept gathered buffer,
      // which the next check rewrites in stream order, after the copy above.)
      *out = std::make_unique<DevicePending>(std::move(host), std::move(done),
                                             std::vector<at::Tensor>{std::move(gathered)});
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal,
                    std::string("replica check: the deferred all-gather failed: ") + e.what());
    }
#else
    return Status(StatusCode::kInvalidArgument, "replica check: this build of ringguard has no CUDA layer");
#endif
  }

  // The gate's: the gathered device tensor is kept for a few checks (another backend's, a new tensor each
  // time; the ringguard group's is one buffer, rewritten in stream order: gatherMessage).
  Status gatherOnDevice(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>& tensors,
                        const std::vector<size_t>& deviceIndices, void* stream,
                        const uint32_t** words) override {
    if (deviceAllGather_.is_none())
      return ReplicaExchange::gatherOnDevice(mine, tensors, deviceIndices, stream, words);
#if RINGGUARD_GUARD_CUDA
    // Its own profiler range inside the check's: what comes before it is the listing and encodeMine (the
    // layout hash, the host tensors' CRCs), what follows it the gate's hold.
    RECORD_FUNCTION("ringguard::replica_gather", std::vector<c10::IValue>());
    try {
      const c10::cuda::CUDAStreamGuard onStream(streamOf(stream));
      at::Tensor msg, gathered;
      RINGGUARD_RETURN_IF_ERROR(gatherMessage(mine, tensors, deviceIndices, stream, &msg, &gathered));
      *words = reinterpret_cast<const uint32_t*>(gathered.data_ptr());
      kept_.push_back(std::move(gathered));
      if (kept_.size() > kKept) kept_.pop_front();
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal,
                    std::string("replica check: the device all-gather failed: ") + e.what());
    }
#else
    return Status(StatusCode::kInvalidArgument, "replica check: this build of ringguard has no CUDA layer");
#endif
  }

  // Gated: the checker's collectives after the gather (its verdict thread's) go over `group` (the check's
  // own, made over the same ranks), called here in C++ with no GIL, so a training thread that holds it
  // (blocked in a launch behind the closed gate, say) cannot stall a repair.
  void useVerdictGroup(ProcessGroupRingguard* group) { verdictGroup_ = group; }

 private:
#if RINGGUARD_GUARD_CUDA
  c10::cuda::CUDAStream streamOf(void* stream) const {
    return c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream),
                                            static_cast<c10::DeviceIndex>(cudaDevice_));
  }

  // This rank's message on the device, on the current stream (the check's), written by the exchange's
  // Crc32ManyPlan into its own message buffer: the host words (header, host tensors' CRCs) copied there,
  // then each device tensor's CRC written over word kHeaderWords + index by the CRC kernel itself (its work
  // table uploaded once while the tensors stay put). `msg` is a view of the plan's buffer, which the next
  // check rewrites in stream order, after what read this one (the all-gather). With `into`, the message is
  // written there instead (this rank's block of the gathered buffer) and `msg` is a view of it.
  Status deviceMessage(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>& tensors,
                       const std::vector<size_t>& deviceIndices, void* stream, uint32_t* into,
                       at::Tensor* msg) {
    const size_t n = deviceIndices.size();
    if (deviceIndices != indexOf_) {
      positions_.resize(n);
      for (size_t i = 0; i < n; ++i)
        positions_[i] = static_cast<uint32_t>(ReplicaMessage::kHeaderWords + deviceIndices[i]);
      indexOf_ = deviceIndices;
    }
    std::vector<Crc32Span> spans(n);
    for (size_t i = 0; i < n; ++i)
      spans[i] = Crc32Span{tensors[deviceIndices[i]].data, tensors[deviceIndices[i]].bytes};
    const uint32_t* words = nullptr;
    RINGGUARD_RETURN_IF_ERROR(crcPlan_.runMessage(spans.data(), positions_.data(), n, mine.data(),
                                                  mine.size(), static_cast<cudaStream_t>(stream), &words,
                                                  into));
    // The view made again only when the message moved (the plan's buffer, or the gathered buffer it is
    // written into; from_blob asks the driver where the pointer lives: ~2.5 us a check).
    if (words != viewOf_ || static_cast<int64_t>(mine.size()) != msgView_.numel() || !msgView_.defined()) {
      msgView_ = at::from_blob(const_cast<uint32_t*>(words), {static_cast<int64_t>(mine.size())},
                               at::TensorOptions().device(at::kCUDA, cudaDevice_).dtype(at::kInt));
      viewOf_ = words;
    }
    *msg = msgView_;
    return Status::ok();
  }

  // This rank's message built and every rank's gathered, rank-major, on the current stream. Through the
  // group's ringguard CUDA communicator (ProcessGroupRingguard::allgatherDeviceWords: no c10d Work, no
  // completion thread; waited for as dist.all_gather_into_tensor waits), the message is written straight into
  // this rank's block of the gathered buffer and gathered in place (at one rank: nothing to copy); through
  // another backend (the Python collective), it gets a copy in a tensor of torch's allocator (the message is
  // a view of the plan's memory, which a backend's recordStream would not know), left to it to keep while its
  // collective reads it.
  Status gatherMessage(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>& tensors,
                       const std::vector<size_t>& deviceIndices, void* stream, at::Tensor* msg,
                       at::Tensor* gathered) {
    if (deviceGroup_ == nullptr) {
      RINGGUARD_RETURN_IF_ERROR(deviceMessage(mine, tensors, deviceIndices, stream, nullptr, msg));
      *gathered = py::cast<at::Tensor>(deviceAllGather_(msg->clone()));
      if (!gathered->is_cuda() || !gathered->is_contiguous() || gathered->scalar_type() != at::kInt ||
          gathered->numel() != msg->numel() * size_) {
        return Status(StatusCode::kInternal, "replica check: the device all-gather returned " +
                                                 std::to_string(gathered->numel()) + " words");
      }
      return Status::ok();
    }
    // One buffer while the stream and the size stay: the next check's message and gather write it in that
    // stream's order, after what read this one (the gate, the copy of a pending); torch's allocator would
    // hand the same block back on that stream anyway, for ~6 us a check.
    const auto words = static_cast<int64_t>(mine.size());
    const cudaStream_t current = static_cast<cudaStream_t>(stream);
    if (!gatheredBuffer_.defined() || gatheredBuffer_.numel() != words * size_ ||
        gatheredStream_ != current) {
      gatheredBuffer_ =
          at::empty({words * size_}, at::TensorOptions().device(at::kCUDA, cudaDevice_).dtype(at::kInt));
      gatheredStream_ = current;
    }
    *gathered = gatheredBuffer_;
    auto* mineInGathered = static_cast<uint32_t*>(gatheredBuffer_.data_ptr()) + words * rank_;
    RINGGUARD_RETURN_IF_ERROR(deviceMessage(mine, tensors, deviceIndices, stream, mineInGathered, msg));
    // Without the GIL, as torch's binding of a collective calls it: the group's lanes may need it.
    std::optional<py::gil_scoped_release> release;
    if (PyGILState_Check()) release.emplace();
    const Status st = deviceGroup_->allgatherDeviceWords(*msg, *gathered);
    if (st.isOk()) return st;
    // kInternal, as allGather's failures (the communicator's own code would read as a mismatch or bad input).
    return Status(StatusCode::kInternal, "replica check: the device all-gather failed: " + st.toString());
  }
#endif

 public:
  Status allGather(const std::vector<uint32_t>& mine, std::vector<uint32_t>* all) override {
    if (verdictGroup_ != nullptr || hostGroup_ != nullptr) {
      ProcessGroupRingguard* g = verdictGroup_ != nullptr ? verdictGroup_ : hostGroup_;
      Status st;
      {
        // The peers' checks may need this process's other threads. The verdict thread holds no GIL.
        std::optional<py::gil_scoped_release> release;
        if (PyGILState_Check()) release.emplace();
        st = g->allgatherHostWords(mine, all);
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

  Status broadcast(const ReplicaTensor& tensor, int root, void* stream) override {
#if RINGGUARD_GUARD_CUDA
    if (verdictGroup_ != nullptr) return broadcastDirect(tensor, root, stream);
#endif
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
  py::object deviceAllGather_;
  py::object hostGroupObject_, deviceGroupObject_;  // keep hostGroup_ and deviceGroup_ alive
  ProcessGroupRingguard* hostGroup_ = nullptr;
  ProcessGroupRingguard* deviceGroup_ = nullptr;
  ProcessGroupRingguard* verdictGroup_ = nullptr;  // kept alive by PyReplicaCheck
  static constexpr size_t kKept = 8;
  std::deque<at::Tensor> kept_;
#if RINGGUARD_GUARD_CUDA
  Crc32ManyPlan crcPlan_;            // the device message (deviceMessage)
  std::vector<size_t> indexOf_;      // the device indices positions_ was made for
  std::vector<uint32_t> positions_;  // their words in the message
  at::Tensor msgView_;               // a view of the message, wherever it is written (deviceMessage)
  at::Tensor gatheredBuffer_;        // the ringguard group's all-gather output (gatherMessage)
  cudaStream_t gatheredStream_ = nullptr;
  const uint32_t* viewOf_ = nullptr;
#endif

#if RINGGUARD_GUARD_CUDA
  // The gated checker's broadcast (its verdict thread's, or check_now()'s): the tensor's bytes as a uint8
  // tensor over the verdict group, device tensors on `stream` (the verdict stream, or the caller's),
  // waited for here.
  Status broadcastDirect(const ReplicaTensor& tensor, int root, void* stream) {
    std::optional<py::gil_scoped_release> release;
    if (PyGILState_Check()) release.emplace();
    try {
      const bool device = tensor.kind == MemoryKind::kDevice;
      const auto options = device ? at::TensorOptions().dtype(at::kByte).device(at::kCUDA, cudaDevice_)
                                  : at::TensorOptions().dtype(at::kByte);
      std::vector<at::Tensor> t{at::from_blob(tensor.data, {static_cast<int64_t>(tensor.bytes)}, options)};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      std::optional<c10::cuda::CUDAStreamGuard> onStream;
      if (device) {
        onStream.emplace(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream),
                                                          static_cast<c10::DeviceIndex>(cudaDevice_)));
      }
      auto work = verdictGroup_->broadcast(t, o);
      work->wait();
      return Status::ok();
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal,
                    "replica repair: the broadcast of '" + tensor.name + "' failed: " + e.what());
    }
  }
#endif
};

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
  d["gated_checks"] = c.gatedChecks;
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
                 py::function broadcast, int cudaDevice, bool sync, py::object deviceAllGather,
                 py::object hostGroup, py::object deviceGroup) {
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
    auto exchange = std::make_unique<PyReplicaExchange>(
        rank, size, std::move(allGather), std::move(broadcast), std::move(deviceAllGather), cudaDevice,
        std::move(hostGroup), std::move(deviceGroup));
    exchange_ = exchange.get();
    cudaDevice_ = cudaDevice;
    check_ =
        std::make_unique<ReplicaChecker>(o, std::move(exchange), makeHostReplicaBackend(), std::move(device));
  }

  // The step hook's call: the tensors listed (in C++) only on the steps that read them (a check, a fault
  // rule's step).
  void afterStep(uint64_t step, ReplicaListing& listing, uintptr_t stream) {
    // A named range, so a torch.profiler trace shows what the check costs a step (bench_replica_check.py
    // --profile); a flag test when nothing profiles (the Python context manager cost ~8 us a step).
    RECORD_FUNCTION("ringguard::replica_check", std::vector<c10::IValue>());
    static const std::vector<ReplicaTensor> kNone;
    const std::vector<ReplicaTensor>* tensors = &kNone;
    if (check_->needsTensors(step)) {
      RECORD_FUNCTION("ringguard::replica_listing", std::vector<c10::IValue>());
      list(listing, &tensors);
    }
    const Status st = check_->afterStep(step, *tensors, reinterpret_cast<void*>(stream));
    if (!st.isOk()) raiseReplica(st);
  }

  void checkNow(uint64_t step, ReplicaListing& listing, uintptr_t stream) {
    const std::vector<ReplicaTensor>* tensors = nullptr;
    list(listing, &tensors);
    const Status st = check_->checkNow(step, *tensors, reinterpret_cast<void*>(stream));
    if (!st.isOk()) raiseReplica(st);
  }

  void flush(uint64_t step, ReplicaListing& listing, uintptr_t stream) {
    const std::vector<ReplicaTensor>* tensors = nullptr;
    list(listing, &tensors);
    const Status st = check_->flush(step, *tensors, reinterpret_cast<void*>(stream));
    if (!st.isOk()) raiseReplica(st);
  }

  // sync=True through the gate (docs/REPLICAS.md, "The gate"): `training` is the replica group's ringguard
  // backend (aborted with the verdict when a check raises), `verdict` a ringguard group of the check's own
  // over the same ranks (the verdict thread's collectives), `stream` the verdict thread's CUDA stream.
  void useGate(py::object training, py::object verdict, uintptr_t stream) {
#if RINGGUARD_GUARD_CUDA
    auto* t = py::cast<ProcessGroupRingguard*>(training);
    auto* v = py::cast<ProcessGroupRingguard*>(verdict);
    if (cudaDevice_ < 0) throw py::value_error("ReplicaCheck: the gate needs the model's tensors on a GPU");
    if (check_->gated()) throw py::value_error("ReplicaCheck: the gate is in use already");
    DeviceReplicaGateOptions o;
    o.device = cudaDevice_;
    o.timeoutNs = static_cast<uint64_t>(t->timeout().count()) * 1000 * 1000;
    std::unique_ptr<ReplicaGate> gate;
    Status st = makeDeviceReplicaGate(o, &gate);
    if (st.isOk()) {
      exchange_->useVerdictGroup(v);
      // A raise aborts the training group (its queued collectives end); a failure of this rank's own also
      // the verdict group, so peers still in a verdict collective with it fail at once, not at their timeout
      // (an agreed verdict leaves it: a peer may still be completing the collective this rank completed).
      st = check_->useGate(std::move(gate), reinterpret_cast<void*>(stream),
                           [t, v](const std::string& why, bool agreed) {
                             t->abortWith(why);
                             if (!agreed) v->abortWith(why);
                           });
      if (!st.isOk()) exchange_->useVerdictGroup(nullptr);
    }
    if (!st.isOk()) raiseReplica(st);
    trainingGroup_ = std::move(training);
    verdictGroup_ = std::move(verdict);
#else
    (void)training;
    (void)verdict;
    (void)stream;
    throw py::value_error("ReplicaCheck: this build of ringguard has no CUDA layer (the gate needs it)");
#endif
  }

  // Gated: the verdicts of the checks made so far, settled (no GIL held while waiting).
  void awaitVerdicts() {
    py::gil_scoped_release release;
    check_->awaitVerdicts();
  }

  ~PyReplicaCheck() {
    if (check_ == nullptr) return;
    {
      py::gil_scoped_release release;  // the verdict thread may be ending a collective
      check_->stopVerdicts();
    }
    check_.reset();  // the exchange's Python callables, with the GIL
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
  void list(ReplicaListing& listing, const std::vector<ReplicaTensor>** tensors) {
    check_->layoutKnown(0);  // a read that fails leaves no version behind
    const Status st = listing.read(tensors);
    if (!st.isOk()) raiseReplica(st);
    check_->layoutKnown(listing.layoutVersion());
  }

  std::unique_ptr<ReplicaChecker> check_;
  PyReplicaExchange* exchange_ = nullptr;  // owned by check_
  int cudaDevice_ = -1;
  py::object trainingGroup_, verdictGroup_;  // the gate's groups, alive as long as the checker
};

}  // namespace
}  // namespace ringguard

// Called from module.cc's PYBIND11_MODULE.
void ringguardRegisterReplicaBindings(py::module_& m) {
  using ringguard::PyReplicaCheck;
  using ringguard::ReplicaListing;
  // What a check fingerprints (replica_listing.h); python/ringguard/replicas.py makes one per check.
  py::class_<ReplicaListing>(m, "ReplicaListing")
      .def(py::init<py::object, py::object, bool, py::object, py::dict, py::function, py::object>(),
           py::arg("model"), py::arg("optimizer"), py::arg("include_state"), py::arg("include_buffers"),
           py::arg("names"), py::arg("marked"), py::arg("dtensor"))
      .def("named",
           [](ReplicaListing& l) {
             std::vector<std::pair<std::string, at::Tensor>> named;
             const ringguard::Status st = l.named(&named);
             if (!st.isOk()) ringguard::raiseReplica(st);
             return named;
           })
      .def("read",  // lists as a check does, without handing the tensors to Python: the number listed
           [](ReplicaListing& l) {
             const std::vector<ringguard::ReplicaTensor>* tensors = nullptr;
             const ringguard::Status st = l.read(&tensors);
             if (!st.isOk()) ringguard::raiseReplica(st);
             return tensors->size();
           })
      .def("tensor", &ReplicaListing::tensor, py::arg("name"))
      .def("checked", &ReplicaListing::checked)
      .def("reads", &ReplicaListing::reads)
      .def("registrations", &ReplicaListing::registrations);
  py::class_<PyReplicaCheck>(m, "ReplicaCheck")
      .def(py::init<const std::string&, int64_t, int, int, py::function, py::function, int, bool, py::object,
                    py::object, py::object>(),
           py::arg("on_mismatch"), py::arg("every"), py::arg("rank"), py::arg("size"), py::arg("all_gather"),
           py::arg("broadcast"), py::arg("cuda_device") = -1, py::arg("sync") = true,
           py::arg("device_all_gather") = py::none(), py::arg("host_group") = py::none(),
           py::arg("device_group") = py::none())
      .def("after_step", &PyReplicaCheck::afterStep, py::arg("step"), py::arg("listing"),
           py::arg("stream") = 0)
      .def(
          "needs_tensors", [](PyReplicaCheck& c, uint64_t step) { return c.check().needsTensors(step); },
          py::arg("step"))
      .def("check_now", &PyReplicaCheck::checkNow, py::arg("step"), py::arg("listing"), py::arg("stream") = 0)
      .def("flush", &PyReplicaCheck::flush, py::arg("step"), py::arg("listing"), py::arg("stream") = 0)
      .def("set_fault", &PyReplicaCheck::setFault, py::arg("spec"))
      .def("use_gate", &PyReplicaCheck::useGate, py::arg("training_group"), py::arg("verdict_group"),
           py::arg("stream"))
      .def("gated", [](PyReplicaCheck& c) { return c.check().gated(); })
      .def("await_verdicts", &PyReplicaCheck::awaitVerdicts)
      .def("counters",
           [](PyReplicaCheck& c) {
             c.awaitVerdicts();
             return ringguard::countersDict(c.check().counters());
           })
      .def("last_report", [](PyReplicaCheck& c) {
        c.awaitVerdicts();
        return ringguard::reportDict(c.check().lastReport());
      });
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
