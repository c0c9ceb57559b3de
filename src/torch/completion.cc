#include "torch/completion.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/thread_name.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace ringguard {

namespace {

// Idle threads a lane keeps: two serve a backlog (one completes, the other leads); more only after a burst of
// nested waits, and those exit as they fall idle.
constexpr int kMaxIdle = 2;

// The exit gate of ExitWindow (completion.h). Never destroyed: lane threads may use it during the static
// destruction that follows the interpreter's finalisation.
struct ExitGate {
  std::mutex mutex;
  std::condition_variable closed;
  int open = 0;
  bool exiting = false;
};

ExitGate& exitGate() {
  static ExitGate* gate = new ExitGate;
  return *gate;
}

}  // namespace

ExitWindow::ExitWindow() {
  ExitGate& g = exitGate();
  std::lock_guard<std::mutex> lock(g.mutex);
  open_ = !g.exiting;
  if (open_) ++g.open;
}

ExitWindow::~ExitWindow() {
  if (!open_) return;
  ExitGate& g = exitGate();
  std::lock_guard<std::mutex> lock(g.mutex);
  if (--g.open == 0) g.closed.notify_all();
}

void ExitWindow::closeForExit(std::chrono::milliseconds limit) {
  ExitGate& g = exitGate();
  std::unique_lock<std::mutex> lock(g.mutex);
  g.exiting = true;
  // A window lasts one completion (copy-outs, the Future's callbacks, the release); the limit only bounds a
  // callback that waits for a later collective.
  g.closed.wait_for(lock, limit, [&g] { return g.open == 0; });
}

std::exception_ptr toException(const Status& st) {
  try {
    C10_THROW_ERROR(DistBackendError, "ringguard: " + st.toString());
  } catch (...) {
    return std::current_exception();
  }
}

void failNotHandedOver(std::vector<std::pair<P2pOp, std::shared_ptr<PendingCollective>>>& ops,
                       const Status& why) {
  const std::exception_ptr error = toException(why);
  for (auto& op : ops) {
    if (op.second->work) continue;
    op.second->future->setError(error);
    op.second->c10dWork->complete(error);
  }
}

CompletionLane::CompletionLane(std::string threadName) : threadName_(std::move(threadName)) {}

CompletionLane::~CompletionLane() { drain(); }

void CompletionLane::push(std::shared_ptr<PendingCollective> p) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (draining_)
    throw std::logic_error(std::string("ringguard: a collective was issued after ") + stoppedBy_);
  queue_.push_back(std::move(p));
  if (!leading_) recruitLocked();
}

void CompletionLane::recruitLocked() {
  leading_ = true;
  if (idle_ > wakeups_) {
    ++wakeups_;
    cv_.notify_one();
    return;
  }
  // Threads that returned are joined here (they hold no lock any more: they left it when they returned).
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (std::find(finished_.begin(), finished_.end(), it->get_id()) != finished_.end()) {
      it->join();
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
  finished_.clear();
  threads_.emplace_back([this] { threadMain(); });
}

// A thread is started as the leader. As leader it takes the oldest collective, waits for it, runs its
// copy-outs and gives the role up (recruiting the next leader if more is queued) before it completes the
// Future: the callbacks that run there may wait for a later collective of this lane, which the next leader
// completes. Then it completes the Work and leads again if nobody does, else falls idle.
void CompletionLane::threadMain() {
  nameThisThread(threadName_.c_str());
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    bool lead = true;  // started as the leader, or woken to be it
    while (lead && !queue_.empty()) {
      std::shared_ptr<PendingCollective> p = queue_.front();
      queue_.pop_front();
      lock.unlock();
      Status st = p->work->wait();  // for CUDA, also orders the caller's stream after the results
      lock.lock();
      leading_ = false;
      ++busy_;
      if (!queue_.empty()) recruitLocked();
      lock.unlock();
      {
        // From before the Work completes (its waiter may then return and the interpreter finalise) to
        // after the tensors it kept are released (completion.h, ExitWindow).
        const ExitWindow window;
        completeOne(*p, st);
        if (window.open()) {
          p.reset();  // the tensors it kept go before the lock is taken again
        } else {
          keepForExit(std::move(p));  // the interpreter is exiting: releasing them may need the GIL
        }
      }
      lock.lock();
      --busy_;
      if (leading_) {
        lead = false;  // another thread leads now
      } else {
        leading_ = true;
      }
    }
    if (lead) leading_ = false;  // nothing queued
    drained_.notify_all();
    // Idle: wait to be offered the leader role.
    if (idle_ >= kMaxIdle || draining_) break;
    ++idle_;
    cv_.wait(lock, [this] { return wakeups_ > 0 || draining_; });
    --idle_;
    if (wakeups_ == 0) break;  // draining, and nothing to lead
    --wakeups_;
  }
  finished_.push_back(std::this_thread::get_id());
  drained_.notify_all();
}

void CompletionLane::completeOne(PendingCollective& p, const Status& st) {
  std::exception_ptr error;
  if (!st.isOk()) error = toException(st);
  try {
#if RINGGUARD_TORCH_CUDA
    // The copy-outs run on the caller's stream, and Future::markCompleted records an event on the current
    // stream of each of its devices: the caller's.
    std::optional<c10::cuda::CUDAStreamGuard> guard;
    if (p.device >= 0) {
      guard.emplace(
          c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(p.stream), c10::DeviceIndex(p.device)));
    }
#endif
    if (!error && p.after) {
      // The copy-outs write the caller's tensors as the backend's memory, outside autograd (as gloo's and
      // NCCL's do): a parameter, a leaf that requires grad, is a valid output (dist.broadcast(p) under
      // no_grad), and this thread's grad mode is not the caller's.
      const at::NoGradGuard noGrad;
      p.after();
    }
    if (error) {
      p.future->setError(error);
    } else {
      p.future->markCompleted(p.value);  // runs the then() callbacks, here
    }
  } catch (...) {
    if (!error) error = std::current_exception();
    if (!p.future->completed()) p.future->setError(error);
  }
  p.c10dWork->complete(error);
}

void CompletionLane::drain(const char* stoppedBy) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!draining_) stoppedBy_ = stoppedBy;
  draining_ = true;
  cv_.notify_all();
  drained_.wait(lock, [this] { return queue_.empty() && !leading_ && busy_ == 0 && idle_ == 0; });
  // Every thread has returned or is about to (it pushed its id under the lock and only returns now).
  std::list<std::thread> threads;
  threads.swap(threads_);
  lock.unlock();
  for (std::thread& t : threads) t.join();
}

}  // namespace ringguard
