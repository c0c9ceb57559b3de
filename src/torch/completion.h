#pragma once
// How the c10d backend completes what it issued: its c10d Work objects and the lanes that complete them
// (docs/TORCH.md, "Completion"). Private to the torch layer.
//
// A collective's c10d Work and its Future complete once the ringguard collective has finished on this rank
// (Work::wait() on the ringguard side: the verdict is known, and for CUDA the caller's stream is ordered
// after the results). Futures run their then() callbacks inside markCompleted(), on the completing thread,
// and a callback may issue another collective and wait for it (DDP's PowerSGD hook does): so the thread that
// runs callbacks must never be the only one that can complete the next collective. A lane therefore gives
// up its role before it completes a Future; whoever completes the next collective (an idle thread of the
// lane, else a new one) takes the role over, and the thread that ran the callbacks rejoins as a spare.
#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#include "ringguard/runtime/communicator.h"

namespace ringguard {

// A failed Status as the exception torch raises for it (c10::DistBackendError, "ringguard: ...").
std::exception_ptr toException(const Status& st);

// The interpreter's exit, as the threads that complete c10d Works see it (docs/TORCH.md, "Completion").
//
// Those threads (a CompletionLane's; PeerLanes' "rg-send" / "rg-recv", through point_to_point.cc's
// send/recv callbacks) drop references to tensors that Python owns after they complete a Work. Since torch
// 2.10 a C++ reference count that goes from 2 to 1 on a tensor with a Python object decrefs that object,
// under the GIL (TensorImpl::decref_pyobject). Once the Work is complete its waiter may return, the script
// end and the interpreter finalise (no destroy_process_group drained the lanes first); CPython ends a thread
// that asks for the GIL then with pthread_exit, and the forced unwind through the (noexcept) destructor is
// std::terminate: "terminate called without an active exception", SIGABRT at exit.
//
// So such a thread completes a Work and lets go of what it held inside an ExitWindow. closeForExit() (from
// Python's atexit, registered by ringguard._C: it runs before finalisation, while other threads can still
// take the GIL) waits until the open windows have closed; a window opened after it is refused: the thread
// still completes the Work, then keeps what it held to the end of the process (keepForExit).
class ExitWindow {
 public:
  ExitWindow();
  ~ExitWindow();
  ExitWindow(const ExitWindow&) = delete;
  ExitWindow& operator=(const ExitWindow&) = delete;
  // false: the interpreter is exiting; what the thread holds must not be released (keepForExit).
  bool open() const { return open_; }
  // Called with the GIL released: refuses new windows, then waits (at most `limit`) for the open ones.
  static void closeForExit(std::chrono::milliseconds limit);

 private:
  bool open_;
};

// Never released: the process is exiting and the interpreter may be finalising.
template <typename T>
void keepForExit(T&& held) {
  new std::decay_t<T>(std::forward<T>(held));  // a deliberate leak
}

// The c10d Work of one ringguard operation. The lanes complete its Future (with the outputs) first, then
// the Work itself (complete()), as ProcessGroupGloo does: a completed Work always has a completed Future.
class C10dWork : public c10d::Work {
 public:
  C10dWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
           c10::intrusive_ptr<c10::ivalue::Future> future)
      : c10d::Work(rank, type, title), outputs_(std::move(outputs)), future_(std::move(future)) {}
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void complete(std::exception_ptr error) { finish(std::move(error)); }
  // A receive from any source: the rank it came from, set before complete().
  void setSourceRank(int rank) { source_.store(rank); }
  int sourceRank() const override {
    const int rank = source_.load();
    return rank >= 0 ? rank
                     : c10d::Work::sourceRank();  // the base class throws: not a receive from any source
  }

 private:
  std::atomic<int> source_{-1};
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// One issued collective, waiting to complete.
struct PendingCollective {
  std::shared_ptr<ringguard::Work> work;  // the ringguard collective (the last one, for coalesced forms)
  c10::intrusive_ptr<C10dWork> c10dWork;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  c10::IValue value;             // what the future completes with
  std::vector<at::Tensor> keep;  // alive until done: outputs, inputs, staging buffers
  std::function<void()> after;   // on success, before anything completes (copy-outs)
  int device = -1;               // CUDA device, or -1
  void* stream = nullptr;        // the caller's stream (CUDA)
};

// Fails the send/recv ops of `ops` that were never handed to a completion lane (their `work` is null: not
// issued, or their issue threw): their Futures, then their Works. Called with no lock held: a Future's
// callbacks run here and may issue on the group. Those handed over are the lane's to complete.
void failNotHandedOver(std::vector<std::pair<P2pOp, std::shared_ptr<PendingCollective>>>& ops,
                       const Status& why);

// Completes the collectives of one communicator in issue order (one lane per communicator, so a CPU
// collective never waits behind an earlier CUDA one). At most one thread of a lane waits on collectives
// at a time (the leader); it hands the role on before it runs Future callbacks (see the top of this file).
class CompletionLane {
 public:
  // `threadName`: the name of the lane's threads (15 characters at most, "rg-..." by convention).
  explicit CompletionLane(std::string threadName);
  ~CompletionLane();  // drain()
  CompletionLane(const CompletionLane&) = delete;
  CompletionLane& operator=(const CompletionLane&) = delete;

  // Queues `p` (its collective is already enqueued on the communicator). Thread-safe; callable from a
  // Future callback.
  void push(std::shared_ptr<PendingCollective> p);
  // Completes everything queued (each collective ends, at worst, at its timeout), then joins the lane's
  // threads. Later pushes are refused (std::logic_error "... after <stoppedBy>", what stopped the group:
  // "shutdown()" or "abort()"; the first drain's). Idempotent; not from a callback of this lane.
  void drain(const char* stoppedBy = "shutdown()");

 private:
  void threadMain();
  // Wakes an idle thread to lead, or starts one. Caller holds mutex_.
  void recruitLocked();
  // Copy-outs, then the Future (its callbacks run here), then the Work.
  static void completeOne(PendingCollective& p, const Status& st);

  const std::string threadName_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<PendingCollective>> queue_;
  bool leading_ = false;  // a thread holds the leader role
  int idle_ = 0;          // threads waiting to lead
  int wakeups_ = 0;       // leader roles offered to idle threads, not yet taken
  int busy_ = 0;          // threads completing a collective after giving up the leader role
  bool draining_ = false;
  const char* stoppedBy_ = "shutdown()";  // for the error of a push after drain()
  std::condition_variable drained_;       // drain() waits on it
  std::list<std::thread> threads_;
  std::vector<std::thread::id> finished_;  // threads that returned; joined by the next recruit or drain
};

}  // namespace ringguard
