#include "ringguard/runtime/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <new>
#include <sstream>

#include "algorithms/agreement.h"
#include "algorithms/collectives.h"
#include "core/logging.h"
#include "core/thread_name.h"
#include "core/trace_events.h"
#include "executor/host_executor.h"
#include "ringguard/core/issue_lane.h"
#include "ringguard/observability/observability.h"
#include "runtime/communicator_impl.h"
#include "runtime/handshake.h"
#include "runtime/make_communicator.h"
#include "runtime/transport_defaults.h"

namespace ringguard {

Work::Work() : impl_(std::make_unique<Impl>()) {}
Work::~Work() = default;

Status Work::wait() {
  Impl& w = *impl_;
  if (!w.parts_.empty()) {
    Status first;
    for (const std::shared_ptr<Work>& part : w.parts_) {
      Status st = part->wait();
      if (first.isOk() && !st.isOk()) first = std::move(st);
    }
    return first;
  }
  // A synchronous form's host collective still queued runs on this thread rather than waking the progress
  // thread and sleeping until it is done (two thread hand-offs, most of a small collective's latency).
  if (w.help_ && !isCompleted()) w.help_(this);
  std::unique_lock<std::mutex> lock(w.mutex_);
  w.cv_.wait(lock, [&w] { return w.done_; });
  if (w.status_.isOk() && w.fence_) return w.fence_->orderCaller();
  // A direct-path collective: launched on the caller's stream, so nothing to order; the first error its
  // kernels (or any earlier one of the path) reported so far.
  if (w.status_.isOk() && w.poll_) return w.poll_();
  return w.status_;
}

bool Work::isCompleted() const {
  if (!impl_->parts_.empty()) {
    for (const std::shared_ptr<Work>& part : impl_->parts_) {
      if (!part->isCompleted()) return false;
    }
    return true;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->done_;
}

std::shared_ptr<Work> Work::completed(Status status) {
  auto w = std::make_shared<Work>();
  w->impl_->complete(std::move(status));
  return w;
}

void Work::Impl::complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

std::unique_ptr<Communicator> makeCommunicator(std::unique_ptr<Transport> transport, const Options& options,
                                               std::unique_ptr<Executor> executor,
                                               std::shared_ptr<void> resources,
                                               std::unique_ptr<DirectPath> direct) {
  auto impl = std::make_unique<Communicator::Impl>(std::move(transport), options, std::move(executor),
                                                   std::move(resources));
  if (direct) impl->setDirectPath(std::move(direct));
  return std::make_unique<Communicator>(std::move(impl));
}

void Communicator::Impl::setDirectPath(std::unique_ptr<DirectPath> direct) {
  direct->setFault(options_.fault);  // as setFault() does
  direct_ = std::move(direct);
  callerRuns_ = false;
  if (!direct_->reportsLater()) return;
  watchdog_ = std::make_unique<DirectWatchdog>(
      [path = direct_] {
        path->watch();
        return path->poll();
      },
      [this](const Status& st) { onDirectError(st); }, DirectWatchdog::kInterval);
}

void Communicator::Impl::onDirectError(const Status& st) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!firstError_.isOk()) return;  // already failed: a call or a wait saw it first, and reported it
    firstError_ = st;
  }
  logError(Subsys::kRuntime, "rank {}: {} (seen by the watchdog: the communicator is aborted)", rank_,
           st.toString());
  abort(st.message());  // keeps firstError_; announces it to the host transport's peers
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank_; }
int Communicator::size() const { return impl_->size_; }
const Options& Communicator::options() const { return impl_->options_; }
const char* Communicator::transportName() const { return impl_->transportName(); }
MemoryKind Communicator::memory() const { return impl_->executor_->memory(); }
void Communicator::abort(const std::string& why) { impl_->abort(why); }
void Communicator::leave(bool peersMayBeGone) { impl_->leave(peersMayBeGone); }
Counters Communicator::counters() const { return impl_->counters(); }
CommunicatorSummary Communicator::summary() const { return impl_->summary(); }
Status Communicator::firstError() const { return impl_->firstError(); }
Status Communicator::setFault(const FaultOptions& fault) { return impl_->setFault(fault); }
FaultOptions Communicator::fault() const { return impl_->fault(); }

Communicator::Impl::Impl(std::unique_ptr<Transport> transport, const Options& options,
                         std::unique_ptr<Executor> executor, std::shared_ptr<void> resources)
    : transport_(std::move(transport)),
      options_(withTransportDefaults(options, *transport_)),
      injector_(std::make_shared<const FaultInjector>(options.fault)),
      executor_(executor ? std::move(executor) : std::make_unique<HostExecutor>()),
      callerRuns_(executor_->memory() == MemoryKind::kHost),
      resources_(std::move(resources)),
      rank_(transport_->rank()),
      size_(transport_->size()),
      sendSeq_(size_t(size_), 0),
      recvSeq_(size_t(size_), 0) {
  Status valid = options_.validateFor(size_);
  RINGGUARD_ENFORCE(valid.isOk(), "Communicator: invalid options: " + valid.message());
  setLogLevel(options_.logLevel);
  setLogRank(rank_);
  if (injector_->enabled()) {
    logInfo(Subsys::kRuntime,
            "rank {}: fault injection on: mode={} probability={} schedule entries={} seed={}", rank_,
            faultModeName(options_.fault.mode), options_.fault.probability, options_.fault.schedule.size(),
            options_.fault.seed);
  }
  // Registered before the progress thread starts (it reads track_), withdrawn if it cannot start: the record
  // must never call summary() on a communicator that was not made.
  track_ = observability::attach(rank_, size_, transport_->name(), [this] { return summary(); });
  struct Withdraw {
    uint32_t track;
    bool armed = true;
    ~Withdraw() {
      if (armed) observability::withdraw(track);
    }
  } withdraw{track_};
  progress_ = std::thread([this] {
    nameThisThread("rg-progress");
    executor_->bindThread();
    // A failed handshake poisons the communicator: every call returns its error.
    if (Status hs = handshake(transport_.get(), options_, &aborted_); !hs.isOk()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (firstError_.isOk()) firstError_ = hs;
      transport_->markBroken();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;  // the handshake was the first run
    }
    cv_.notify_all();
    progressLoop();
  });
  withdraw.armed = false;
}

Communicator::Impl::~Impl() {
  watchdog_.reset();  // before anything its onError touches
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    // A failed communicator's direct-path kernels may still spin on a peer that is gone: released now, so
    // the windows' release (whenever the last Work lets go of them) does not wait out their deadline.
    if (direct_ && (!firstError_.isOk() || !direct_->poll().isOk())) direct_->abort();
  }
  cv_.notify_all();
  progress_.join();
  observability::detach(track_, summary());
  // The transport may hold operations on the executor's memory and stream; both use the resources.
  transport_.reset();
  executor_.reset();
  resources_.reset();
}

std::shared_ptr<Work> Communicator::Impl::submit(
    const char* name, uint64_t bytes, Status checked, void* stream,
    std::function<Status(const CollectiveContext&, Executor*)> run, std::function<uint64_t()> number,
    CollectiveInput input, bool rejected) {
  trace::instant(trace::Kind::kEnqueue, name, track_, 0, 0, 0, 0, 0, nullptr, bytes);
  Task task;
  task.name = name;
  task.bytes = bytes;
  task.group = !number;
  task.number = std::move(number);
  task.input = std::move(input);
  task.lane = currentIssueLane();  // here, on the issuing thread: the runner may be another thread
  task.rejected = rejected;
  if (!checked.isOk())
    task.invalid = callError(name, Status(StatusCode::kInvalidArgument, checked.message()));
  std::unique_ptr<Executor::Fence> fence;
  if (task.invalid.isOk()) {
    Status st = executor_->makeFence(stream, &fence);
    if (!st.isOk()) task.invalid = callError(name, st);
  }
  task.run = std::move(run);
  return enqueue(std::move(task), std::move(fence));
}

Status Communicator::Impl::callError(const char* name, const Status& why) const {
  return Status(why.code(), std::string(name) + " on rank " + std::to_string(rank_) + ": " + why.message());
}

uint64_t Communicator::Impl::numberExchange(PeerExchange* x) {
  if (x->dst >= 0) x->sendSeq = sendSeq_[size_t(x->dst)]++;
  if (x->src >= 0) x->recvSeq = recvSeq_[size_t(x->src)]++;
  return x->src >= 0 ? x->recvSeq : x->sendSeq;
}

CollectiveShape Communicator::Impl::shape() const {
  return CollectiveShape{rank_, size_, options_.sliceBytes};
}

namespace {

// Each collective is described once for both of its forms: `issue(name, bytes, checked, run, input,
// number)` submits it (the Async forms, Submit) or runs it on its caller when it can (the synchronous
// forms, CallAndWait). `run` is Status(const CollectiveContext&, Executor*); `number` numbers a
// point-to-point exchange on its runner (null for a collective of every rank).
struct Submit {
  Communicator::Impl& impl;
  void* stream;
  template <typename Run, typename Number>
  std::shared_ptr<Work> operator()(const char* name, uint64_t bytes, Status checked, Run&& run,
                                   CollectiveInput input, Number&& number) const {
    return impl.submit(name, bytes, std::move(checked), stream, std::forward<Run>(run),
                       std::forward<Number>(number), std::move(input));
  }
};

struct CallAndWait {
  Communicator::Impl& impl;
  void* stream;
  template <typename Run, typename Number>
  Status operator()(const char* name, uint64_t bytes, Status checked, Run&& run, CollectiveInput input,
                    Number&& number) const {
    return impl.callAndWait(name, bytes, std::move(checked), stream, run, std::move(input), number);
  }
};

template <typename Issue>
auto issueAllreduce(const Issue& issue, Status checked, const void* send, void* recv, size_t count,
                    DataType dtype, ReduceOp op) {
  return issue(
      "allreduce", count * dataTypeSize(dtype), std::move(checked),
      [=](const CollectiveContext& ctx, Executor* exec) {
        return ringguard::allreduce(ctx, exec, send, recv, count, dtype, op);
      },
      CollectiveInput::of(send, count, dtype), nullptr);
}

template <typename Issue>
auto issueReduceScatter(const Issue& issue, Status checked, int size, const void* send, void* recv,
                        size_t recvCount, DataType dtype, ReduceOp op) {
  return issue(
      "reduce_scatter", recvCount * size_t(size) * dataTypeSize(dtype), std::move(checked),
      [=](const CollectiveContext& ctx, Executor* exec) {
        return ringguard::reduceScatter(ctx, exec, send, recv, recvCount, dtype, op);
      },
      CollectiveInput::of(send, recvCount * size_t(size), dtype), nullptr);
}

template <typename Issue>
auto issueAllgather(const Issue& issue, Status checked, int size, const void* send, void* recv,
                    size_t sendCount, DataType dtype) {
  return issue(
      "allgather", sendCount * size_t(size) * dataTypeSize(dtype), std::move(checked),
      [=](const CollectiveContext& ctx, Executor* exec) {
        return ringguard::allgather(ctx, exec, send, recv, sendCount, dtype);
      },
      CollectiveInput::of(send, sendCount, dtype), nullptr);
}

template <typename Issue>
auto issueBroadcast(const Issue& issue, Status checked, int rank, const void* send, void* recv, size_t count,
                    DataType dtype, int root) {
  return issue(
      "broadcast", count * dataTypeSize(dtype), std::move(checked),
      [=](const CollectiveContext& ctx, Executor* exec) {
        return ringguard::broadcast(ctx, exec, send, recv, count, dtype, root);
      },
      // Only the root's input travels.
      rank == root ? CollectiveInput::of(send, count, dtype) : CollectiveInput{}, nullptr);
}

// The exchange of one send/recv and the dtype its pipeline runs in: the call's own, or, where the two
// directions' dtypes differ (a grouped call's round), bytes with each direction's dtype in its fingerprint
// (PeerExchange::inBytes).
PeerExchange makeExchange(const void* send, size_t sendCount, DataType sendDtype, int dst, void* recv,
                          size_t recvCount, DataType recvDtype, int src, DataType* runDtype) {
  PeerExchange x;
  x.send = send;
  x.sendCount = sendCount;
  x.dst = dst;
  x.recv = recv;
  x.recvCount = recvCount;
  x.src = src;
  if (dst < 0) sendDtype = recvDtype;
  if (src < 0) recvDtype = sendDtype;
  *runDtype = sendDtype;
  if (sendDtype != recvDtype) {
    x.inBytes = true;
    x.sendDtype = sendDtype;
    x.recvDtype = recvDtype;
    x.sendCount = sendCount * dataTypeSize(sendDtype);
    x.recvCount = recvCount * dataTypeSize(recvDtype);
    *runDtype = DataType::kUint8;
  }
  return x;
}

template <typename Issue>
auto issueSendRecv(const Issue& issue, Communicator::Impl& impl, const PeerExchange& exchange,
                   DataType dtype) {
  auto x = std::make_shared<PeerExchange>(exchange);
  return issue(
      "sendrecv",
      (x->dst >= 0 ? x->sendCount : 0) * dataTypeSize(dtype) +
          (x->src >= 0 ? x->recvCount : 0) * dataTypeSize(dtype),
      checkSendRecvArgs(impl.shape(), *x, dtype),
      [x, dtype](const CollectiveContext& ctx, Executor* exec) {
        return ringguard::sendRecv(ctx, exec, *x, dtype);
      },
      CollectiveInput{}, [&impl, x] { return impl.numberExchange(x.get()); });
}

template <typename Issue>
auto issueAlltoall(const Issue& issue, Status checked, const void* send, void* recv,
                   std::shared_ptr<const AlltoallLayout> layout, DataType dtype) {
  CollectiveInput input{send, {}, dtype};
  // Blocks that tile the input in rank order (every equal-split all-to-all) are one span: the same elements
  // and indices, and no span list to allocate per call.
  size_t tiled = 0;
  for (size_t p = 0; p < layout->sendCounts.size() && tiled != SIZE_MAX; ++p) {
    tiled = layout->sendDispls[p] == tiled ? tiled + layout->sendCounts[p] : SIZE_MAX;
  }
  if (checked.isOk() && tiled != SIZE_MAX) {
    input = CollectiveInput::of(send, tiled, dtype);
  } else if (checked.isOk()) {
    for (size_t p = 0; p < layout->sendCounts.size(); ++p) {
      input.spans.push_back({static_cast<const char*>(send) + layout->sendDispls[p] * dataTypeSize(dtype),
                             layout->sendCounts[p]});
    }
  }
  size_t bytes = 0;
  for (size_t c : layout->sendCounts) bytes += c * dataTypeSize(dtype);
  return issue(
      "alltoall", bytes, std::move(checked),
      [=, layout = std::move(layout)](const CollectiveContext& ctx, Executor* exec) {
        return ringguard::alltoall(ctx, exec, send, recv, *layout, dtype);
      },
      std::move(input), nullptr);
}

// The same count to and from every rank, blocks in rank order: the calling thread's last one again when it
// is the same (shared, never changed once made), so an equal-split all-to-all allocates no layout per call
// (four vectors a call: 0.71x MPI at 4 KiB and 2 ranks before, 0.78x after, docs/PERFORMANCE.md).
std::shared_ptr<const AlltoallLayout> equalLayout(int size, size_t count) {
  thread_local std::shared_ptr<const AlltoallLayout> last;
  if (last && last->sendCounts.size() == size_t(size) && last->sendCounts[0] == count) return last;
  auto l = std::make_shared<AlltoallLayout>();
  l->sendCounts.assign(size_t(size), count);
  l->sendDispls.resize(size_t(size));
  for (size_t p = 0; p < l->sendDispls.size(); ++p) l->sendDispls[p] = p * count;
  l->recvCounts = l->sendCounts;
  l->recvDispls = l->sendDispls;
  last = std::move(l);
  return last;
}

// Set while a synchronous form enqueues (one that could not run on its caller at once): its caller waits at
// once, so the progress thread is not woken for a host item (waking it preempts the caller on a small
// machine, only for it to find the item taken).
thread_local bool tlEnqueueToWait = false;

// A synchronous form through the queue: enqueued as the Async form, waited for at once.
Status enqueueAndWait(const std::function<std::shared_ptr<Work>()>& enqueueIt) {
  struct Scope {  // reset even if the enqueue throws: a later Async call must wake the progress thread
    Scope() { tlEnqueueToWait = true; }
    ~Scope() { tlEnqueueToWait = false; }
  };
  std::shared_ptr<Work> work;
  {
    Scope scope;
    work = enqueueIt();
  }
  return work->wait();
}

}  // namespace

Status Communicator::Impl::callAndWait(const char* name, uint64_t bytes, Status checked, void* stream,
                                       RunRef run, CollectiveInput input, NumberRef number) {
  Call call;
  call.name = name;
  call.bytes = bytes;
  if (!checked.isOk())
    call.invalid = callError(name, Status(StatusCode::kInvalidArgument, checked.message()));
  call.group = !number;
  call.lane = currentIssueLane();
  call.input = &input;
  call.run = run;
  call.number = number;
  Status st;
  if (runOnCaller(call, &st)) return st;
  // Behind what is queued or running. The references stay valid: this thread waits until the Work is done,
  // and a Task that abort() drops is completed without running.
  return enqueueAndWait([&] {
    return submit(name, bytes, std::move(checked), stream, run,
                  number ? std::function<uint64_t()>(number) : nullptr, std::move(input));
  });
}

std::shared_ptr<Work> Communicator::allreduceAsync(const void* send, void* recv, size_t count, DataType dtype,
                                                   ReduceOp op, void* stream) {
  Status checked = checkAllreduceArgs(impl_->shape(), send, recv, count, dtype, op);
  DirectPath* direct = impl_->direct_.get();
  if (direct != nullptr && direct->acceptsAllreduce(count, dtype, op)) {
    if (!checked.isOk())
      return impl_->declineDirect("allreduce", CollectiveKind::kAllreduce, checked, stream);
    const uint32_t lane = currentIssueLane();
    return impl_->launchDirect("allreduce", count * dataTypeSize(dtype),
                               [=] { return direct->allreduce(send, recv, count, dtype, op, lane, stream); });
  }
  if (auto declined = impl_->offDirect(CollectiveKind::kAllreduce, checked, stream, count, dtype, op, 0))
    return declined;
  return issueAllreduce(Submit{*impl_, stream}, std::move(checked), send, recv, count, dtype, op);
}

Status Communicator::allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                               void* stream) {
  if (!impl_->callerRuns()) {
    return enqueueAndWait([&] { return allreduceAsync(send, recv, count, dtype, op, stream); });
  }
  return issueAllreduce(CallAndWait{*impl_, stream},
                        checkAllreduceArgs(impl_->shape(), send, recv, count, dtype, op), send, recv, count,
                        dtype, op);
}

std::shared_ptr<Work> Communicator::reduceScatterAsync(const void* send, void* recv, size_t recvCount,
                                                       DataType dtype, ReduceOp op, void* stream) {
  Status checked = checkReduceScatterArgs(impl_->shape(), send, recv, recvCount, dtype, op);
  DirectPath* direct = impl_->direct_.get();
  if (direct != nullptr && direct->acceptsReduceScatter(recvCount, dtype, op)) {
    if (!checked.isOk()) {
      return impl_->declineDirect("reduce_scatter", CollectiveKind::kReduceScatter, checked, stream);
    }
    const uint32_t lane = currentIssueLane();
    return impl_->launchDirect("reduce_scatter", recvCount * size_t(size()) * dataTypeSize(dtype), [=] {
      return direct->reduceScatter(send, recv, recvCount, dtype, op, lane, stream);
    });
  }
  if (auto declined =
          impl_->offDirect(CollectiveKind::kReduceScatter, checked, stream, recvCount, dtype, op, 0))
    return declined;
  return issueReduceScatter(Submit{*impl_, stream}, std::move(checked), size(), send, recv, recvCount, dtype,
                            op);
}

Status Communicator::reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype,
                                   ReduceOp op, void* stream) {
  if (!impl_->callerRuns()) {
    return enqueueAndWait([&] { return reduceScatterAsync(send, recv, recvCount, dtype, op, stream); });
  }
  return issueReduceScatter(CallAndWait{*impl_, stream},
                            checkReduceScatterArgs(impl_->shape(), send, recv, recvCount, dtype, op), size(),
                            send, recv, recvCount, dtype, op);
}

std::shared_ptr<Work> Communicator::allgatherAsync(const void* send, void* recv, size_t sendCount,
                                                   DataType dtype, void* stream) {
  Status checked = checkAllgatherArgs(impl_->shape(), send, recv, sendCount, dtype);
  DirectPath* direct = impl_->direct_.get();
  if (direct != nullptr && direct->acceptsAllgather(sendCount, dtype)) {
    if (!checked.isOk())
      return impl_->declineDirect("allgather", CollectiveKind::kAllgather, checked, stream);
    const uint32_t lane = currentIssueLane();
    return impl_->launchDirect("allgather", sendCount * size_t(size()) * dataTypeSize(dtype),
                               [=] { return direct->allgather(send, recv, sendCount, dtype, lane, stream); });
  }
  if (auto declined =
          impl_->offDirect(CollectiveKind::kAllgather, checked, stream, sendCount, dtype, ReduceOp::kSum, 0))
    return declined;
  return issueAllgather(Submit{*impl_, stream}, std::move(checked), size(), send, recv, sendCount, dtype);
}

Status Communicator::allgather(const void* send, void* recv, size_t sendCount, DataType dtype, void* stream) {
  if (!impl_->callerRuns()) {
    return enqueueAndWait([&] { return allgatherAsync(send, recv, sendCount, dtype, stream); });
  }
  return issueAllgather(CallAndWait{*impl_, stream},
                        checkAllgatherArgs(impl_->shape(), send, recv, sendCount, dtype), size(), send, recv,
                        sendCount, dtype);
}

std::shared_ptr<Work> Communicator::broadcastAsync(const void* send, void* recv, size_t count, DataType dtype,
                                                   int root, void* stream) {
  Status checked = checkBroadcastArgs(impl_->shape(), send, recv, count, dtype, root);
  DirectPath* direct = impl_->direct_.get();
  if (direct != nullptr && direct->acceptsBroadcast(count, dtype)) {
    if (!checked.isOk())
      return impl_->declineDirect("broadcast", CollectiveKind::kBroadcast, checked, stream);
    const uint32_t lane = currentIssueLane();
    return impl_->launchDirect("broadcast", count * dataTypeSize(dtype), [=] {
      return direct->broadcast(send, recv, count, dtype, root, lane, stream);
    });
  }
  if (auto declined =
          impl_->offDirect(CollectiveKind::kBroadcast, checked, stream, count, dtype, ReduceOp::kSum, root))
    return declined;
  return issueBroadcast(Submit{*impl_, stream}, std::move(checked), rank(), send, recv, count, dtype, root);
}

Status Communicator::broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                               void* stream) {
  if (!impl_->callerRuns()) {
    return enqueueAndWait([&] { return broadcastAsync(send, recv, count, dtype, root, stream); });
  }
  return issueBroadcast(CallAndWait{*impl_, stream},
                        checkBroadcastArgs(impl_->shape(), send, recv, count, dtype, root), rank(), send,
                        recv, count, dtype, root);
}

std::shared_ptr<Work> Communicator::sendRecvAsync(const void* send, size_t sendCount, int dst, void* recv,
                                                  size_t recvCount, int src, DataType dtype, void* stream) {
  return sendRecvRoundAsync(send, sendCount, dtype, dst, recv, recvCount, dtype, src, stream);
}

std::shared_ptr<Work> Communicator::sendRecvRoundAsync(const void* send, size_t sendCount, DataType sendDtype,
                                                       int dst, void* recv, size_t recvCount,
                                                       DataType recvDtype, int src, void* stream) {
  DataType runDtype = sendDtype;
  const PeerExchange x =
      makeExchange(send, sendCount, sendDtype, dst, recv, recvCount, recvDtype, src, &runDtype);
  // The direct path numbers its messages on the device: both ends of a message route it alike (the path's
  // decision reads only what both have alike), so the pipeline's numbers count the pipeline's messages alone.
  DirectPath* direct = impl_->direct_.get();
  if (direct != nullptr && direct->acceptsSendRecv(sendCount, dst, recvCount, src, sendDtype) &&
      checkSendRecvArgs(impl_->shape(), x, runDtype).isOk()) {
    const uint32_t lane = currentIssueLane();
    const uint64_t bytes = (dst >= 0 ? sendCount * dataTypeSize(sendDtype) : 0) +
                           (src >= 0 ? recvCount * dataTypeSize(recvDtype) : 0);
    return impl_->launchDirect("sendrecv", bytes, [=] {
      return direct->sendRecv(send, sendCount, dst, recv, recvCount, src, sendDtype, recvDtype, lane, stream);
    });
  }
  return issueSendRecv(Submit{*impl_, stream}, *impl_, x, runDtype);
}

Status Communicator::sendRecv(const void* send, size_t sendCount, int dst, void* recv, size_t recvCount,
                              int src, DataType dtype, void* stream) {
  if (!impl_->callerRuns()) {
    return enqueueAndWait(
        [&] { return sendRecvAsync(send, sendCount, dst, recv, recvCount, src, dtype, stream); });
  }
  DataType runDtype = dtype;
  return issueSendRecv(CallAndWait{*impl_, stream}, *impl_,
                       makeExchange(send, sendCount, dtype, dst, recv, recvCount, dtype, src, &runDtype),
                       runDtype);
}

// The split form (vectors) and the equal form (one count) are told apart by the call, not by the counts: the
// peer path's two forms have different fingerprints, and a split layout whose counts happen to be equal on
// one rank need not be on another, so only the call's form is the same on every rank.
std::shared_ptr<Work> Communicator::alltoallAsync(const void* send, const std::vector<size_t>& sendCounts,
                                                  const std::vector<size_t>& sendDispls, void* recv,
                                                  const std::vector<size_t>& recvCounts,
                                                  const std::vector<size_t>& recvDispls, DataType dtype,
                                                  void* stream) {
  auto layout =
      std::make_shared<const AlltoallLayout>(AlltoallLayout{sendCounts, sendDispls, recvCounts, recvDispls});
  Status checked = checkAlltoallArgs(impl_->shape(), send, recv, *layout, dtype);
  DirectPath* direct = impl_->direct_.get();
  if (direct != nullptr && direct->acceptsAlltoall(0, dtype, /*splits=*/true)) {
    if (!checked.isOk()) return impl_->declineDirect("alltoall", CollectiveKind::kAlltoall, checked, stream);
    const uint32_t lane = currentIssueLane();
    size_t bytes = 0;
    for (size_t c : sendCounts) bytes += c * dataTypeSize(dtype);
    return impl_->launchDirect("alltoall", bytes, [=] {
      return direct->alltoall(send, recv, *layout, dtype, /*splits=*/true, lane, stream);
    });
  }
  return issueAlltoall(Submit{*impl_, stream}, std::move(checked), send, recv, std::move(layout), dtype);
}

std::shared_ptr<Work> Communicator::alltoallAsync(const void* send, void* recv, size_t count, DataType dtype,
                                                  void* stream) {
  std::shared_ptr<const AlltoallLayout> layout = equalLayout(size(), count);
  Status checked = checkAlltoallArgs(impl_->shape(), send, recv, *layout, dtype);
  DirectPath* direct = impl_->direct_.get();
  if (direct != nullptr && direct->acceptsAlltoall(count, dtype, /*splits=*/false)) {
    if (!checked.isOk()) return impl_->declineDirect("alltoall", CollectiveKind::kAlltoall, checked, stream);
    const uint32_t lane = currentIssueLane();
    return impl_->launchDirect("alltoall", count * size_t(size()) * dataTypeSize(dtype), [=] {
      return direct->alltoall(send, recv, *layout, dtype, /*splits=*/false, lane, stream);
    });
  }
  if (auto declined =
          impl_->offDirect(CollectiveKind::kAlltoall, checked, stream, count, dtype, ReduceOp::kSum, 0))
    return declined;
  return issueAlltoall(Submit{*impl_, stream}, std::move(checked), send, recv, std::move(layout), dtype);
}

Status Communicator::alltoall(const void* send, void* recv, size_t count, DataType dtype, void* stream) {
  if (!impl_->callerRuns()) {
    return enqueueAndWait([&] { return alltoallAsync(send, recv, count, dtype, stream); });
  }
  std::shared_ptr<const AlltoallLayout> layout = equalLayout(size(), count);
  Status checked = checkAlltoallArgs(impl_->shape(), send, recv, *layout, dtype);
  return issueAlltoall(CallAndWait{*impl_, stream}, std::move(checked), send, recv, std::move(layout), dtype);
}

std::shared_ptr<Work> Communicator::rejectedAsync(CollectiveKind kind, void* stream, size_t bytes) {
  DirectPath* direct = impl_->direct_.get();
  static_cast<void>(bytes);  // every size: a call of a kind the path declines() enters its order at any size
  if (direct != nullptr && direct->declines(kind)) {
    return impl_->declineDirect(collectiveKindName(kind), kind,
                                Status(StatusCode::kInvalidArgument, "its arguments were rejected"), stream);
  }
  return impl_->submit(
      "rejected", 0, Status::ok(), stream,
      [kind](const CollectiveContext& ctx, Executor*) { return exchangeRejected(ctx, kind); }, nullptr, {},
      /*rejected=*/true);
}

std::shared_ptr<Work> Communicator::Impl::enqueue(Task task, std::unique_ptr<Executor::Fence> fence) {
  task.work = std::make_shared<Work>();
  task.work->impl_->fence_ = std::move(fence);
  // A host-memory collective (no fence) of a synchronous form that found the runner busy or the queue not
  // empty (callAndWait) runs on its caller once its turn comes (helpWhileWaiting). Device
  // ones stay on the progress thread, which is bound to the device and joins no user's capture; so do the
  // Async forms' items, whose waits come from threads with work of their own (c10d's completion lanes: a
  // small all_reduce under torchrun was slower with those waiters running it, docs/PERFORMANCE.md, "Small
  // messages through the c10d backend").
  if (!task.work->impl_->fence_ && tlEnqueueToWait)
    task.work->impl_->help_ = [this](const Work* w) { helpWhileWaiting(w); };
  std::shared_ptr<Work> work = task.work;
  const bool wake = !tlEnqueueToWait || !work->impl_->help_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!firstError_.isOk()) {
      work->impl_->complete(firstError_);
      return work;
    }
    queue_.push_back(std::move(task));
  }
  // Not woken, the progress thread still reaches the item: a runner that finishes wakes it when
  // something is queued (finishRun), and the waiting caller runs it when no runner is busy.
  if (wake) cv_.notify_all();
  return work;
}

Counters Communicator::Impl::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  absorbDirectCounts();
  return counters_;
}

void Communicator::Impl::absorbDirectCounts() const {
  if (!direct_) return;
  uint64_t detected = 0, injected = 0;
  direct_->faultCounts(&detected, &injected);  // what the path's finished kernels reported
  counters_.detected += detected - directDetected_;
  counters_.injected += injected - directInjected_;
  directDetected_ = detected;
  directInjected_ = injected;
  // The path's finished calls, timed on the device (while the timeline is on): a span each, on this
  // communicator's track, and their time in the per-kind figures.
  const uint64_t lost = direct_->takeFinishedCalls([&](const DirectCallTime& t) {
    byKind_[t.name].ns += t.durNs;
    trace::Event e;
    e.kind = trace::Kind::kCollective;
    e.span = true;
    e.name = t.name;
    e.track = track_;
    e.seq = t.seq;
    e.tsNs = t.startNs;
    e.durNs = t.durNs;
    e.value = t.bytes;
    e.a = 2;  // the direct path's (the enqueue instant's "direct")
    trace::record(e);
  });
  if (lost != 0 && directSpansLost_ == 0) {
    logWarn(
        Subsys::kRuntime,
        "rank {}: {} calls of the {} path have no timeline span: more finished between two reads of their "
        "clocks (each launch on the path, counters() and the exports read them) than their ring holds",
        rank_, lost, direct_->name());
  }
  directSpansLost_ += lost;
}

CommunicatorSummary Communicator::Impl::summary() const {
  CommunicatorSummary s;
  s.track = track_;
  s.rank = rank_;
  s.size = size_;
  s.transport = transportName();
  std::lock_guard<std::mutex> lock(mutex_);
  absorbDirectCounts();
  s.byKind = byKind_;
  s.counters = counters_;
  s.firstError = firstError_.isOk() ? "" : firstError_.toString();
  return s;
}

Status Communicator::Impl::setFault(const FaultOptions& fault) {
  std::shared_ptr<const FaultInjector> injector;
  RINGGUARD_RETURN_IF_ERROR(makeFaultInjector(options_, size_, fault, &injector));
  std::lock_guard<std::mutex> lock(mutex_);
  injector_ = std::move(injector);
  // The direct path corrupts chunk reads with the same probability (a read is its unit, as a slice
  // transfer is the pipeline's). A schedule names the pipeline's steps and slices: the path's collectives
  // do not apply it (at creation, a schedule keeps auto off the path: device_factory.cc).
  if (direct_) {
    direct_->setFault(fault);
    if (!fault.schedule.empty()) {
      logWarn(
          Subsys::kRuntime,
          "rank {}: a fault schedule of {} entries applies to the host-driven path's collectives only; the "
          "peer windows' collectives take its probability and mode",
          rank_, fault.schedule.size());
    }
  }
  return Status::ok();
}

FaultOptions Communicator::Impl::fault() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return injector_->options();
}

Status Communicator::Impl::onDirectPath(const char* name, uint64_t bytes, bool collective,
                                        const std::function<Status()>& launch) {
  Status st;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    st = firstError_;
  }
  if (st.isOk()) st = direct_->poll();
  if (st.isOk()) st = launch();
  if (st.isOk())
    trace::instant(trace::Kind::kEnqueue, name, track_, 0, /*a (direct)=*/2, 0, 0, 0, nullptr, bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  absorbDirectCounts();
  if (!st.isOk() && firstError_.isOk()) firstError_ = st;
  // Counted when launched: a later failure shows at the next call or wait (docs/design/protocol.md).
  CollectiveStats& k = byKind_[name];
  ++k.calls;
  k.bytes += bytes;
  if (collective && st.isOk()) {
    ++counters_.collectives;
  } else {
    ++k.failed;
  }
  return st;
}

std::shared_ptr<Work> Communicator::Impl::launchDirect(const char* name, uint64_t bytes,
                                                       const std::function<Status()>& launch) {
  auto work = Work::completed(onDirectPath(name, bytes, /*collective=*/true, launch));
  std::shared_ptr<DirectPath> path = direct_;
  work->impl_->poll_ = [path] { return path->poll(); };
  return work;
}

std::shared_ptr<Work> Communicator::Impl::declineDirect(const char* name, CollectiveKind kind,
                                                        const Status& checked, void* stream) {
  const uint32_t lane = currentIssueLane();
  // A decline that failed has poisoned the communicator (the next call reports it); this call's caller gets
  // its own error either way.
  static_cast<void>(
      onDirectPath(name, 0, /*collective=*/false, [&] { return direct_->decline(kind, lane, stream); }));
  return Work::completed(callError(name, Status(StatusCode::kInvalidArgument, checked.message())));
}

std::shared_ptr<Work> Communicator::Impl::offDirect(CollectiveKind kind, const Status& checked, void* stream,
                                                    size_t count, DataType dtype, ReduceOp op, int root) {
  if (!direct_ || !direct_->declines(kind)) return nullptr;
  if (!checked.isOk()) return declineDirect(collectiveKindName(kind), kind, checked, stream);
  Status st = firstError();
  if (st.isOk()) st = direct_->poll();
  if (st.isOk()) st = direct_->offPath(kind, count, dtype, op, root, currentIssueLane(), stream);
  if (!st.isOk()) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (firstError_.isOk()) firstError_ = st;
  }
  return nullptr;
}

Status Communicator::Impl::firstError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return firstError_;
}

void Communicator::Impl::abort(const std::string& why) {
  std::deque<Task> dropped;
  Status reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (firstError_.isOk()) {
      firstError_ = Status(StatusCode::kAborted, "rank " + std::to_string(rank_) + " aborted: " + why);
    }
    reason = firstError_;
    aborted_.store(true);
    if (direct_) direct_->abort();  // releases kernels spinning on a peer
    dropped.swap(queue_);
  }
  for (Task& t : dropped) t.work->impl_->complete(reason);
  cv_.notify_all();
}

void Communicator::Impl::progressLoop() {
  for (;;) {
    Task task;
    Status abortReason;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // transport_->broken() is the runners' own state: an abort is handled once.
      cv_.wait(lock, [this] {
        return !busy_ && (stopping_ || !queue_.empty() || (aborted_ && !transport_->broken()));
      });
      if (aborted_ && !transport_->broken()) {
        abortReason = firstError_;
      } else if (queue_.empty()) {
        return;  // stopping with nothing left
      } else {
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      busy_ = true;
    }
    if (!abortReason.isOk()) {
      // Aborted between collectives: peers learn it now rather than at their timeout.
      broadcastError(transport_.get(), abortReason);
      transport_->markBroken();
      finishRun();
    } else {
      finishTask(task, runTask(task));
    }
  }
}

void Communicator::Impl::helpWhileWaiting(const Work* waited) {
  for (;;) {
    Task task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Busy: the progress thread (or another waiting caller) runs tasks in order and will reach this one.
      if (waited->isCompleted() || busy_ || queue_.empty() || aborted_ || queue_.front().work->impl_->fence_)
        return;
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    // Tasks ahead of the waited one first: the order is the queue's, whoever runs it.
    finishTask(task, runTask(task));
  }
}

void Communicator::Impl::finishTask(Task& task, Status status) {
  // The runner is released first: a caller woken by its Work finds it free, and a synchronous call it
  // makes next runs at once (caller_run.cc) rather than queueing behind a runner that is only finishing.
  finishRun();
  task.work->impl_->complete(std::move(status));
}

void Communicator::Impl::finishRun() {
  std::lock_guard<std::mutex> lock(mutex_);
  busy_ = false;
  // Only when the progress thread has something to do: waking it after every inline run would cost the
  // hand-off the inline run saved. Under the lock: once it is released the destructor may go on.
  if (!queue_.empty() || stopping_ || aborted_) cv_.notify_all();
}

Status Communicator::Impl::runTask(Task& task) {
  std::shared_ptr<const FaultInjector> injector;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!firstError_.isOk()) return firstError_;
    injector = injector_;
  }
  Call call;
  call.name = task.name;
  call.bytes = task.bytes;
  call.invalid = task.invalid;
  call.group = task.group;
  call.rejected = task.rejected;
  call.lane = task.lane;
  call.input = &task.input;
  call.run = task.run;
  if (task.number) call.number = task.number;
  call.fence = task.work->impl_->fence_.get();
  return runCollective(call, injector.get());
}

Status Communicator::Impl::runCollective(const Call& call, const FaultInjector* injector) {
  // Point-to-point exchanges do not take a collective number (the ranks not involved never see them): they
  // go by their own message number. A rejected one is not numbered (the communicator fails with it).
  const uint64_t seq = call.group ? nextSeq_++ : call.invalid.isOk() ? call.number() : nextSeq_;
  // A lane numbers its own collectives of every rank, rejected ones too (as nextSeq_ does).
  const uint32_t laneSeq = call.group && call.lane != kNoIssueLane ? laneSeq_[call.lane]++ : 0;
  Counters delta;
  Status st = call.invalid;
  trace::Span span(trace::Kind::kCollective, call.name, track_, seq);
  span.event().value = call.bytes;
  const auto started = std::chrono::steady_clock::now();
  if (st.isOk()) {
    CollectiveContext ctx;
    ctx.transport = transport_.get();
    ctx.options = &options_;
    ctx.injector = injector->enabled() ? injector : nullptr;
    ctx.counters = &delta;
    ctx.seq = seq;
    ctx.lane = call.lane;
    ctx.laneSeq = laneSeq;
    ctx.name = call.name;
    ctx.track = track_;
    ctx.aborted = &aborted_;
    if (call.group) ctx.held = &heldErrors_;
    Executor::Fence* fence = call.fence;
    // An exception escaping here would end the process through std::terminate on the progress thread (or
    // unwind a caller that holds the transport): an allocation failure (or any other throw) becomes this
    // collective's error instead.
    try {
      st = fence ? fence->beforeCollective() : Status::ok();
      bool skip = false;
      if (st.isOk() && call.group) {
        st = checkCollectiveInput(ctx, executor_.get(), options_.nanCheck, *call.input, &skip);
      }
      if (st.isOk() && !skip) st = call.run(ctx, executor_.get());
      if (st.isOk() && fence) st = fence->afterCollective();
    } catch (const std::bad_alloc&) {
      st = Status(StatusCode::kInternal, std::string(call.name) + " seq " + std::to_string(seq) +
                                             " on rank " + std::to_string(rank_) + ": out of memory");
    } catch (const std::exception& e) {
      st = Status(StatusCode::kInternal, std::string(call.name) + " seq " + std::to_string(seq) +
                                             " on rank " + std::to_string(rank_) + ": " + e.what());
    }
  }
  if (!st.isOk()) {
    // Errors every rank already sees the same way need no broadcast; the rest are announced so that
    // peers fail fast with this cause instead of timing out.
    if (st.code() != StatusCode::kPeerError && st.code() != StatusCode::kFingerprintMismatch &&
        st.code() != StatusCode::kCorruption) {
      broadcastError(transport_.get(), st, call.group ? seq : kNoCollective);
    }
    logError(Subsys::kRuntime, "rank {}: {} seq {} failed: {}", rank_, call.name, seq, st.toString());
    if (trace::on()) span.event().detail = trace::intern(st.toString());
  }
  const uint64_t ns = uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started)
          .count());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (call.name != lastKindName_) {
      lastKind_ = &byKind_[call.name];
      lastKindName_ = call.name;
    }
    CollectiveStats& kind = *lastKind_;
    kind.calls++;
    kind.failed += st.isOk() ? 0 : 1;
    kind.bytes += call.bytes;
    kind.ns += ns;
    counters_ += delta;
    if (st.isOk()) {
      if (!call.rejected) counters_.collectives++;
    } else {
      if (firstError_.isOk()) firstError_ = st;
      if (!transport_->broken()) transport_->markBroken();
    }
  }
  // On the timeline before the caller learns the result: a caller that waited for it and then reads the
  // timeline (ringguard.timeline(), a test) must find the span, as it finds the counters above.
  span.end();
  return st;
}

}  // namespace ringguard
