#include "ringguard/runtime/communicator.h"

#include <algorithm>
#include <sstream>

#include "ringguard/algorithms/allreduce_ring.h"
#include "ringguard/algorithms/collective.h"
#include "ringguard/core/log.h"
#include "ringguard/core/thread_name.h"

namespace ringguard {

Status Work::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return done_; });
  if (status_.isOk() && fence_) return fence_->orderCaller();
  return status_;
}

bool Work::isCompleted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Work::complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

namespace {
// Options::sliceBytes and Options::slots 0 are the transport's defaults.
Options withTransportDefaults(Options o, const Transport& t) {
  if (o.sliceBytes == 0) o.sliceBytes = t.defaultSliceBytes();
  if (o.slots == 0) o.slots = t.defaultSlots();
  return o;
}
}  // namespace

Communicator::Communicator(std::unique_ptr<Transport> transport, const Options& options,
                           std::unique_ptr<Executor> executor, std::shared_ptr<void> resources)
    : transport_(std::move(transport)),
      options_(withTransportDefaults(options, *transport_)),
      injector_(std::make_shared<const FaultInjector>(options.fault)),
      executor_(executor ? std::move(executor) : std::make_unique<HostExecutor>()),
      resources_(std::move(resources)),
      rank_(transport_->rank()),
      size_(transport_->size()) {
  Status valid = options_.validate();
  RINGGUARD_ENFORCE(valid.isOk(), "Communicator: invalid options: " + valid.message());
  setLogLevel(options_.logLevel);
  if (injector_->enabled()) {
    logger()->info("rank {}: fault injection on: mode={} probability={} schedule entries={} seed={}", rank_,
                   faultModeName(options_.fault.mode), options_.fault.probability,
                   options_.fault.schedule.size(), options_.fault.seed);
  }
  progress_ = std::thread([this] {
    nameThisThread("rg-progress");
    executor_->bindThread();
    progressLoop();
  });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  progress_.join();
  // The transport may hold operations on the executor's memory and stream; both use the resources.
  transport_.reset();
  executor_.reset();
  resources_.reset();
}

std::shared_ptr<Work> Communicator::allreduceAsync(const void* send, void* recv, size_t count, DataType dtype,
                                                   ReduceOp op, void* stream) {
  Task task;
  task.name = "allreduce";
  std::ostringstream bad;
  if (!isValid(dtype)) {
    bad << "invalid dtype " << int(dtype);
  } else if (!isValid(op)) {
    bad << "invalid reduce op " << int(op);
  } else if (count > 0 && send == nullptr) {
    bad << "send buffer is null with count " << count;
  } else if (count > 0 && recv == nullptr) {
    bad << "recv buffer is null with count " << count;
  } else if ((count / size_ + 1) / std::max<size_t>(1, options_.sliceBytes / dataTypeSize(dtype)) >
             (size_t(1) << 30)) {
    bad << "count " << count << " needs more than 2^30 slices per rank at slice size " << options_.sliceBytes;
  } else if (count > 0 && send != recv) {
    const size_t bytes = count * dataTypeSize(dtype);
    auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
    if (s < r + bytes && r < s + bytes) bad << "send and recv buffers overlap without being equal";
  }
  if (!bad.str().empty()) {
    task.invalid =
        Status(StatusCode::kInvalidArgument, "allreduce on rank " + std::to_string(rank_) + ": " + bad.str());
  }
  std::unique_ptr<Executor::Fence> fence;
  if (task.invalid.isOk()) {
    Status st = executor_->makeFence(stream, &fence);
    if (!st.isOk()) {
      task.invalid = Status(st.code(), "allreduce on rank " + std::to_string(rank_) + ": " + st.message());
    }
  }
  Executor* exec = executor_.get();
  task.run = [=](const CollectiveContext& ctx) {
    return allreduceRing(ctx, exec, send, recv, count, dtype, op);
  };
  return enqueue(std::move(task), std::move(fence));
}

Status Communicator::allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                               void* stream) {
  return allreduceAsync(send, recv, count, dtype, op, stream)->wait();
}

std::shared_ptr<Work> Communicator::enqueue(Task task, std::unique_ptr<Executor::Fence> fence) {
  task.work = std::make_shared<Work>();
  task.work->fence_ = std::move(fence);
  std::shared_ptr<Work> work = task.work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!firstError_.isOk()) {
      work->complete(firstError_);
      return work;
    }
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
  return work;
}

Counters Communicator::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

Status Communicator::setFault(const FaultOptions& fault) {
  Options check = options_;
  check.fault = fault;
  RINGGUARD_RETURN_IF_ERROR(check.validate());
  std::lock_guard<std::mutex> lock(mutex_);
  injector_ = std::make_shared<const FaultInjector>(fault);
  return Status::ok();
}

FaultOptions Communicator::fault() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return injector_->options();
}

Status Communicator::firstError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return firstError_;
}

void Communicator::abort(const std::string& why) {
  std::deque<Task> dropped;
  Status reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (firstError_.isOk()) {
      firstError_ = Status(StatusCode::kAborted, "rank " + std::to_string(rank_) + " aborted: " + why);
    }
    reason = firstError_;
    aborted_.store(true);
    dropped.swap(queue_);
  }
  for (Task& t : dropped) t.work->complete(reason);
  cv_.notify_all();
}

void Communicator::progressLoop() {
  for (;;) {
    Task task;
    Status abortReason;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // transport_->broken() is the progress thread's own state: an abort is handled once.
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty() || (aborted_ && !transport_->broken()); });
      if (aborted_ && !transport_->broken()) {
        abortReason = firstError_;
      } else if (queue_.empty()) {
        return;  // stopping with nothing left
      } else {
        task = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (!abortReason.isOk()) {
      // Aborted between collectives: peers learn it now rather than at their timeout.
      broadcastError(transport_.get(), abortReason);
      transport_->markBroken();
      continue;
    }
    runTask(task);
  }
}

void Communicator::runTask(Task& task) {
  Status poisoned = firstError();
  if (!poisoned.isOk()) {
    task.work->complete(poisoned);
    return;
  }
  const uint64_t seq = nextSeq_++;
  Counters delta;
  Status st = task.invalid;
  if (st.isOk()) {
    CollectiveContext ctx;
    ctx.transport = transport_.get();
    ctx.options = &options_;
    std::shared_ptr<const FaultInjector> injector;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      injector = injector_;
    }
    ctx.injector = injector->enabled() ? injector.get() : nullptr;
    ctx.counters = &delta;
    ctx.seq = seq;
    ctx.name = task.name;
    ctx.aborted = &aborted_;
    Executor::Fence* fence = task.work->fence_.get();
    st = fence ? fence->beforeCollective() : Status::ok();
    if (st.isOk()) st = task.run(ctx);
    if (st.isOk() && fence) st = fence->afterCollective();
  }
  if (!st.isOk()) {
    // Errors every rank already sees the same way need no broadcast; the rest are announced so that
    // peers fail fast with this cause instead of timing out.
    if (st.code() != StatusCode::kPeerError && st.code() != StatusCode::kFingerprintMismatch &&
        st.code() != StatusCode::kCorruption) {
      broadcastError(transport_.get(), st);
    }
    logger()->error("rank {}: {} seq {} failed: {}", rank_, task.name, seq, st.toString());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_ += delta;
    if (st.isOk()) {
      counters_.collectives++;
    } else {
      if (firstError_.isOk()) firstError_ = st;
      if (!transport_->broken()) transport_->markBroken();
    }
  }
  task.work->complete(st);
}

}  // namespace ringguard
