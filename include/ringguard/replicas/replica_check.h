#pragma once
// ringguard::ReplicaChecker: after each optimizer step, the CRC-32 of every tensor the data-parallel
// replicas must hold alike is all-gathered over the replica group and compared; a mismatch is raised,
// repaired from the majority or logged, per the policy (docs/REPLICAS.md).
//
//   ReplicaChecker check(options, makeCommunicatorExchange(comm), makeHostReplicaBackend(), nullptr);
//   for (step = 0; ...; ++step) {
//     ...; optimizer.step();
//     RINGGUARD_RETURN_IF_ERROR(check.afterStep(step, tensors, stream));  // kCorruption names the rank(s)
//   }
//
// Every rank of the group calls afterStep for the same steps with the same list of tensors (names, dtypes,
// sizes: a difference is an error on every rank, not a wrong comparison). Used by one thread at a time (a
// gated checker's own verdict thread aside).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/replicas/comparison.h"
#include "ringguard/replicas/decision.h"
#include "ringguard/replicas/fault.h"
#include "ringguard/replicas/fingerprint.h"
#include "ringguard/replicas/gate.h"

namespace ringguard {

// sync=False: one check's all-gather left in flight; its words are taken at the next check.
class ReplicaPending {
 public:
  virtual ~ReplicaPending() = default;
  // Whether take() would return without waiting (on the device: an event query, or the gate slot's epoch
  // read; no host wait).
  virtual bool ready() = 0;
  // Every rank's message, rank-major (as ReplicaExchange::allGather); waits when not ready().
  virtual Status take(std::vector<uint32_t>* all) = 0;
};

// The replica group's collectives, as the checker needs them.
class ReplicaExchange {
 public:
  virtual ~ReplicaExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's `mine` (all of one length), rank-major, into `all` (size() * mine.size() words).
  virtual Status allGather(const std::vector<uint32_t>& mine, std::vector<uint32_t>* all) = 0;
  // `root`'s bytes of `tensor` into every rank's, in place, ordered on `stream`.
  virtual Status broadcast(const ReplicaTensor& tensor, int root, void* stream) = 0;
  // sync=False: whether startCheck() computes the device tensors' CRCs itself, on the stream into the
  // message (no host wait). false: the checker fills them in before (the device backend's host wait).
  virtual bool fingerprintsOnDevice() const { return false; }
  // sync=False: starts this rank's check message and its all-gather, and returns; the checker takes the
  // gathered words at its next check. `mine` holds the header and the CRCs, except, when
  // fingerprintsOnDevice(), those of tensors[deviceIndices] (words kHeaderWords + index, left 0), which the
  // exchange computes on `stream`. The default gathers now: host memory, nothing is left to wait for.
  virtual Status startCheck(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>& tensors,
                            const std::vector<size_t>& deviceIndices, void* stream,
                            std::unique_ptr<ReplicaPending>* out);
  // The gated check (ReplicaChecker::useGate): as startCheck, the device tensors' CRCs computed on `stream`
  // into the message, which is then all-gathered into device memory on `stream`; *words points at the
  // size() x mine.size() gathered words, for the work queued on `stream` next (the gate) to read. Called on
  // the training thread; the gated checker's other calls (allGather, broadcast) come from its verdict
  // thread and go over a communicator of the check's own. kInvalidArgument by default (no device gather).
  virtual Status gatherOnDevice(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>& tensors,
                                const std::vector<size_t>& deviceIndices, void* stream,
                                const uint32_t** words);
};

struct ReplicaCheckOptions {
  ReplicaAction onMismatch = ReplicaAction::kRaise;  // kRaise, kRepair or kWarn
  uint64_t every = 1;                                // check after steps every-1, 2*every-1, ... (>= 1)
  // false: the verdict of a check is read at the next check (no host wait in the step; found one check
  // late, and the odd replica's gradients of the steps between are already in every replica).
  bool sync = true;
  // Differing tensors whose first differing element is located (a second, chunked comparison each).
  size_t locateElements = 4;
};

struct ReplicaCounters {
  uint64_t steps = 0;               // afterStep calls
  uint64_t checks = 0;              // comparisons run (the checks after a repair included)
  uint64_t mismatches = 0;          // checks that found a difference
  uint64_t repairs = 0;             // repairs made (broadcasts from the majority)
  uint64_t repairedTensors = 0;     // tensors broadcast by them
  uint64_t escalations = 0;         // repair policy turned into raise
  uint64_t warnings = 0;            // mismatches let through by the warn policy
  uint64_t raised = 0;              // errors returned for mismatches
  uint64_t injected = 0;            // bits flipped by fault injection on this rank
  uint64_t bytesFingerprinted = 0;  // bytes checksummed on this rank
  uint64_t hostWaits = 0;           // host waits of the backends for fingerprints
  uint64_t deferredWaits = 0;       // sync=False: verdicts not ready when read, waited for
  uint64_t locateRounds = 0;        // all-gathers spent locating first differing elements
  uint64_t gatedChecks = 0;         // checks whose verdict a gate waited for instead of the host
};

// The outcome of the last check.
struct ReplicaReport {
  uint64_t step = 0;                 // the step whose state was fingerprinted
  uint64_t readAtStep = 0;           // the step whose check read the verdict (sync=False: the next check)
  bool checked = false;              // false: not a check step
  bool mismatch = false;             // the first comparison of the step found a difference
  ReplicaComparison comparison;      // the first comparison
  std::vector<std::string> tensors;  // names of the differing tensors
  // Per differing tensor (the first options.locateElements of them): the first element whose bytes differ
  // on some rank, agreed on every rank; -1 where not located (or, sync=False, no longer differing).
  std::vector<int64_t> firstElements;
  ReplicaDecision decision;
  bool repaired = false;  // a repair ran and the check after it came out clean
  std::string message;    // what was logged or raised
};

class ReplicaChecker {
 public:
  // `device` may be null (host tensors only). kInvalidArgument-free: options are checked by validate().
  ReplicaChecker(ReplicaCheckOptions options, std::unique_ptr<ReplicaExchange> exchange,
                 std::unique_ptr<ReplicaBackend> host, std::unique_ptr<ReplicaBackend> device);
  ~ReplicaChecker();
  ReplicaChecker(const ReplicaChecker&) = delete;
  ReplicaChecker& operator=(const ReplicaChecker&) = delete;

  // kInvalidArgument naming the field (every == 0, a policy that is not raise, repair or warn).
  static Status validate(const ReplicaCheckOptions& options);

  // After optimizer step `step` (0-based; the same on every rank): flips the bits a fault rule names for
  // this rank and step, then, on check steps, fingerprints `tensors`, all-gathers and compares. On a
  // mismatch: kCorruption naming the step, the odd rank(s) and the tensors (raise; also a repair that
  // cannot be made or did not converge), or a repair (broadcast of the differing tensors from the
  // majority, then a second check), or a warning (logged). Returns ok otherwise.
  Status afterStep(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream = nullptr);
  // Whether afterStep(step) reads `tensors`: a check step, or a step a fault rule flips bits at. On other
  // steps a caller may pass no tensors (the Python hook skips listing a model's every tensor then).
  bool needsTensors(uint64_t step) const;
  // Checks now, whatever the step (`step` is only reported). sync=False: the pending verdict is read first.
  Status checkNow(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream = nullptr);
  // sync=False: reads the pending verdict now (after the last step of a run) and acts on it; `step` is the
  // step whose state `tensors` hold (a repair is made in it). No-op when nothing is pending.
  Status flush(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream = nullptr);

  // sync=True without the host's wait (docs/REPLICAS.md, "The gate"): from now on a check gathers its
  // fingerprints on the device (ReplicaExchange::gatherOnDevice) and `gate` holds `stream` while they differ;
  // a verdict thread of the checker takes the words, compares, decides and acts (locating, repair, the check
  // after it: the exchange's allGather and broadcast, on `verdictStream`), then releases the gate. A check
  // it raises for (a mismatch under raise, an escalation, a failure of its own) calls
  // `abortTraining(why, agreed)` first, so the kernels queued behind the gate fail instead of spreading the
  // odd replica, and the next check, flush() or checkNow() returns it. `agreed`: the verdict every rank
  // reaches (kCorruption); false: a failure of this rank's (its peers may still wait for it in a collective
  // of the exchange). kInvalidArgument with sync=False or a gate already in use.
  using AbortTraining = std::function<void(const std::string& why, bool agreed)>;
  Status useGate(std::unique_ptr<ReplicaGate> gate, void* verdictStream, AbortTraining abortTraining);
  bool gated() const { return gate_ != nullptr; }
  // Gated: waits until the verdict thread has settled every check made so far (counters() and lastReport()
  // then describe them). No-op otherwise.
  void awaitVerdicts();
  // Gated: ends the verdict thread (the checks it has not settled are dropped, their gates released).
  // Called by the destructor; a caller whose exchange needs its thread (Python's GIL) calls it first.
  void stopVerdicts();

  // The layout (names, dtypes, sizes, count) of the tensors the next check gets (afterStep on a check step,
  // checkNow, flush), as a version its caller changes whenever any of them changes and never gives two
  // lists (the torch listing's, process-wide); 0: not known. While it stays, the gated check reuses its
  // layout hash and shares its names instead of copying them. The training thread's, as those calls are.
  void layoutKnown(uint64_t version) { layoutVersion_ = version; }

  Status setFault(const ReplicaFault& fault);  // replaces any earlier one
  void clearFault();
  ReplicaCounters counters() const;
  ReplicaReport lastReport() const;
  const ReplicaCheckOptions& options() const { return options_; }
  int rank() const;
  int size() const;

 private:
  Status gatherAndCompare(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream,
                          ReplicaComparison* out);
  // `layout`: the tensors' layout version (layoutKnown; 0: hash it), on the training thread only.
  Status encodeMine(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream,
                    std::vector<uint32_t>* words, std::vector<size_t>* deviceLeft = nullptr,
                    uint64_t layout = 0);
  Status compareGathered(const std::vector<uint32_t>& all, size_t wordsPerRank, ReplicaComparison* out);
  Status launchDeferred(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream);
  Status resolveDeferred(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream);
  // Decides and acts on comparison `c` of the state after step `checked`, read at step `now` (whose state
  // `tensors` hold: a repair is made in it).
  // `repairHost` false (the gate): a difference in a host tensor is raised, not repaired (the training
  // thread has moved host tensors on since the check).
  Status act(uint64_t checked, uint64_t now, ReplicaComparison c, const std::vector<ReplicaTensor>& tensors,
             void* stream, bool repairHost = true);
  // `deviceLeft` non-null: device tensors are not fingerprinted, their indices are listed there instead.
  Status fingerprint(const std::vector<ReplicaTensor>& tensors, void* stream, std::vector<uint32_t>* crcs,
                     std::vector<size_t>* deviceLeft = nullptr);
  Status injectFault(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream);
  bool checksAt(uint64_t step) const { return (step + 1) % options_.every == 0; }
  bool faultAt(uint64_t step) const { return faultOn_ && fault_.hits(fault_.rank, step); }
  ReplicaBackend* backendFor(MemoryKind kind);
  void finish(ReplicaReport report);
  // The gate (useGate): the check on the training thread, the verdict thread's loop and one check of it.
  struct GatedCheck {
    uint64_t step = 0, epoch = 0;
    size_t wordsPerRank = 0;
    std::unique_ptr<ReplicaPending> pending;
    std::vector<ReplicaTensor> tensors;  // host tensors point into `hostCopies`; no names (`names`)
    std::shared_ptr<const std::vector<std::string>> names;  // tensors' names, given them on a mismatch
    std::vector<unsigned char> hostCopies;                  // the host tensors' bytes, end to end
  };
  // The training thread's layout (layoutKnown) and what the gated check keeps of it.
  uint64_t layoutVersion_ = 0, hashedLayout_ = 0, namedLayout_ = 0;
  uint32_t layoutHash_ = 0;
  std::shared_ptr<const std::vector<std::string>> names_;
  Status checkGated(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream);
  void verdictLoop();
  Status settle(GatedCheck& check);
  Status gateFailure();

  const ReplicaCheckOptions options_;
  std::unique_ptr<ReplicaExchange> exchange_;
  std::unique_ptr<ReplicaBackend> host_;
  std::unique_ptr<ReplicaBackend> device_;
  ReplicaDecider decider_;
  std::unique_ptr<ReplicaPending> pending_;  // sync=False: the last check's all-gather
  uint64_t pendingStep_ = 0;
  size_t pendingWords_ = 0;
  bool faultOn_ = false;
  ReplicaFault fault_;
  mutable std::mutex mu_;
  ReplicaCounters counters_;  // guarded by mu_
  ReplicaReport last_;        // guarded by mu_
  // The gate: the checks queued for the verdict thread, whether it is busy with one, the first failure it
  // found (returned by every later check), all guarded by verdictMu_.
  std::unique_ptr<ReplicaGate> gate_;
  void* verdictStream_ = nullptr;
  AbortTraining abortTraining_;
  uint64_t epoch_ = 0;
  std::mutex verdictMu_;
  std::condition_variable verdictCv_;
  std::deque<GatedCheck> verdicts_;
  bool settling_ = false;
  bool stopping_ = false;
  Status gateFailure_;
  std::thread verdictThread_;  // last: joined before the members it uses go
};

}  // namespace ringguard
