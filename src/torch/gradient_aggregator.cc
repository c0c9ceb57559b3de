#include "ringguard/torch/gradient_aggregator.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <sstream>

namespace ringguard {

namespace {

bool toDataType(at::ScalarType t, DataType* out) {
  switch (t) {
    case at::kFloat:
      *out = DataType::kFloat32;
      return true;
    case at::kDouble:
      *out = DataType::kFloat64;
      return true;
    case at::kHalf:
      *out = DataType::kFloat16;
      return true;
    case at::kBFloat16:
      *out = DataType::kBFloat16;
      return true;
    case at::kInt:
      *out = DataType::kInt32;
      return true;
    case at::kLong:
      *out = DataType::kInt64;
      return true;
    case at::kByte:
      *out = DataType::kUint8;
      return true;
    default:
      return false;
  }
}

std::string describe(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << t.scalar_type();
  return os.str();
}

// Every rank must hold the same parameters: compares (dtype, rank, numel, shape hash) of each parameter
// through two verified allreduces (min and max) and names the first parameter the ranks disagree on.
Status checkSameParameters(Communicator* comm,
                           const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  std::vector<int64_t> desc;
  for (const auto& [name, t] : params) {
    int64_t shapeHash = 1469598103934665603LL;
    for (int64_t d : t.sizes()) shapeHash = (shapeHash ^ d) * 1099511628211LL;
    desc.insert(desc.end(), {int64_t(t.scalar_type()), t.dim(), t.numel(), shapeHash});
  }
  std::vector<int64_t> lo = desc, hi = desc;
  Status st = comm->allreduce(lo.data(), lo.data(), lo.size(), DataType::kInt64, ReduceOp::kMin);
  if (st.isOk()) st = comm->allreduce(hi.data(), hi.data(), hi.size(), DataType::kInt64, ReduceOp::kMax);
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

}  // namespace

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
  RINGGUARD_RETURN_IF_ERROR(checkSameParameters(comm, params));

  std::unique_ptr<GradientAggregator> agg(new GradientAggregator(comm, options));
  agg->params_.resize(params.size());
  // Buckets in reverse registration order (gradients of the last layers are ready first), one dtype and
  // device per bucket, each at most bucketBytes unless a single parameter is larger.
  std::vector<std::vector<size_t>> layout;
  size_t bucketBytes = 0;
  for (size_t r = params.size(); r-- > 0;) {
    const torch::Tensor& t = params[r].second;
    const size_t bytes = size_t(t.numel()) * t.element_size();
    bool fresh = layout.empty() || bucketBytes + bytes > options.bucketBytes;
    if (!fresh) {
      const torch::Tensor& first = params[layout.back().front()].second;
      fresh = first.scalar_type() != t.scalar_type() || first.device() != t.device();
    }
    if (fresh) {
      layout.emplace_back();
      bucketBytes = 0;
    }
    layout.back().push_back(r);
    bucketBytes += bytes;
  }
  for (size_t b = 0; b < layout.size(); ++b) {
    Bucket bucket;
    int64_t total = 0;
    for (size_t i : layout[b]) total += params[i].second.numel();
    const torch::Tensor& first = params[layout[b].front()].second;
    bucket.flat = torch::zeros({total}, first.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t i : layout[b]) {
      Param& p = agg->params_[i];
      p.name = params[i].first;
      p.tensor = params[i].second;
      p.bucket = int(b);
      p.offset = offset;
      // A plain tensor over the bucket's memory, not an autograd view: libtorch's zero_grad(false) calls
      // detach_() on every grad, which views refuse. The deleter holds the bucket alive.
      torch::Tensor flat = bucket.flat;
      p.view = torch::from_blob(
          static_cast<char*>(flat.data_ptr()) + offset * flat.element_size(), p.tensor.sizes(),
          [flat](void*) {}, flat.options());
      if (p.tensor.grad().defined()) p.view.copy_(p.tensor.grad());
      p.tensor.mutable_grad() = p.view;  // backward accumulates into the bucket from now on
      offset += p.tensor.numel();
    }
    bucket.params = layout[b];
    bucket.pending = layout[b].size();
    agg->buckets_.push_back(std::move(bucket));
  }
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
  if (p.ready) return;  // already counted this step
  const torch::Tensor& grad = p.tensor.grad();
  if (grad.defined() && !grad.is_same(p.view)) {
    // zero_grad(set_to_none) replaced the bucket view with a fresh tensor: bring it home and count it.
    p.view.copy_(grad);
    p.tensor.mutable_grad() = p.view;
    gradCopies_++;
  }
  p.ready = true;
  buckets_[p.bucket].pending--;
  if (!noSync_) launchReady(false);
}

// Caller holds mutex_.
void GradientAggregator::launchReady(bool all) {
  while (nextLaunch_ < int(buckets_.size()) && (all || buckets_[nextLaunch_].pending == 0)) {
    Bucket& b = buckets_[nextLaunch_];
    DataType dt = DataType::kFloat32;
    toDataType(b.flat.scalar_type(), &dt);
    b.work = comm_->allreduceAsync(b.flat.data_ptr(), b.flat.data_ptr(), size_t(b.flat.numel()), dt,
                                   options_.average ? ReduceOp::kAvg : ReduceOp::kSum);
    b.launched = true;
    trace_.push_back("launch:" + std::to_string(nextLaunch_));
    if (!all) launchedInBackward_++;
    nextLaunch_++;
  }
}

void GradientAggregator::resetStep() {
  for (Param& p : params_) p.ready = false;
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.launched = false;
    b.work.reset();
  }
  nextLaunch_ = 0;
  stepStarted_ = false;
  launchedInBackward_ = 0;
  gradCopies_ = 0;
  lastTrace_ = std::move(trace_);
  trace_.clear();
}

Status GradientAggregator::finish(StepStats* stats) {
  std::unique_lock<std::mutex> lock(mutex_);
  StepStats s;
  s.buckets = int(buckets_.size());
  s.gradCopies = gradCopies_;
  if (noSync_) {
    resetStep();
    if (stats) *stats = s;
    return Status::ok();
  }
  if (!stepStarted_) before_ = comm_->counters();
  // Parameters that got no gradient this step contribute zeros (and their .grad is the view again).
  for (Param& p : params_) {
    if (p.ready) continue;
    const torch::Tensor& grad = p.tensor.grad();
    if (!grad.defined() || !grad.is_same(p.view)) {
      p.view.zero_();
      p.tensor.mutable_grad() = p.view;
    }
    p.ready = true;
    buckets_[p.bucket].pending--;
  }
  launchReady(true);
  s.bucketsLaunched = launchedInBackward_;
  std::vector<std::shared_ptr<Work>> works;
  for (Bucket& b : buckets_) works.push_back(b.work);
  lock.unlock();
  Status first;
  for (auto& w : works) {
    Status st = w->wait();
    if (first.isOk() && !st.isOk()) first = st;
  }
  lock.lock();
  s.counters = comm_->counters().since(before_);
  resetStep();
  if (stats) *stats = s;
  return first;
}

std::vector<std::string> GradientAggregator::trace() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastTrace_;
}

}  // namespace ringguard
