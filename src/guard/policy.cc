#include "ringguard/guard/policy.h"

#include <string>

namespace ringguard {

const char* guardActionName(GuardAction a) {
  switch (a) {
    case GuardAction::kReplay:
      return "replay";
    case GuardAction::kFallback:
      return "fallback";
    case GuardAction::kZero:
      return "zero";
    case GuardAction::kClamp:
      return "clamp";
    case GuardAction::kSkipStep:
      return "skip_step";
    case GuardAction::kRaise:
      return "raise";
  }
  return "?";
}

bool parseGuardAction(const std::string& s, GuardAction* out) {
  for (GuardAction a : {GuardAction::kReplay, GuardAction::kFallback, GuardAction::kZero, GuardAction::kClamp,
                        GuardAction::kSkipStep, GuardAction::kRaise}) {
    if (s == guardActionName(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

const char* verdictModeName(VerdictMode m) { return m == VerdictMode::kDeferred ? "deferred" : "immediate"; }

bool parseVerdictMode(const std::string& s, VerdictMode* out) {
  if (s == "immediate") {
    *out = VerdictMode::kImmediate;
  } else if (s == "deferred") {
    *out = VerdictMode::kDeferred;
  } else {
    return false;
  }
  return true;
}

Status GuardPolicy::validate() const {
  if (replays < 0 || replays > kMaxReplays) {
    return Status(StatusCode::kInvalidArgument, "guard policy: replays must be in [0, " +
                                                    std::to_string(kMaxReplays) + "], got " +
                                                    std::to_string(replays));
  }
  if (escalation == GuardAction::kReplay) {
    return Status(
        StatusCode::kInvalidArgument,
        "guard policy: escalation cannot be 'replay' (it follows the replays; raise the count instead)");
  }
  if (onDetect == GuardAction::kFallback && escalation == GuardAction::kFallback) {
    return Status(StatusCode::kInvalidArgument,
                  "guard policy: escalation of a failed fallback cannot be 'fallback' again");
  }
  if (!isTerminal(afterFallback)) {
    return Status(StatusCode::kInvalidArgument,
                  std::string("guard policy: after_fallback must end the handling "
                              "(zero, clamp, skip_step or raise), got ") +
                      guardActionName(afterFallback));
  }
  if (mode == VerdictMode::kDeferred) {
    for (GuardAction a : ladder()) {
      if (a == GuardAction::kZero || a == GuardAction::kClamp) {
        return Status(
            StatusCode::kInvalidArgument,
            std::string("guard policy: '") + guardActionName(a) +
                "' needs immediate mode (deferred verdicts arrive after later ops consumed the values)");
      }
    }
  }
  return Status::ok();
}

std::vector<GuardAction> GuardPolicy::ladder() const {
  std::vector<GuardAction> steps;
  if (isTerminal(onDetect)) {
    steps.push_back(onDetect);
    return steps;
  }
  if (onDetect == GuardAction::kReplay) {
    steps.assign(static_cast<size_t>(replays < 0 ? 0 : replays), GuardAction::kReplay);
  } else {
    steps.push_back(GuardAction::kFallback);
  }
  if (escalation == GuardAction::kFallback) {
    steps.push_back(GuardAction::kFallback);
    steps.push_back(afterFallback);
  } else if (isTerminal(escalation)) {
    steps.push_back(escalation);
  } else {
    steps.push_back(GuardAction::kRaise);  // an invalid escalation (validate() reports it) never loops
  }
  return steps;
}

}  // namespace ringguard
