#pragma once
// The communicator's private side (the pimpl of ringguard/runtime/communicator.h): the transport, the
// executor, the progress thread and the queue that the public header must not show, since they are the
// runtime's internal types (docs/ARCHITECTURE.md, "Public and private headers").
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/agreement.h"
#include "algorithms/collectives.h"
#include "core/fault_injector.h"
#include "core/function_ref.h"
#include "executor/executor.h"
#include "ringguard/runtime/communicator.h"
#include "runtime/direct_path.h"
#include "runtime/direct_watchdog.h"
#include "runtime/nan_check.h"
#include "transport/transport.h"

namespace ringguard {

struct Work::Impl {
  void complete(Status status);

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::unique_ptr<Executor::Fence> fence_;
  std::function<void(const Work*)> help_;  // runs queued host collectives on the waiting thread
  std::function<Status()> poll_;           // a direct-path collective: its path's first error so far
  // A grouped call's Work (sendRecvGroupAsync): done when every round's is, with the first error.
  std::vector<std::shared_ptr<Work>> parts_;
};

class Communicator::Impl {
 public:
  // See makeCommunicator (runtime/make_communicator.h).
  Impl(std::unique_ptr<Transport> transport, const Options& options, std::unique_ptr<Executor> executor,
       std::shared_ptr<void> resources);
  ~Impl();
  // Hands the collectives `direct` accepts to it (makeCommunicator, before the first call).
  void setDirectPath(std::unique_ptr<DirectPath> direct);

  // How Communicator's collectives are issued (communicator.cc describes each once for both forms).
  using RunRef = FunctionRef<Status(const CollectiveContext&, Executor*)>;
  using NumberRef = FunctionRef<uint64_t()>;
  // The Async forms' way in: `checked` is the collective's argument check; an error in it completes the
  // Work with kInvalidArgument ("<name> on rank r: ...") after telling the peers. Without `number` the task
  // is a collective of every rank, numbered by nextSeq_; with it a point-to-point exchange, which `number`
  // numbers (its own message number: the ranks not involved never see it) when it runs.
  // `rejected`: rejectedAsync's task.
  std::shared_ptr<Work> submit(const char* name, uint64_t bytes, Status checked, void* stream,
                               std::function<Status(const CollectiveContext&, Executor*)> run,
                               std::function<uint64_t()> number = nullptr, CollectiveInput input = {},
                               bool rejected = false);
  // The synchronous forms' way in, as submit then Work::wait, but run at once on the calling thread when
  // that is safe (runOnCaller): no Task, no Work, no queue. `run` and `number` are called before this
  // returns.
  Status callAndWait(const char* name, uint64_t bytes, Status checked, void* stream, RunRef run,
                     CollectiveInput input, NumberRef number);
  // Whether a synchronous call may run on its caller: host memory (no fence to order against a stream,
  // no device to bind) and no direct path (whose collectives the Async forms route).
  bool callerRuns() const { return callerRuns_; }
  CollectiveShape shape() const;
  // A send/recv's message numbers, on its runner (sendSeq_, recvSeq_): the number it goes by.
  uint64_t numberExchange(PeerExchange* x);

 private:
  // Communicator reads the direct path and forwards to the rest; the state is the runner's.
  friend class Communicator;

  struct Task {
    std::function<Status(const CollectiveContext&, Executor*)> run;
    std::shared_ptr<Work> work;
    Status invalid;  // set when the caller's arguments were rejected
    const char* name;
    uint64_t bytes = 0;  // the call's payload (CollectiveStats::bytes)
    bool group = true;   // a collective of every rank (numbered by nextSeq_); else point-to-point
    std::function<uint64_t()> number;  // point-to-point: numbers the exchange on the progress thread
    CollectiveInput input;             // what RINGGUARD_NAN_CHECK scans (group collectives)
    uint32_t lane = 0;                 // the issuing thread's issue lane, read when it was enqueued
    bool rejected = false;             // rejectedAsync: not a collective of the counters when it agrees
  };
  // One collective as its runner takes it: a Task of the queue, or a synchronous call on its caller.
  struct Call {
    const char* name = "";
    uint64_t bytes = 0;
    Status invalid;  // Task::invalid
    bool group = true;
    bool rejected = false;
    uint32_t lane = 0;
    const CollectiveInput* input = nullptr;
    RunRef run;
    NumberRef number;                  // point-to-point (Task::number); null for a collective of every rank
    Executor::Fence* fence = nullptr;  // null for host memory
  };
  std::shared_ptr<Work> enqueue(Task task, std::unique_ptr<Executor::Fence> fence);
  // The direct path's launch: the communicator's first error (or the path's, which poisons it) first.
  std::shared_ptr<Work> launchDirect(const char* name, uint64_t bytes, const std::function<Status()>& launch);
  // What launchDirect and declineDirect share: the first errors, `launch`, its timeline instant, the path's
  // counts absorbed, a failed launch poisoning the communicator, the call counted (as a collective when
  // `collective` and launched, else as failed). Returns the launch's status.
  Status onDirectPath(const char* name, uint64_t bytes, bool collective,
                      const std::function<Status()>& launch);
  // A call whose arguments failed this rank's checks (`checked`) where the direct path would have taken it:
  // the path declines it on `stream` (DirectPath::decline), so the ranks whose kernels took the call fail at
  // once naming this one; the Work fails with this rank's own error. A failed decline poisons the
  // communicator as a failed launch does.
  std::shared_ptr<Work> declineDirect(const char* name, CollectiveKind kind, const Status& checked,
                                      void* stream);
  // A call the direct path did not take (acceptsX false: above its size, say), on its way to the pipeline,
  // where the path declines() its kind: a rejected one (`checked` not OK) is declined on the path and its
  // Work returned; otherwise its marker (DirectPath::offPath with the call's arguments, as its kernel's
  // fingerprint would name them) enters the path's order and nullptr is returned, the call going on to the
  // pipeline (a failed marker poisons the communicator, so the pipeline's submission then fails with that
  // error). nullptr at once where the path does not carry the kind.
  std::shared_ptr<Work> offDirect(CollectiveKind kind, const Status& checked, void* stream, size_t count,
                                  DataType dtype, ReduceOp op, int root);
  void progressLoop();
  // A waiting caller runs queued host tasks itself while no one else runs one (Work::wait).
  void helpWhileWaiting(const Work* waited);
  // A queued task: its status (the communicator's first error when it failed before the task's turn).
  Status runTask(Task& task);
  // Releases the runner, then completes the task's Work with `status`.
  void finishTask(Task& task, Status status);
  // The synchronous call `call` at once on its caller (caller_run.cc): true, with its status in *out, when
  // no runner holds the transport and nothing is queued (or the communicator failed: its first error);
  // false, with nothing done, otherwise.
  bool runOnCaller(const Call& call, Status* out);
  // One collective on the thread that holds the transport (busy_), the queue's or its caller: numbering,
  // the NaN check, the collective, its error announced, the counters and statistics, its timeline span
  // (ended before this returns, so before the caller learns the result). `injector` was read when the run
  // was claimed.
  Status runCollective(const Call& call, const FaultInjector* injector);
  // "<name> on rank r: <why>": a call's error before it ran (its arguments, its fence).
  Status callError(const char* name, const Status& why) const;
  void finishRun();
  // What the public methods of the same names forward to.
  void abort(const std::string& why);
  // What the user asked for: the direct path's name where there is one ("peer": its collectives above the
  // window take the host-driven pipeline of transport_), else (or where the path says so: one rank) the
  // transport's.
  const char* transportName() const {
    return direct_ && !direct_->namedByTransport() ? direct_->name() : transport_->name();
  }
  // The direct path's watchdog saw a kernel's error: logged, the communicator poisoned with it and aborted.
  void onDirectError(const Status& st);
  void leave(bool peersMayBeGone) {
    {
      // After abort() the runner announces it (the progress thread between collectives, the aborted
      // collective's error path otherwise), then marks the transport broken: the goodbye must follow that
      // frame, or a peer waiting for this rank learns only that it left, not why. Bounded: an aborted
      // collective returns at its next wait.
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, std::chrono::seconds(5), [this] { return !aborted_ || transport_->broken(); });
    }
    transport_->leave();
    if (peersMayBeGone) transport_->markBroken();  // no goodbye wait at the end; nothing is announced
  }
  Counters counters() const;
  // Adds what the direct path's kernels counted since the last call (mutex_ held).
  void absorbDirectCounts() const;
  CommunicatorSummary summary() const;
  Status firstError() const;
  Status setFault(const FaultOptions& fault);
  FaultOptions fault() const;

  std::unique_ptr<Transport> transport_;
  const Options options_;
  std::shared_ptr<const FaultInjector> injector_;  // guarded by mutex_; replaced, never edited
  std::unique_ptr<Executor> executor_;
  std::shared_ptr<DirectPath> direct_;  // device kernels with no host work (peer windows); may be null
  bool callerRuns_ = false;             // see callerRuns(); set in the constructor and setDirectPath
  std::shared_ptr<void> resources_;
  const int rank_;
  const int size_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  bool busy_ = true;  // a runner holds the transport; the handshake runs first, on the progress thread
  std::atomic<bool> aborted_{false};  // read by the waits of the collective in progress
  Status firstError_;
  mutable Counters counters_;  // mutable: counters() takes in the direct path's counts
  // mutable: absorbDirectCounts adds the direct path's times.
  mutable std::map<std::string, CollectiveStats> byKind_;
  // byKind_'s entry of the last name runCollective counted (names are string literals, and a map's entries
  // stay where they are): a run of one kind finds its entry without making and comparing a std::string.
  const char* lastKindName_ = nullptr;
  CollectiveStats* lastKind_ = nullptr;
  uint32_t track_ = 0;    // timeline track (set in the constructor, before the progress thread starts)
  uint64_t nextSeq_ = 0;  // touched by the runner only
  std::map<uint32_t, uint32_t> laneSeq_;  // runner only: each issue lane's next collective number
  HeldErrors heldErrors_;                 // peers' errors of a collective this rank has not reached yet
  mutable uint64_t directDetected_ = 0, directInjected_ = 0;  // the direct path's counts in counters_
  mutable uint64_t directSpansLost_ = 0;  // the direct path's calls whose times were overwritten untaken
  // Point-to-point message numbers per peer (runner only): only the two ends count them.
  std::vector<uint64_t> sendSeq_, recvSeq_;
  std::thread progress_;
  std::unique_ptr<DirectWatchdog> watchdog_;  // with direct_; stopped first in the destructor
};

}  // namespace ringguard
