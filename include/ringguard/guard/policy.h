#pragma once
// What the guard does when a guarded op produced a non-finite value, and when it looks (docs/GUARD.md).
#include <cstdint>
#include <string>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

// kReplay and kFallback run the op (or the step) again after restoring its snapshot; the others end the
// handling. kZero / kClamp keep the last result with its non-finite elements replaced (opt-in, logged);
// kSkipStep restores the snapshot and reports the step as skipped; kRaise restores it and returns an error.
enum class GuardAction : uint8_t { kReplay = 0, kFallback, kZero, kClamp, kSkipStep, kRaise };
const char* guardActionName(GuardAction a);  // "replay", "fallback", "zero", "clamp", "skip_step", "raise"
bool parseGuardAction(const std::string& s, GuardAction* out);
inline bool isTerminal(GuardAction a) { return a != GuardAction::kReplay && a != GuardAction::kFallback; }

// immediate: the verdict of each guarded call is read right after it (one host wait per call) and handled
// per call. deferred: verdicts are read once at the step boundary (Guard::runStep); a detection restores
// every snapshot of the step and the step is replayed (or skipped, or raised) as a whole.
enum class VerdictMode : uint8_t { kImmediate = 0, kDeferred };
const char* verdictModeName(VerdictMode m);  // "immediate", "deferred"
bool parseVerdictMode(const std::string& s, VerdictMode* out);

struct GuardPolicy {
  VerdictMode mode = VerdictMode::kImmediate;
  GuardAction onDetect = GuardAction::kReplay;
  static constexpr int kMaxReplays = 1000;          // a bound on the ladder's length, far above any useful K
  int replays = 2;                                  // K: replays before escalating (onDetect == kReplay)
  GuardAction escalation = GuardAction::kRaise;     // after K failed replays (or a failed first fallback)
  GuardAction afterFallback = GuardAction::kRaise;  // when the escalation was a fallback and it failed too
  uint64_t snapshotBudgetBytes = 1ull << 30;        // snapshot bytes the guard may hold at once
  bool scanState = true;                            // scan the mutated state after the op, not only outputs
  bool scanInputs = false;   // scan the inputs too (finds a poisoned input, not a fault)
  bool checkInputs = false;  // debug: CRC the inputs before and after; a change is an error

  // kInvalidArgument naming the field when the policy cannot be followed (negative replays, a ladder that
  // could loop, zero/clamp in deferred mode where later ops already consumed the bad values).
  Status validate() const;
  // The actions tried after a detection, in order; always finite and ending in a terminal action, so the
  // guard can never loop: e.g. replay x2, raise.
  std::vector<GuardAction> ladder() const;
};

}  // namespace ringguard
