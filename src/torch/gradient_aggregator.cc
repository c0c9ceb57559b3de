#include "ringguard/torch/gradient_aggregator.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <sstream>

#include "ringguard/aggregation/bucket_plan.h"
#include "ringguard/aggregation/launch_order.h"
#include "ringguard/replicas/gradient_outliers.h"
#include "ringguard/torch/convert.h"

#if RINGGUARD_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "ringguard/cuda/device_buffer_pool.h"
#endif

namespace ringguard {

namespace {

std::string describe(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << t.scalar_type();
  return os.str();
}

std::string deviceName(const torch::Device& d) { return d.str(); }

bool movesDeviceMemory(const Communicator& comm) { return comm.memory() == MemoryKind::kDevice; }

#if RINGGUARD_TORCH_CUDA
// torch's own guard and events throw c10::Error on a CUDA failure. The buckets' deleter keeps the library's
// non-throwing release (DeviceBufferPool::release: nothing may throw out of it); the hooks turn the exception
// into the step's Status (asStatus), so every rank still launches the same collectives.
using ScopedDevice = c10::cuda::CUDAGuard;

template <typename F>
Status asStatus(const char* what, F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return Status(StatusCode::kInternal, std::string(what) + ": " + e.what_without_backtrace());
  }
  return Status::ok();
}

cudaStream_t currentStream(int device) {
  return c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(device)).stream();
}

// A raw stream (the caller's, as the hooks and launches see it) as torch's stream type.
c10::cuda::CUDAStream torchStream(cudaStream_t s, int device) {
  return c10::cuda::getStreamFromExternal(s, c10::DeviceIndex(device));
}

// Gradient offsets in a device bucket start on this many bytes: every vector width of the kernels that
// accumulate into them. The padding is zero and reduces to zero.
constexpr int64_t kDeviceAlignBytes = 256;
#endif

// One verified allreduce of a host vector through `comm`: directly for a host communicator, through a
// temporary device copy on the current stream for a device communicator (construction only: it waits).
Status allreduceHostVector(Communicator* comm, const torch::Device& device, std::vector<int64_t>* v,
                           ReduceOp op) {
  if (!device.is_cuda()) return comm->allreduce(v->data(), v->data(), v->size(), DataType::kInt64, op);
#if RINGGUARD_TORCH_CUDA
  ScopedDevice guard(device.index());
  torch::Tensor d = torch::from_blob(v->data(), {int64_t(v->size())}, torch::kLong).to(device);
  RINGGUARD_RETURN_IF_ERROR(comm->allreduce(d.data_ptr(), d.data_ptr(), v->size(), DataType::kInt64, op,
                                            currentStream(device.index())));
  torch::Tensor back = d.cpu();  // the allreduce's Work::wait ordered the current stream after the result
  if (!v->empty()) std::memcpy(v->data(), back.data_ptr(), v->size() * sizeof(int64_t));
  return Status::ok();
#else
  return Status(StatusCode::kInternal, "device parameters in a build without CUDA");
#endif
}

// Every rank must hold the same parameters: compares (dtype, rank, numel, shape hash) of each parameter
// through two verified allreduces (min and max) and names the first parameter the ranks disagree on.
Status checkSameParameters(Communicator* comm, const torch::Device& device,
                           const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  std::vector<int64_t> desc;
  for (const auto& [name, t] : params) {
    int64_t shapeHash = 1469598103934665603LL;
    for (int64_t d : t.sizes()) shapeHash = (shapeHash ^ d) * 1099511628211LL;
    desc.insert(desc.end(), {int64_t(t.scalar_type()), t.dim(), t.numel(), shapeHash});
  }
  std::vector<int64_t> lo = desc, hi = desc;
  Status st = allreduceHostVector(comm, device, &lo, ReduceOp::kMin);
  if (st.isOk()) st = allreduceHostVector(comm, device, &hi, ReduceOp::kMax);
  if (st.code() == StatusCode::kFingerprintMismatch) {
    return Status(StatusCode::kInvalidArgument, "ranks have different numbers of parameters (this rank: " +
                                                    std::to_string(params.size()) + "): " + st.message());
  }
  RINGGUARD_RETURN_IF_ERROR(st);
  for (size_t i = 0; i < params.size(); ++i) {
    for (size_t k = 0; k < 4; ++k) {
      if (lo[4 * i + k] != hi[4 * i + k]) {
        std::ostringstream os;
        os << "parameter '" << params[i].first << "' (index " << i << ") differs across ranks: rank "
           << comm->rank() << " has " << describe(params[i].second)
           << "; element counts across ranks range over [" << lo[4 * i + 2] << ", " << hi[4 * i + 2] << "]";
        return Status(StatusCode::kInvalidArgument, os.str());
      }
    }
  }
  return Status::ok();
}

// Local checks of where the parameters live against what the communicator moves: one device for all,
// CPU with a host communicator, CUDA with a device communicator (in a build with CUDA).
Status checkDevices(const Communicator& comm,
                    const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  if (params.empty()) return Status::ok();
  const std::string& name = params[0].first;
  const torch::Device d = params[0].second.device();
  for (size_t i = 1; i < params.size(); ++i) {
    const torch::Device other = params[i].second.device();
    if (other != d) {
      return Status(StatusCode::kInvalidArgument,
                    "parameter '" + params[i].first + "' (index " + std::to_string(i) + ") is on " +
                        deviceName(other) + " but parameter '" + name + "' is on " + deviceName(d) +
                        ": all parameters of one GradientAggregator must be on one device");
    }
  }
  if (!d.is_cpu() && !d.is_cuda()) {
    return Status(StatusCode::kInvalidArgument, "parameter '" + name + "' is on " + deviceName(d) +
                                                    ": GradientAggregator takes CPU or CUDA tensors");
  }
#if !RINGGUARD_TORCH_CUDA
  if (d.is_cuda()) {
    return Status(StatusCode::kInvalidArgument,
                  "parameter '" + name + "' is on " + deviceName(d) +
                      ", but this build of ringguard has no CUDA support (RINGGUARD_WITH_CUDA)");
  }
#endif
  const bool deviceComm = movesDeviceMemory(comm);
  if (d.is_cuda() && !deviceComm) {
    return Status(StatusCode::kInvalidArgument,
                  "parameter '" + name + "' is on " + deviceName(d) +
                      ", but the communicator moves host memory (transport '" + comm.transportName() +
                      "'): CUDA parameters need cuda::createDeviceCommunicator");
  }
  if (d.is_cpu() && deviceComm) {
    return Status(StatusCode::kInvalidArgument,
                  "parameter '" + name +
                      "' is on cpu, but the communicator moves device memory (transport '" +
                      comm.transportName() + "'): CPU parameters need mpi::createCommunicator");
  }
  return Status::ok();
}

}  // namespace

#if RINGGUARD_TORCH_CUDA
// What CUDA parameters add: the device pool the buckets come from, and the events that order the streams
// gradients are produced on, the streams collectives are launched after, and the stream finish() runs on.
struct GradientAggregator::CudaState {
  // torch's event type (created on first record, without timing; destroyed on its device). Safe to drop
  // while a wait on it is pending: the driver releases an event once its work completes.
  struct StreamEvent {
    cudaStream_t stream = nullptr;
    at::cuda::CUDAEvent event;
    bool recorded = false;  // this step
  };

  int device = 0;
  cudaStream_t home = nullptr;  // current at create(): buckets are allocated, and freed, in its order
  std::shared_ptr<cuda::DeviceBufferPool> pool;
  std::vector<std::vector<StreamEvent>> ready;  // per bucket: the streams its gradients came from this step
  std::vector<cudaStream_t> launchStreams;      // this step: the streams launches were ordered after
  std::vector<StreamEvent> joins;               // per stream: the event another stream waits for it by
  std::vector<cudaStream_t> seen;               // every stream that touched a bucket (joined at the end)

  void see(cudaStream_t s) {
    if (std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
  }

  static StreamEvent& eventFor(std::vector<StreamEvent>* list, cudaStream_t s) {
    for (StreamEvent& e : *list) {
      if (e.stream == s) return e;
    }
    list->emplace_back();
    list->back().stream = s;
    return list->back();
  }

  // Hook: bucket b's gradient just accumulated on `s`; mark that point (a later record on the same stream
  // supersedes an earlier one, so one event per stream and bucket suffices).
  void gradReady(int b, cudaStream_t s) {
    see(s);
    StreamEvent& e = eventFor(&ready[b], s);
    e.event.record(torchStream(s, device));
    e.recorded = true;
  }

  // Before bucket b is launched after `launch`: `launch` waits for its gradients made on other streams
  // (the communicator's fence then makes the communication stream wait for `launch`).
  void orderLaunch(int b, cudaStream_t launch) {
    see(launch);
    if (std::find(launchStreams.begin(), launchStreams.end(), launch) == launchStreams.end()) {
      launchStreams.push_back(launch);
    }
    for (StreamEvent& e : ready[b]) {
      if (e.recorded && e.stream != launch) e.event.block(torchStream(launch, device));
    }
  }

  // `waiter` waits for everything enqueued on `s` so far.
  void join(cudaStream_t waiter, cudaStream_t s) {
    if (waiter == s) return;
    StreamEvent& e = eventFor(&joins, s);
    e.event.record(torchStream(s, device));
    e.event.block(torchStream(waiter, device));
  }

  void resetStep() {
    for (auto& list : ready) {
      for (StreamEvent& e : list) e.recorded = false;
    }
    launchStreams.clear();
  }
};
#else
struct GradientAggregator::CudaState {};
#endif

GradientAggregator::GradientAggregator(Communicator* comm, const AggregatorOptions& options)
    : comm_(comm), options_(options) {}

Status GradientAggregator::create(Communicator* comm,
                                  const std::vector<std::pair<std::string, torch::Tensor>>& params,
                                  const AggregatorOptions& options,
                                  std::unique_ptr<GradientAggregator>* out) {
  for (size_t i = 0; i < params.size(); ++i) {
    DataType dt;
    const torch::Tensor& t = params[i].second;
    if (!t.requires_grad() || !t.is_leaf()) {
      return Status(StatusCode::kInvalidArgument,
                    "parameter '" + params[i].first + "' is not a leaf tensor that requires grad");
    }
    if (!toDataType(t.scalar_type(), &dt)) {
      return Status(StatusCode::kInvalidArgument, "parameter '" + params[i].first +
                                                      "' has unsupported dtype " +
                                                      std::string(c10::toString(t.scalar_type())));
    }
  }
  RINGGUARD_RETURN_IF_ERROR(checkDevices(*comm, params));
  torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params[0].second.device();
#if RINGGUARD_TORCH_CUDA
  if (params.empty() && movesDeviceMemory(*comm))
    device = torch::Device(torch::kCUDA, c10::cuda::current_device());
#endif
  RINGGUARD_RETURN_IF_ERROR(checkSameParameters(comm, device, params));

  std::unique_ptr<GradientAggregator> agg(new GradientAggregator(comm, options));
  agg->device_ = device;
  agg->params_.resize(params.size());
#if RINGGUARD_TORCH_CUDA
  std::unique_ptr<ScopedDevice> deviceGuard;
  if (device.is_cuda()) {
    auto cs = std::make_unique<CudaState>();
    cs->device = device.index();
    deviceGuard = std::make_unique<ScopedDevice>(cs->device);
    cs->home = currentStream(cs->device);
    RINGGUARD_RETURN_IF_ERROR(cuda::DeviceBufferPool::create(cs->device, &cs->pool));
    cs->see(cs->home);
    agg->cuda_ = std::move(cs);
  }
#endif
  // Buckets in reverse registration order (gradients of the last layers are ready first), one dtype and
  // device per bucket, each at most bucketBytes unless a single parameter is larger. CPU buckets are
  // packed; device buckets start every gradient on kDeviceAlignBytes.
  std::vector<GradientSpec> specs;
  for (const auto& [name, t] : params) {
    specs.push_back(GradientSpec{size_t(t.numel()), size_t(t.element_size()), int64_t(t.scalar_type()),
                                 int64_t(t.device().type()) * 65536 + t.device().index()});
  }
  size_t alignBytes = 1;
#if RINGGUARD_TORCH_CUDA
  if (agg->cuda_) alignBytes = size_t(kDeviceAlignBytes);
#endif
  std::vector<BucketLayout> layout;
  RINGGUARD_RETURN_IF_ERROR(planBuckets(specs, options.bucketBytes, alignBytes, &layout));
  for (size_t b = 0; b < layout.size(); ++b) {
    Bucket bucket;
    const torch::Tensor& first = params[layout[b].params.front()].second;
    const int64_t total = int64_t(layout[b].elements);
    if (!agg->cuda_) {
      bucket.flat = torch::zeros({total}, first.options().requires_grad(false));
    } else {
#if RINGGUARD_TORCH_CUDA
      // One allocation from the stream-ordered pool, zeroed, returned to the pool (in the order of the
      // home stream) when the last tensor over it is gone: the bucket's and every gradient's.
      CudaState& cs = *agg->cuda_;
      const size_t bytes = size_t(total) * first.element_size();
      void* ptr = nullptr;
      RINGGUARD_RETURN_IF_ERROR(cs.pool->allocateZeroed(bytes, cs.home, &ptr));
      std::shared_ptr<cuda::DeviceBufferPool> pool = cs.pool;
      const cudaStream_t home = cs.home;
      bucket.flat = at::from_blob(
          ptr, {total}, [pool, home](void* p) { pool->release(p, home); },
          first.options().requires_grad(false), first.device());
#endif
    }
    for (size_t k = 0; k < layout[b].params.size(); ++k) {
      const size_t i = layout[b].params[k];
      Param& p = agg->params_[i];
      p.name = params[i].first;
      p.tensor = params[i].second;
      p.bucket = int(b);
      p.offset = int64_t(layout[b].offsets[k]);
      // A plain tensor over the bucket's memory, not an autograd view: libtorch's zero_grad(false) calls
      // detach_() on every grad, which views refuse. The deleter holds the bucket alive.
      torch::Tensor flat = bucket.flat;
      void* data = static_cast<char*>(flat.data_ptr()) + p.offset * flat.element_size();
      if (!agg->cuda_) {
        p.view = torch::from_blob(
            data, p.tensor.sizes(), [flat](void*) {}, flat.options());
      } else {
        // target_device: no pointer-attribute query per gradient.
        p.view = at::from_blob(
            data, p.tensor.sizes(), [flat](void*) {}, flat.options(), flat.device());
      }
      if (p.tensor.grad().defined()) p.view.copy_(p.tensor.grad());
      p.tensor.mutable_grad() = p.view;  // backward accumulates into the bucket from now on
    }
    bucket.params = layout[b].params;
    agg->buckets_.push_back(std::move(bucket));
  }
#if RINGGUARD_TORCH_CUDA
  if (agg->cuda_) {
    CudaState& cs = *agg->cuda_;
    cs.ready.resize(agg->buckets_.size());
    // Once, at construction: the zeroed buckets are then ready for whatever stream backward runs on.
    RINGGUARD_RETURN_IF_ERROR(cuda::synchronizeStream(cs.home));
  }
#endif
  std::vector<int> bucketOf;
  for (const Param& p : agg->params_) bucketOf.push_back(p.bucket);
  agg->order_ = std::make_unique<LaunchOrder>(std::move(bucketOf));
  GradientAggregator* self = agg.get();
  for (size_t i = 0; i < params.size(); ++i) {
    Param& p = agg->params_[i];
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    p.hookKey = p.accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [self, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          self->onGradReady(i);
          return outputs;
        }));
  }
  *out = std::move(agg);
  return Status::ok();
}

GradientAggregator::~GradientAggregator() {
  for (Param& p : params_) {
    if (p.accumulator) p.accumulator->del_post_hook(p.hookKey);
  }
  for (Bucket& b : buckets_) {
    if (b.work) (void)b.work->wait();  // the communicator may still be writing the bucket
  }
#if RINGGUARD_TORCH_CUDA
  if (cuda_) {
    // The buckets are freed in the order of the home stream: make it wait for every stream the
    // aggregator saw touch them (the launch streams are ordered after the results by the waits above).
    std::optional<ScopedDevice> guard;  // nothing may throw out of a destructor
    (void)asStatus("selecting the device at destruction", [&] { guard.emplace(cuda_->device); });
    for (cudaStream_t s : cuda_->seen) {
      (void)asStatus("joining the streams at destruction", [&] { cuda_->join(cuda_->home, s); });
    }
  }
#endif
}

void GradientAggregator::onGradReady(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!stepStarted_) {
    stepStarted_ = true;
    before_ = comm_->counters();
    // Runs when the whole backward pass is done: the trace shows whether buckets were launched before it.
    torch::autograd::Engine::get_default_engine().queue_callback([this] {
      std::lock_guard<std::mutex> l(mutex_);
      trace_.push_back("backward_end");
    });
  }
  Param& p = params_[index];
  if (order_->isReady(index)) return;  // already counted this step
  const torch::Tensor& grad = p.tensor.grad();
  if (grad.defined() && !grad.is_same(p.view)) {
    // zero_grad(set_to_none) replaced the bucket view with a fresh tensor: bring it home and count it.
    p.view.copy_(grad);
    p.tensor.mutable_grad() = p.view;
    gradCopies_++;
  }
  order_->markReady(index);
  if (noSync_) return;
  void* stream = nullptr;
#if RINGGUARD_TORCH_CUDA
  if (cuda_) {
    // The engine runs this hook with the stream the gradient was accumulated on as the current one.
    cudaStream_t s = currentStream(cuda_->device);
    Status st = asStatus("recording a gradient's event", [&] { cuda_->gradReady(p.bucket, s); });
    if (!st.isOk() && hookError_.isOk()) hookError_ = st;
    stream = s;
  }
#endif
  launchReady(false, stream);
}

// Caller holds mutex_.
void GradientAggregator::launchReady(bool all, void* stream) {
  for (int next = order_->nextLaunch(all); next >= 0; next = order_->nextLaunch(all)) {
    Bucket& b = buckets_[size_t(next)];
    DataType dt = DataType::kFloat32;
    toDataType(b.flat.scalar_type(), &dt);
#if RINGGUARD_TORCH_CUDA
    if (cuda_) {
      // Launched even if ordering failed, so every rank still issues the same collectives; finish()
      // reports the error.
      Status st = asStatus("ordering a bucket's launch",
                           [&] { cuda_->orderLaunch(next, static_cast<cudaStream_t>(stream)); });
      if (!st.isOk() && hookError_.isOk()) hookError_ = st;
    }
#endif
    if (options_.outlierFactor > 0) {
      // The local gradient, before the allreduce averages it away (enqueued on the stream, no wait).
      localNorms_.resize(buckets_.size());
      localNorms_[size_t(next)] = at::linalg_vector_norm(b.flat, 2, c10::nullopt, false, at::kDouble);
    }
    b.work = comm_->allreduceAsync(b.flat.data_ptr(), b.flat.data_ptr(), size_t(b.flat.numel()), dt,
                                   options_.average ? ReduceOp::kAvg : ReduceOp::kSum, stream);
    trace_.push_back("launch:" + std::to_string(next));
    if (!all) launchedInBackward_++;
  }
}

void GradientAggregator::resetStep() {
  order_->reset();
  for (Bucket& b : buckets_) b.work.reset();
#if RINGGUARD_TORCH_CUDA
  if (cuda_) cuda_->resetStep();
#endif
  stepStarted_ = false;
  launchedInBackward_ = 0;
  gradCopies_ = 0;
  hookError_ = Status::ok();
  lastTrace_ = std::move(trace_);
  trace_.clear();
}

Status GradientAggregator::finish(StepStats* stats) {
  std::unique_lock<std::mutex> lock(mutex_);
  StepStats s;
  s.buckets = int(buckets_.size());
  s.gradCopies = gradCopies_;
  Status first = hookError_;
  if (noSync_) {
    resetStep();
    if (stats) *stats = s;
    return first;
  }
  void* stream = nullptr;
#if RINGGUARD_TORCH_CUDA
  std::unique_ptr<ScopedDevice> deviceGuard;
  if (cuda_) {
    deviceGuard = std::make_unique<ScopedDevice>(cuda_->device);
    stream = currentStream(cuda_->device);
    cuda_->see(static_cast<cudaStream_t>(stream));
  }
#endif
  if (!stepStarted_) before_ = comm_->counters();
  // Parameters that got no gradient this step contribute zeros (and their .grad is the view again).
  for (size_t i = 0; i < params_.size(); ++i) {
    if (order_->isReady(i)) continue;
    Param& p = params_[i];
    const torch::Tensor& grad = p.tensor.grad();
    if (!grad.defined() || !grad.is_same(p.view)) {
      p.view.zero_();
      p.tensor.mutable_grad() = p.view;
    }
    order_->markReady(i);
  }
  launchReady(true, stream);
  s.bucketsLaunched = launchedInBackward_;
  std::vector<std::shared_ptr<Work>> works;
  for (Bucket& b : buckets_) works.push_back(b.work);
  lock.unlock();
  for (auto& w : works) {
    Status st = w->wait();  // device buffers: also orders the bucket's launch stream after its result
    if (first.isOk() && !st.isOk()) first = st;
  }
  lock.lock();
#if RINGGUARD_TORCH_CUDA
  if (cuda_) {
    // The stream finish() runs on (where the optimizer step follows) waits for every launch stream.
    // (nullptr is a stream here: PyTorch's default stream is the legacy default stream.)
    for (cudaStream_t l : cuda_->launchStreams) {
      Status st =
          asStatus("joining a launch stream", [&] { cuda_->join(static_cast<cudaStream_t>(stream), l); });
      if (first.isOk() && !st.isOk()) first = st;
    }
  }
#endif
  if (options_.outlierFactor > 0 && first.isOk()) first = gatherOutliers(stream, &s.outliers);
  ++steps_;
  s.counters = comm_->counters().since(before_);
  resetStep();
  if (stats) *stats = s;
  return first;
}

// Every rank's bucket norms through one verified allreduce (sum) of a rank-major vector in which each rank
// fills its own row: x + 0 is exact, so every rank holds the same bits and reaches the same verdict.
Status GradientAggregator::gatherOutliers(void* stream, std::string* report) {
  const int64_t n = comm_->size(), me = comm_->rank(), nb = int64_t(localNorms_.size());
  torch::Tensor all = torch::zeros({n * nb}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  if (nb > 0) all.narrow(0, me * nb, nb).copy_(torch::stack(localNorms_));
  RINGGUARD_RETURN_IF_ERROR(comm_->allreduce(all.data_ptr(), all.data_ptr(), size_t(n * nb),
                                             DataType::kFloat64, ReduceOp::kSum, stream));
  const torch::Tensor host = all.cpu();  // the one host read of the step (device parameters)
  const double* v = host.data_ptr<double>();
  for (int64_t b = 0; b < nb; ++b) {
    std::vector<double> norms(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) norms[size_t(r)] = v[r * nb + b];
    const GradientOutliers o = findGradientOutliers(norms, options_.outlierFactor);
    if (o.ranks.empty()) continue;
    recordGradientOutliers(steps_, size_t(b), o);
    *report += (report->empty() ? "" : "; ") + o.describe(steps_, size_t(b));
  }
  return Status::ok();
}

std::vector<std::string> GradientAggregator::trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastTrace_;
}

}  // namespace ringguard
