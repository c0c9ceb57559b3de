// GraphGuard: a guarded op as one CUDA graph (include/ringguard/guard/graph_guard.h, docs/GUARD.md "The CUDA
// graph path"). The graph, captured once:
//
//   replays = 0; snapshot(state); body; faults; scan(outputs); verdict; decide
//   WHILE (condition) { restore(state); body; faults; scan(outputs); verdict; decide }
//   copy {verdict, replays} to pinned host memory
//
// decide (guardReplayDecisionDevice) sets the WHILE node's condition to 1, and counts a replay, while the
// verdict is bad and fewer than maxReplays replays ran. The main graph is captured with the conditional
// node added between its stream-captured halves (cudaStreamGetCaptureInfo / cudaGraphAddNode /
// cudaStreamUpdateCaptureDependencies, as CUDA's documentation describes for conditional nodes under
// capture); the loop body is captured into the node's body graph with cudaStreamBeginCaptureToGraph.
#include "ringguard/guard/graph_guard.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/memory_pool.h"
#include "cuda/snapshot.h"
#include "guard/device/injected_value.h"

namespace ringguard {

namespace {

// What the graph's last node copies to pinned host memory.
struct GraphOutcome {
  GuardVerdict verdict;
  unsigned replays;
  unsigned pad;
};

Status invalid(const std::string& op, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, "GraphGuard '" + op + "': " + what);
}

// Everything about the op and options that needs no GPU: checked before any CUDA call.
Status validateGraphOp(const GraphGuardedOp& op, const GraphGuardOptions& options) {
  const std::string& name = op.name;
  if (!op.body) return invalid(name, "no body");
  if (options.maxReplays < 0 || options.maxReplays > 31) {
    return invalid(name, "maxReplays " + std::to_string(options.maxReplays) + " is outside 0 .. 31");
  }
  auto check = [&](const GuardBuffer& b, const char* role, bool mustBeFloat) -> Status {
    if (b.kind != MemoryKind::kDevice)
      return invalid(name, std::string(role) + " '" + b.name + "' is not device memory");
    if (b.data == nullptr && b.bytes != 0)
      return invalid(name, std::string(role) + " '" + b.name + "' is null");
    if (b.bytes % dataTypeSize(b.dtype) != 0) {
      return invalid(name, std::string(role) + " '" + b.name + "': " + std::to_string(b.bytes) +
                               " bytes is not a whole number of " + dataTypeName(b.dtype) + " elements");
    }
    if (mustBeFloat && !isFloatingType(b.dtype) && !isComplexType(b.dtype)) {
      return invalid(name,
                     std::string(role) + " '" + b.name + "' has dtype " + dataTypeName(b.dtype) +
                         ", which holds no NaN or Inf (outputs are scanned: f32, f64, f16, bf16, complex)");
    }
    return Status::ok();
  };
  for (const GuardBuffer& b : op.state) RINGGUARD_RETURN_IF_ERROR(check(b, "state", false));
  for (const GuardBuffer& b : op.outputs) RINGGUARD_RETURN_IF_ERROR(check(b, "output", true));
  for (size_t i = 0; i < options.faults.size(); ++i) {
    const GraphFault& f = options.faults[i];
    if (f.output >= op.outputs.size()) {
      return invalid(name, "fault " + std::to_string(i) + " names output " + std::to_string(f.output) +
                               " of " + std::to_string(op.outputs.size()));
    }
    if (!isFloatingType(op.outputs[f.output].dtype)) {
      return invalid(name, "fault " + std::to_string(i) + " names output '" + op.outputs[f.output].name +
                               "' of dtype " + dataTypeName(op.outputs[f.output].dtype) +
                               " (faults are written into f32, f64, f16 or bf16 outputs)");
    }
    if (f.element >= op.outputs[f.output].count()) {
      return invalid(name, "fault " + std::to_string(i) + " names element " + std::to_string(f.element) +
                               " of output '" + op.outputs[f.output].name + "' (" +
                               std::to_string(op.outputs[f.output].count()) + " elements)");
    }
  }
  return Status::ok();
}

}  // namespace

class GraphGuard::Impl {
 public:
  ~Impl() {
    cuda_detail::DeviceGuard guard(device_);
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    if (done_ != nullptr) (void)cudaEventDestroy(done_);
    if (capture_ != nullptr) {
      (void)cudaStreamSynchronize(capture_);
      for (void* p : deviceBlocks_) (void)pool_->free(p, capture_);
      (void)cudaStreamSynchronize(capture_);
      (void)cudaStreamDestroy(capture_);
    }
    if (outcomeHost_ != nullptr) (void)pinned_.free(outcomeHost_);
    // Tearing down after a failed capture can leave a (non-sticky) error behind; the next launch check on
    // this thread must not report it as its own (measured: the next GraphGuard's scan launch did).
    (void)cudaGetLastError();
  }

  Status init(int device, const GraphGuardedOp& op, const GraphGuardOptions& options) {
    device_ = device;
    op_ = op;
    options_ = options;
    RINGGUARD_RETURN_IF_ERROR(DevicePool::create(device_, &pool_));
    RINGGUARD_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_, cudaStreamNonBlocking));
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    for (const GuardBuffer& b : op_.state) {
      void* p = nullptr;
      RINGGUARD_RETURN_IF_ERROR(allocate(b.bytes, &p));
      snapshots_.push_back(p);
    }
    void* p = nullptr;
    RINGGUARD_RETURN_IF_ERROR(
        allocate(sizeof(NanScanResult) * (op_.outputs.empty() ? 1 : op_.outputs.size()), &p));
    results_ = static_cast<NanScanResult*>(p);
    RINGGUARD_RETURN_IF_ERROR(allocate(sizeof(GraphOutcome), &p));
    outcome_ = static_cast<GraphOutcome*>(p);
    RINGGUARD_RETURN_IF_ERROR(pinned_.allocate(sizeof(GraphOutcome), &outcomeHost_));
    std::memset(outcomeHost_, 0, sizeof(GraphOutcome));
    for (size_t i = 0; i < op_.outputs.size(); ++i) {
      const GuardBuffer& b = op_.outputs[i];
      spans_.push_back(NanScanSpan{b.data, b.count(), b.dtype, results_ + i});
    }
    RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(capture_));  // the pool's blocks are usable from any stream
    return capture();
  }

  Status launch(void* stream) {
    cuda_detail::DeviceGuard guard(device_);
    RINGGUARD_CUDA_CHECK(guard.error());
    // The graph's snapshots, slots and outcome are one set: a launch on another stream than the last one
    // waits for it (on the same stream this is already the stream's order).
    if (launches_ > 0) RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_, 0));
    RINGGUARD_CUDA_CHECK(cudaGraphLaunch(exec_, static_cast<cudaStream_t>(stream)));
    RINGGUARD_CUDA_CHECK(cudaEventRecord(done_, static_cast<cudaStream_t>(stream)));
    ++launches_;
    unread_ = true;
    return Status::ok();
  }

  Status report(GraphGuardReport* out) {
    cuda_detail::DeviceGuard guard(device_);
    RINGGUARD_CUDA_CHECK(guard.error());
    RINGGUARD_CUDA_CHECK(cudaEventSynchronize(done_));
    GraphOutcome o;
    std::memcpy(&o, outcomeHost_, sizeof(o));
    if (unread_) {
      totalReplays_ += o.replays;
      unread_ = false;
    }
    GraphGuardReport r;
    r.replays = o.replays;
    r.clean = o.verdict.badScans == 0;
    r.firstBadOutput = r.clean ? 0 : size_t(o.verdict.firstBadScan);
    r.badElements = o.verdict.badElements;
    r.launches = launches_;
    r.totalReplays = totalReplays_;
    *out = r;
    return Status::ok();
  }

  Status restore(void* stream) {
    cuda_detail::DeviceGuard guard(device_);
    RINGGUARD_CUDA_CHECK(guard.error());
    if (launches_ > 0) RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_, 0));
    return enqueueCopies(static_cast<cudaStream_t>(stream), /*toSnapshot=*/false);
  }

 private:
  Status allocate(size_t bytes, void** out) {
    RINGGUARD_RETURN_IF_ERROR(pool_->allocate(bytes, capture_, out));
    if (*out != nullptr) deviceBlocks_.push_back(*out);
    return Status::ok();
  }

  Status enqueueCopies(cudaStream_t s, bool toSnapshot) {
    for (size_t i = 0; i < op_.state.size(); ++i) {
      const GuardBuffer& b = op_.state[i];
      if (b.bytes == 0) continue;
      void* dst = toSnapshot ? snapshots_[i] : b.data;
      const void* src = toSnapshot ? b.data : snapshots_[i];
      RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(dst, src, b.bytes, cudaMemcpyDeviceToDevice, s));
    }
    return Status::ok();
  }

  // One attempt after the snapshot or the restore: the body, the faults of this attempt, the scan, the
  // verdict and the decision.
  Status enqueueAttempt(cudaStream_t s) {
    Status st = op_.body(s);
    if (!st.isOk()) return Status(st.code(), "body: " + st.message());  // captureInto names the op
    unsigned* replays = &outcome_->replays;
    for (const GraphFault& f : options_.faults) {
      const GuardBuffer& b = op_.outputs[f.output];
      RINGGUARD_RETURN_IF_ERROR(guardInjectOnAttemptsDevice(
          b.data, f.element, b.dtype, injectedValueOf(f.value), replays, f.attempts, s));
    }
    RINGGUARD_RETURN_IF_ERROR(nanScanManyDevice(spans_.data(), spans_.size(), s));
    RINGGUARD_RETURN_IF_ERROR(guardVerdictDevice(results_, spans_.size(), 0, false, &outcome_->verdict, s));
    return guardReplayDecisionDevice(handle_, &outcome_->verdict, replays, unsigned(options_.maxReplays), s);
  }

  Status enqueueMain(cudaStream_t s) {
    RINGGUARD_CUDA_CHECK(cudaMemsetAsync(&outcome_->replays, 0, sizeof(unsigned), s));
    RINGGUARD_RETURN_IF_ERROR(enqueueCopies(s, /*toSnapshot=*/true));
    RINGGUARD_RETURN_IF_ERROR(enqueueAttempt(s));
    // The WHILE node, after everything captured so far.
    cudaStreamCaptureStatus status;
    cudaGraph_t graph = nullptr;
    const cudaGraphNode_t* deps = nullptr;
    size_t numDeps = 0;
    RINGGUARD_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, &graph, &deps, nullptr, &numDeps));
    cudaGraphNodeParams params = {};
    params.type = cudaGraphNodeTypeConditional;
    params.conditional.handle = handle_;
    params.conditional.type = cudaGraphCondTypeWhile;
    params.conditional.size = 1;
    cudaGraphNode_t loop = nullptr;
    RINGGUARD_CUDA_CHECK(cudaGraphAddNode(&loop, graph, deps, nullptr, numDeps, &params));
    body_ = params.conditional.phGraph_out[0];
    RINGGUARD_CUDA_CHECK(
        cudaStreamUpdateCaptureDependencies(s, &loop, nullptr, 1, cudaStreamSetCaptureDependencies));
    RINGGUARD_CUDA_CHECK(
        cudaMemcpyAsync(outcomeHost_, outcome_, sizeof(GraphOutcome), cudaMemcpyDeviceToHost, s));
    return Status::ok();
  }

  Status capture() {
    cuda_detail::DeviceGuard guard(device_);
    RINGGUARD_CUDA_CHECK(guard.error());
    RINGGUARD_CUDA_CHECK(cudaGraphCreate(&graph_, 0));
    RINGGUARD_CUDA_CHECK(cudaGraphConditionalHandleCreate(&handle_, graph_, 0, cudaGraphCondAssignDefault));
    // The main graph, then the loop body into the WHILE node's body graph. A capture that fails (the body
    // did something a graph cannot hold) is ended before returning, so the stream is usable again.
    RINGGUARD_RETURN_IF_ERROR(captureInto(graph_, [this](cudaStream_t s) { return enqueueMain(s); }));
    RINGGUARD_RETURN_IF_ERROR(captureInto(body_, [this](cudaStream_t s) {
      RINGGUARD_RETURN_IF_ERROR(enqueueCopies(s, /*toSnapshot=*/false));
      return enqueueAttempt(s);
    }));
    cudaError_t err = cudaGraphInstantiate(&exec_, graph_, 0);
    if (err != cudaSuccess) {
      return invalid(op_.name, std::string("not capturable: instantiating its graph failed: ") +
                                   cudaGetErrorString(err));
    }
    return Status::ok();
  }

  template <typename F>
  Status captureInto(cudaGraph_t graph, F&& enqueue) {
    RINGGUARD_CUDA_CHECK(cudaStreamBeginCaptureToGraph(capture_, graph, nullptr, nullptr, 0,
                                                       cudaStreamCaptureModeThreadLocal));
    Status st = enqueue(capture_);
    cudaGraph_t captured = nullptr;
    const cudaError_t end = cudaStreamEndCapture(capture_, &captured);
    (void)cudaGetLastError();  // a failed capture leaves its error behind
    if (!st.isOk()) {
      return invalid(op_.name,
                     "not capturable: " + st.message() + " (run it through the host-driven Guard instead)");
    }
    if (end != cudaSuccess) {
      return invalid(op_.name, std::string("not capturable: ending the capture failed: ") +
                                   cudaGetErrorString(end) +
                                   " (run it through the host-driven Guard instead)");
    }
    return Status::ok();
  }

  int device_ = 0;
  GraphGuardedOp op_;
  GraphGuardOptions options_;
  std::unique_ptr<DevicePool> pool_;
  PinnedHostPool pinned_;
  cudaStream_t capture_ = nullptr;
  cudaEvent_t done_ = nullptr;
  std::vector<void*> deviceBlocks_;
  std::vector<void*> snapshots_;
  std::vector<NanScanSpan> spans_;
  NanScanResult* results_ = nullptr;
  GraphOutcome* outcome_ = nullptr;
  void* outcomeHost_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraph_t body_ = nullptr;  // owned by the conditional node
  cudaGraphExec_t exec_ = nullptr;
  cudaGraphConditionalHandle handle_ = 0;
  uint64_t launches_ = 0;
  uint64_t totalReplays_ = 0;
  bool unread_ = false;
};

GraphGuard::GraphGuard(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GraphGuard::~GraphGuard() = default;

Status GraphGuard::create(int device, const GraphGuardedOp& op, const GraphGuardOptions& options,
                          std::unique_ptr<GraphGuard>* out) {
  RINGGUARD_RETURN_IF_ERROR(validateGraphOp(op, options));
  auto impl = std::make_unique<Impl>();
  cuda_detail::DeviceGuard guard(device);
  RINGGUARD_CUDA_CHECK(guard.error());
  RINGGUARD_RETURN_IF_ERROR(impl->init(device, op, options));
  out->reset(new GraphGuard(std::move(impl)));
  return Status::ok();
}

Status GraphGuard::launch(void* stream) { return impl_->launch(stream); }
Status GraphGuard::report(GraphGuardReport* out) { return impl_->report(out); }
Status GraphGuard::restore(void* stream) { return impl_->restore(stream); }

}  // namespace ringguard
