#pragma once
// ringguard::Guard: NaN/Inf snapshot -> detect -> restore -> replay / fallback for a callable that declares
// the memory it reads (inputs), mutates (state) and writes (outputs). docs/GUARD.md has the semantics.
//
//   Guard guard(policy, makeHostGuardBackend(), deviceBackend /* or nullptr */);
//   GuardedOp op{"mlp", {x, w}, {stats}, {y}, [&] { return mlp(x, w, y); }};
//   RINGGUARD_RETURN_IF_ERROR(guard.run(op));          // immediate: verdict read after the call
//   guard.runStep([&] { ...guard.run(op)...; return Status::ok(); });  // a step: deferred verdicts, agreed
//
// A Guard is used by one thread at a time (the counters may be read from any thread).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/guard/backend.h"
#include "ringguard/guard/fault.h"
#include "ringguard/guard/policy.h"

namespace ringguard {

struct GuardCounters {
  uint64_t calls = 0;             // guarded calls run (replays not included)
  uint64_t steps = 0;             // steps run through runStep (replays not included)
  uint64_t detections = 0;        // verdicts that found a non-finite value (each attempt counts)
  uint64_t rollbacks = 0;         // restores of a call's or a step's snapshots
  uint64_t replays = 0;           // calls or steps run again with the same op
  uint64_t fallbacks = 0;         // calls or steps run again with the fallback
  uint64_t escalations = 0;       // times the K replays were exhausted and the escalation was taken
  uint64_t sanitized = 0;         // zero / clamp applied
  uint64_t skippedSteps = 0;      // steps (or calls outside a step) skipped
  uint64_t raised = 0;            // errors returned for non-finite results
  uint64_t injected = 0;          // values written by the guard's fault injection
  uint64_t bytesSnapshotted = 0;  // bytes copied into snapshots
  uint64_t hostWaits = 0;         // host waits for verdicts (immediate: one per call; deferred: per step)

  std::string toString() const;
};

struct GuardedOp {
  std::string name;
  std::vector<GuardBuffer> inputs;  // read only; must be unchanged by the op (checkInputs verifies it)
  std::vector<GuardBuffer> state;   // mutated in place: snapshotted before the op, restored on detection
  // Written entirely by the op: scanned, never snapshotted. The guard reads this list after every run of
  // the body, so a body that allocates its results (a functional op) may assign them here as it returns.
  std::vector<GuardBuffer> outputs;
  std::function<Status()> body;
  std::function<Status()> fallback;  // optional alternative (fp32 compute, reference implementation)
  void* stream = nullptr;            // device work's stream (cudaStream_t), shared by body and guard
};

// How a call or a step ended.
enum class GuardResolution : uint8_t {
  kClean = 0,  // no detection
  kReplayed,   // detections, then a replay came out clean
  kFellBack,   // the fallback came out clean
  kSanitized,  // zero / clamp applied to the last result
  kSkipped,    // snapshot restored; the caller must skip (in a step: the whole step was restored)
  kPending,    // deferred mode: run() inside a step, verdict read at the step's end
};
const char* guardResolutionName(GuardResolution r);

struct CallReport {
  uint64_t call = 0;  // the op's call index
  int attempts = 0;   // body or fallback runs
  GuardResolution resolution = GuardResolution::kClean;
};

struct StepReport {
  int attempts = 0;
  GuardResolution resolution = GuardResolution::kClean;
  uint64_t severity = 0;  // the agreed (MAX over ranks) severity of the last attempt
};

// Severity a rank contributes to a step's agreement; the step follows the largest over all ranks.
enum class StepSeverity : uint64_t { kClean = 0, kRollback = 1, kSkip = 2, kRaise = 3 };

// Combines this rank's severity with every other rank's (a MAX allreduce over a communicator), in place.
// Called once per step attempt on every rank, so ranks restore, replay or skip the same steps.
using GuardAgreement = std::function<Status(uint64_t* severity)>;

class Guard {
 public:
  // `device` may be null (host buffers only). Aborts on an invalid policy: check policy.validate() first
  // where it comes from a user.
  Guard(GuardPolicy policy, std::unique_ptr<GuardBackend> host, std::unique_ptr<GuardBackend> device);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  // Runs `op` under the policy. Immediate mode: snapshot, run, scan, read the verdict, handle it. Deferred
  // mode (only inside runStep): snapshot, run, scan; the verdict is read at the step's end.
  // kInvalidArgument for bad declarations (null, ragged, overlapping, over the snapshot budget, an input
  // the op changed under checkInputs); kCorruption when the policy raises for a non-finite result, naming
  // op, call, tensor, first bad index and value, the count of bad values and the replays tried.
  Status run(const GuardedOp& op, CallReport* report = nullptr);

  // Runs `region` (which calls run() for its guarded ops) as one step. Every snapshot taken in the step is
  // kept until its end; the step's severity is agreed across ranks (setAgreement); on a rollback every
  // snapshot of the step is restored (newest first) and the step is replayed, run with its flagged ops'
  // fallbacks, skipped or raised, per the policy's ladder. Steps do not nest.
  Status runStep(const std::function<Status()>& region, StepReport* report = nullptr);

  // A step whose verdict stays on the device: `region` runs as in runStep (deferred mode only), but no
  // state is snapshotted and nothing waits; the verdict is written into `flag` (one f32 element, host or
  // device memory, ordered on `stream`): 1.0f when any scan of the step found a non-finite value, else
  // 0.0f. Whatever the step would change must be gated by the flag on the device, e.g. a fused
  // optimizer's found_inf (skip_step with zero host waits). Agreement across ranks is a MAX allreduce of
  // the flag (stream-ordered with NCCL); detections are not counted (the host never sees them).
  Status runStepToFlag(const std::function<Status()>& region, const GuardBuffer& flag, void* stream);

  void setAgreement(GuardAgreement agreement);
  GuardFaultInjector& faults() { return faults_; }
  const GuardPolicy& policy() const { return policy_; }
  GuardCounters counters() const;
  uint64_t heldSnapshotBytes() const { return heldBytes_; }

 private:
  struct Saved {
    GuardBuffer buffer;
    SnapshotHandle handle;
    void* stream;
  };
  struct Bad {
    const GuardBuffer* buffer;
    ScanResult result;
  };

  GuardBackend* backendFor(const GuardBuffer& b);
  Status validate(const GuardedOp& op) const;
  Status snapshotState(const GuardedOp& op, std::vector<Saved>* saved);
  Status restore(const std::vector<Saved>& saved);
  Status releaseAll(std::vector<Saved>* saved);
  Status attempt(const GuardedOp& op, uint64_t call, int attemptIndex, bool useFallback);
  Status scanOp(const GuardedOp& op, std::vector<const GuardBuffer*>* scanned);
  Status readVerdict(void* stream, const std::vector<const GuardBuffer*>& scanned, std::vector<Bad>* bad);
  Status sanitize(const GuardedOp& op, GuardAction action);
  Status checksums(const GuardedOp& op, std::vector<uint32_t>* crcs);
  Status nonFiniteError(const GuardedOp& op, uint64_t call, const std::vector<Bad>& bad, int replays,
                        int fallbacks, const char* what);
  Status runImmediate(const GuardedOp& op, uint64_t call, std::vector<Saved>* saved, CallReport* report);
  Status agree(uint64_t* severity);
  Status readStepVerdicts(std::vector<std::string>* flaggedOps, std::string* detail);
  void count(uint64_t GuardCounters::*field, uint64_t n = 1);

  const GuardPolicy policy_;
  const std::vector<GuardAction> ladder_;
  std::unique_ptr<GuardBackend> host_;
  std::unique_ptr<GuardBackend> device_;
  GuardFaultInjector faults_;
  GuardAgreement agreement_;
  std::map<std::string, uint64_t> calls_;  // next call index per op name

  // Step state (runStep).
  bool inStep_ = false;
  bool stepToFlag_ = false;                   // runStepToFlag: no snapshots, verdict into a flag
  int stepAttempt_ = 0;                       // 0: the step's first run; n: its n-th replay
  void* stepStream_ = nullptr;                // stream of the step's last guarded call: verdicts read there
  bool stepFallback_ = false;                 // this attempt runs flagged ops' fallbacks
  std::vector<std::string> stepFallbackOps_;  // ops flagged in the previous attempt
  std::vector<Saved> stepSaved_;
  struct Pending {
    std::string op;
    uint64_t call;
    std::vector<GuardBuffer> scanned;
    std::vector<const char*> roles;  // "output", "state", "input"
  };
  std::vector<Pending> stepPending_;
  StepSeverity stepLocal_ = StepSeverity::kClean;
  Status stepError_;  // the error behind a kRaise severity, returned at the step's end

  uint64_t heldBytes_ = 0;
  std::string traceOp_;  // the op whose events are being counted (timeline detail)
  mutable std::mutex countersMu_;
  GuardCounters counters_;  // guarded by countersMu_
};

}  // namespace ringguard
