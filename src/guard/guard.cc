// The guard's state machine: snapshot -> run -> scan -> verdict -> restore -> replay / fallback / terminal
// action, per call (immediate mode) or per step (deferred mode, and step-level skip / raise in both modes).
#include "ringguard/guard/guard.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "core/logging.h"
#include "core/trace_events.h"

namespace ringguard {
namespace {

// Replays before the first escalation: the ladder entries that belong to the onDetect stage.
size_t firstStageLength(const GuardPolicy& p) {
  if (p.onDetect == GuardAction::kReplay) return static_cast<size_t>(p.replays);
  if (p.onDetect == GuardAction::kFallback) return 1;
  return 0;
}

std::string valueText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "+inf" : "-inf";
  std::ostringstream os;
  os << v;
  return os.str();
}

bool overlaps(const GuardBuffer& a, const GuardBuffer& b) {
  if (a.kind != b.kind || a.bytes == 0 || b.bytes == 0) return false;
  const auto* a0 = static_cast<const unsigned char*>(a.data);
  const auto* b0 = static_cast<const unsigned char*>(b.data);
  return a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

}  // namespace

const char* guardResolutionName(GuardResolution r) {
  switch (r) {
    case GuardResolution::kClean:
      return "clean";
    case GuardResolution::kReplayed:
      return "replayed";
    case GuardResolution::kFellBack:
      return "fell_back";
    case GuardResolution::kSanitized:
      return "sanitized";
    case GuardResolution::kSkipped:
      return "skipped";
    case GuardResolution::kPending:
      return "pending";
  }
  return "?";
}

std::string GuardCounters::toString() const {
  std::ostringstream os;
  os << "calls=" << calls << " steps=" << steps << " detections=" << detections << " rollbacks=" << rollbacks
     << " replays=" << replays << " fallbacks=" << fallbacks << " escalations=" << escalations
     << " sanitized=" << sanitized << " skipped_steps=" << skippedSteps << " raised=" << raised
     << " injected=" << injected << " bytes_snapshotted=" << bytesSnapshotted << " host_waits=" << hostWaits;
  return os.str();
}

Guard::Guard(GuardPolicy policy, std::unique_ptr<GuardBackend> host, std::unique_ptr<GuardBackend> device)
    : policy_(std::move(policy)),
      ladder_(policy_.ladder()),
      host_(std::move(host)),
      device_(std::move(device)) {
  const Status valid = policy_.validate();
  RINGGUARD_ENFORCE(valid.isOk(), valid.message());
  RINGGUARD_ENFORCE(host_ != nullptr, "Guard needs a host backend");
  RINGGUARD_ENFORCE(isTerminal(ladder_.back()), "guard ladder must end in a terminal action");
}

Guard::~Guard() {
  // A step cut short by an exception from the region (torch boundary) leaves snapshots behind.
  for (const Saved& s : stepSaved_) (void)backendFor(s.buffer)->release(s.handle, s.stream);
}

void Guard::setAgreement(GuardAgreement agreement) { agreement_ = std::move(agreement); }

GuardCounters Guard::counters() const {
  std::lock_guard<std::mutex> lock(countersMu_);
  GuardCounters c = counters_;
  c.hostWaits = host_->hostWaits() + (device_ ? device_->hostWaits() : 0);
  return c;
}

namespace {

// The guard's events on the timeline and in the run summary: what each counted action is called.
struct GuardEvent {
  uint64_t GuardCounters::*field;
  const char* name;
  trace::Tally tally;
};
constexpr GuardEvent kGuardEvents[] = {
    {&GuardCounters::detections, "guard detect", trace::Tally::kGuardDetect},
    {&GuardCounters::rollbacks, "guard restore", trace::Tally::kGuardRestore},
    {&GuardCounters::replays, "guard replay", trace::Tally::kGuardReplay},
    {&GuardCounters::fallbacks, "guard fallback", trace::Tally::kGuardFallback},
    {&GuardCounters::escalations, "guard escalate", trace::Tally::kGuardTerminal},
    {&GuardCounters::sanitized, "guard sanitize", trace::Tally::kGuardTerminal},
    {&GuardCounters::skippedSteps, "guard skip step", trace::Tally::kGuardTerminal},
    {&GuardCounters::raised, "guard raise", trace::Tally::kGuardTerminal},
};

uint32_t guardTrack() {
  static const uint32_t track = trace::newTrack("guard");
  return track;
}

}  // namespace

void Guard::count(uint64_t GuardCounters::*field, uint64_t n) {
  {
    std::lock_guard<std::mutex> lock(countersMu_);
    counters_.*field += n;
  }
  for (const GuardEvent& e : kGuardEvents) {
    if (e.field != field) continue;
    trace::tally(e.tally);
    trace::instant(trace::Kind::kGuard, e.name, guardTrack(), 0, stepAttempt_, 0, 0, 0,
                   trace::on() ? trace::intern(inStep_ ? "step" : traceOp_) : nullptr);
  }
}

GuardBackend* Guard::backendFor(const GuardBuffer& b) {
  return b.kind == MemoryKind::kDevice ? device_.get() : host_.get();
}

Status Guard::validate(const GuardedOp& op) const {
  const std::string where = "guard: op '" + op.name + "': ";
  if (op.name.empty()) return Status(StatusCode::kInvalidArgument, "guard: a guarded op needs a name");
  if (!op.body) return Status(StatusCode::kInvalidArgument, where + "no body to run");
  struct Role {
    const char* role;
    const std::vector<GuardBuffer>* list;
  };
  const Role roles[] = {{"input", &op.inputs}, {"state", &op.state}, {"output", &op.outputs}};
  uint64_t stateBytes = 0;
  for (const Role& r : roles) {
    for (const GuardBuffer& b : *r.list) {
      const std::string what = where + r.role + " '" + b.name + "' ";
      if (!isValid(b.dtype)) return Status(StatusCode::kInvalidArgument, what + "has an invalid dtype");
      if (b.data == nullptr && b.bytes != 0) return Status(StatusCode::kInvalidArgument, what + "is null");
      if (b.bytes % dataTypeSize(b.dtype) != 0) {
        return Status(StatusCode::kInvalidArgument, what + "has " + std::to_string(b.bytes) +
                                                        " bytes, not a whole number of " +
                                                        dataTypeName(b.dtype) + " elements");
      }
      if (b.kind == MemoryKind::kDevice && device_ == nullptr) {
        return Status(StatusCode::kInvalidArgument,
                      what + "is device memory, but this guard has no device backend");
      }
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = i; j < 3; ++j) {
      if (i == 0 && j == 0) continue;  // inputs may alias each other: nothing writes them
      const auto& li = *roles[i].list;
      const auto& lj = *roles[j].list;
      for (size_t a = 0; a < li.size(); ++a) {
        for (size_t b = (i == j ? a + 1 : 0); b < lj.size(); ++b) {
          if (overlaps(li[a], lj[b])) {
            return Status(StatusCode::kInvalidArgument,
                          where + roles[i].role + " '" + li[a].name + "' overlaps " + roles[j].role + " '" +
                              lj[b].name + "' (declare a tensor the op changes in place once, as state)");
          }
        }
      }
    }
  }
  for (const GuardBuffer& b : op.state) stateBytes += b.bytes;
  if (heldBytes_ + stateBytes > policy_.snapshotBudgetBytes) {
    return Status(StatusCode::kInvalidArgument,
                  where + "its state needs a snapshot of " + std::to_string(stateBytes) + " bytes, " +
                      std::to_string(heldBytes_) + " are held already, and the snapshot budget is " +
                      std::to_string(policy_.snapshotBudgetBytes) + " bytes");
  }
  return Status::ok();
}

Status Guard::snapshotState(const GuardedOp& op, std::vector<Saved>* saved) {
  // One batch per backend (the device backend copies a batch at once), in declaration order within each.
  for (GuardBackend* backend : {host_.get(), device_.get()}) {
    if (backend == nullptr) continue;
    std::vector<const GuardBuffer*> mine;
    for (const GuardBuffer& b : op.state) {
      if (backendFor(b) == backend) mine.push_back(&b);
    }
    if (mine.empty()) continue;
    std::vector<SnapshotHandle> handles;
    const Status st = backend->snapshotMany(mine, op.stream, &handles);
    for (size_t i = 0; i < handles.size(); ++i) {  // on failure: those taken, so the caller releases them
      heldBytes_ += mine[i]->bytes;
      count(&GuardCounters::bytesSnapshotted, mine[i]->bytes);
      saved->push_back(Saved{*mine[i], handles[i], op.stream});
    }
    RINGGUARD_RETURN_IF_ERROR(st);
  }
  return Status::ok();
}

Status Guard::restore(const std::vector<Saved>& saved) {
  // Newest first: a tensor two ops of a step mutated gets the older (pre-step) bytes last.
  for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
    RINGGUARD_RETURN_IF_ERROR(backendFor(it->buffer)->restore(it->buffer, it->handle, it->stream));
  }
  return Status::ok();
}

Status Guard::releaseAll(std::vector<Saved>* saved) {
  Status first;
  for (const Saved& s : *saved) {
    const Status st = backendFor(s.buffer)->release(s.handle, s.stream);
    if (first.isOk() && !st.isOk()) first = st;
    heldBytes_ -= s.buffer.bytes;
  }
  saved->clear();
  return first;
}

Status Guard::attempt(const GuardedOp& op, uint64_t call, int attemptIndex, bool useFallback) {
  RINGGUARD_RETURN_IF_ERROR(useFallback ? op.fallback() : op.body());
  // Targets count the outputs first, then the state tensors (an op that only mutates has no outputs).
  const size_t targets = op.outputs.size() + op.state.size();
  for (const GuardFaultHit& hit : faults_.hits(op.name, call, attemptIndex, targets)) {
    const size_t t = static_cast<size_t>(hit.output);
    const GuardBuffer& out = t < op.outputs.size() ? op.outputs[t] : op.state[t - op.outputs.size()];
    if (out.count() == 0) continue;
    const size_t index = static_cast<size_t>(hit.element % out.count());
    RINGGUARD_RETURN_IF_ERROR(backendFor(out)->inject(out, index, hit.value, op.stream));
    count(&GuardCounters::injected);
    logInfo(Subsys::kGuard, "guard: injected {} into op '{}' call {} attempt {} output '{}' index {}",
            faultValueName(hit.value), op.name, call, attemptIndex, out.name, index);
  }
  return Status::ok();
}

Status Guard::checksums(const GuardedOp& op, std::vector<uint32_t>* crcs) {
  crcs->clear();
  for (const GuardBuffer& b : op.inputs) {
    uint32_t crc = 0;
    RINGGUARD_RETURN_IF_ERROR(backendFor(b)->checksum(b, op.stream, &crc));
    crcs->push_back(crc);
  }
  return Status::ok();
}

Status Guard::scanOp(const GuardedOp& op, std::vector<const GuardBuffer*>* scanned) {
  const size_t begin = scanned->size();
  auto add = [&](const std::vector<GuardBuffer>& list) {
    for (const GuardBuffer& b : list) scanned->push_back(&b);
  };
  add(op.outputs);
  if (policy_.scanState) add(op.state);
  if (policy_.scanInputs) add(op.inputs);
  // One batch per backend, each in the order of `scanned`: readVerdict takes each backend's results in
  // that order.
  std::vector<const GuardBuffer*> host, device;
  for (size_t i = begin; i < scanned->size(); ++i) {
    const GuardBuffer* b = (*scanned)[i];
    (b->kind == MemoryKind::kDevice ? device : host).push_back(b);
  }
  if (!host.empty()) RINGGUARD_RETURN_IF_ERROR(host_->scanMany(host, op.stream));
  if (!device.empty()) RINGGUARD_RETURN_IF_ERROR(backendFor(*device.front())->scanMany(device, op.stream));
  return Status::ok();
}

Status Guard::readVerdict(void* stream, const std::vector<const GuardBuffer*>& scanned,
                          std::vector<Bad>* bad) {
  bad->clear();
  std::vector<ScanResult> hostResults, deviceResults;
  bool anyDevice = false;
  for (const GuardBuffer* b : scanned) anyDevice |= b->kind == MemoryKind::kDevice;
  RINGGUARD_RETURN_IF_ERROR(host_->readScans(stream, &hostResults));
  if (anyDevice) RINGGUARD_RETURN_IF_ERROR(device_->readScans(stream, &deviceResults));
  size_t h = 0, d = 0;
  for (const GuardBuffer* b : scanned) {
    std::vector<ScanResult>& results = b->kind == MemoryKind::kDevice ? deviceResults : hostResults;
    size_t& next = b->kind == MemoryKind::kDevice ? d : h;
    RINGGUARD_ENFORCE(next < results.size(), "guard: fewer scan results than scans");
    const ScanResult r = results[next++];
    if (!r.clean()) bad->push_back(Bad{b, r});
  }
  RINGGUARD_ENFORCE(h == hostResults.size() && d == deviceResults.size(), "guard: scan results left over");
  return Status::ok();
}

Status Guard::sanitize(const GuardedOp& op, GuardAction action) {
  const SanitizeMode mode = action == GuardAction::kClamp ? SanitizeMode::kClamp : SanitizeMode::kZero;
  for (const auto* list : {&op.outputs, &op.state}) {
    for (const GuardBuffer& b : *list) RINGGUARD_RETURN_IF_ERROR(backendFor(b)->sanitize(b, mode, op.stream));
  }
  return Status::ok();
}

namespace {

const char* roleOf(const GuardedOp& op, const GuardBuffer* b) {
  auto in = [b](const std::vector<GuardBuffer>& list) {
    return b >= list.data() && b < list.data() + list.size();
  };
  if (in(op.outputs)) return "output";
  if (in(op.state)) return "state";
  return "input";
}

}  // namespace

Status Guard::nonFiniteError(const GuardedOp& op, uint64_t call, const std::vector<Bad>& bad, int replays,
                             int fallbacks, const char* what) {
  RINGGUARD_ENFORCE(!bad.empty(), "guard: an error for a clean verdict");
  const Bad& first = bad.front();
  double value = 0;
  RINGGUARD_RETURN_IF_ERROR(
      backendFor(*first.buffer)->readElement(*first.buffer, first.result.firstIndex, op.stream, &value));
  std::ostringstream os;
  os << "guard: op '" << op.name << "' call " << call << ": " << roleOf(op, first.buffer) << " '"
     << first.buffer->name << "' has " << first.result.count << " non-finite value"
     << (first.result.count == 1 ? "" : "s") << " (first at index " << first.result.firstIndex << ": "
     << valueText(value) << ")";
  for (size_t i = 1; i < bad.size(); ++i) {
    os << (i == 1 ? "; also " : ", ") << roleOf(op, bad[i].buffer) << " '" << bad[i].buffer->name << "' ("
       << bad[i].result.count << ")";
  }
  os << "; after " << replays << " replay" << (replays == 1 ? "" : "s") << " and " << fallbacks << " fallback"
     << (fallbacks == 1 ? "" : "s") << "; " << what << "; state restored";
  return Status(StatusCode::kCorruption, os.str());
}

Status Guard::runImmediate(const GuardedOp& op, uint64_t call, std::vector<Saved>* saved,
                           CallReport* report) {
  size_t next = 0;  // ladder position
  int attemptIndex = 0, replays = 0, fallbacks = 0;
  bool useFallback = false;
  std::vector<uint32_t> before, after;
  std::vector<const GuardBuffer*> scanned;
  std::vector<Bad> bad;
  for (;;) {
    if (policy_.checkInputs) RINGGUARD_RETURN_IF_ERROR(checksums(op, &before));
    ++report->attempts;
    const Status ran = attempt(op, call, attemptIndex, useFallback);
    if (!ran.isOk()) {
      // The op's own failure: leave its state as it was before the call and hand the error up.
      RINGGUARD_RETURN_IF_ERROR(restore(*saved));
      count(&GuardCounters::rollbacks);
      return ran;
    }
    if (policy_.checkInputs) {
      RINGGUARD_RETURN_IF_ERROR(checksums(op, &after));
      for (size_t i = 0; i < before.size(); ++i) {
        if (before[i] != after[i]) {
          RINGGUARD_RETURN_IF_ERROR(restore(*saved));
          return Status(StatusCode::kInvalidArgument,
                        "guard: op '" + op.name + "' call " + std::to_string(call) + " changed its input '" +
                            op.inputs[i].name +
                            "': declare a tensor the op writes as state, so it is snapshotted");
        }
      }
    }
    scanned.clear();
    RINGGUARD_RETURN_IF_ERROR(scanOp(op, &scanned));
    RINGGUARD_RETURN_IF_ERROR(readVerdict(op.stream, scanned, &bad));
    if (bad.empty()) {
      report->resolution = attemptIndex == 0 ? GuardResolution::kClean
                           : useFallback     ? GuardResolution::kFellBack
                                             : GuardResolution::kReplayed;
      return Status::ok();
    }
    count(&GuardCounters::detections);
    logWarn(Subsys::kGuard,
            "guard: op '{}' call {} attempt {}: {} '{}' has {} non-finite values (first at {})", op.name,
            call, attemptIndex, roleOf(op, bad.front().buffer), bad.front().buffer->name,
            bad.front().result.count, bad.front().result.firstIndex);

    GuardAction action = GuardAction::kRaise;
    for (;;) {
      RINGGUARD_ENFORCE(next < ladder_.size(), "guard: ladder exhausted");
      if (next == firstStageLength(policy_) && !isTerminal(policy_.onDetect))
        count(&GuardCounters::escalations);
      action = ladder_[next++];
      if (action == GuardAction::kFallback && !op.fallback) {
        logWarn(Subsys::kGuard, "guard: op '{}' has no fallback; the policy's next step follows", op.name);
        continue;
      }
      break;
    }
    switch (action) {
      case GuardAction::kReplay:
      case GuardAction::kFallback:
        RINGGUARD_RETURN_IF_ERROR(restore(*saved));
        count(&GuardCounters::rollbacks);
        useFallback = action == GuardAction::kFallback;
        if (useFallback) {
          ++fallbacks;
          count(&GuardCounters::fallbacks);
        } else {
          ++replays;
          count(&GuardCounters::replays);
        }
        ++attemptIndex;
        logInfo(Subsys::kGuard, "guard: op '{}' call {}: state restored, {} (attempt {})", op.name, call,
                guardActionName(action), attemptIndex);
        continue;
      case GuardAction::kZero:
      case GuardAction::kClamp:
        RINGGUARD_RETURN_IF_ERROR(sanitize(op, action));
        count(&GuardCounters::sanitized);
        logWarn(Subsys::kGuard, "guard: op '{}' call {}: non-finite values replaced ({}) after {} replays",
                op.name, call, guardActionName(action), replays);
        report->resolution = GuardResolution::kSanitized;
        return Status::ok();
      case GuardAction::kSkipStep:
        RINGGUARD_RETURN_IF_ERROR(restore(*saved));
        count(&GuardCounters::rollbacks);
        logWarn(Subsys::kGuard, "guard: op '{}' call {}: state restored, step skipped after {} replays",
                op.name, call, replays);
        report->resolution = GuardResolution::kSkipped;
        if (inStep_) {
          stepLocal_ = std::max(stepLocal_, StepSeverity::kSkip);
        } else {
          count(&GuardCounters::skippedSteps);
        }
        return Status::ok();
      case GuardAction::kRaise: {
        const Status err = nonFiniteError(op, call, bad, replays, fallbacks, "raised");
        RINGGUARD_RETURN_IF_ERROR(restore(*saved));
        count(&GuardCounters::rollbacks);
        logError(Subsys::kGuard, "{}", err.message());
        if (inStep_) {
          // Agreed at the step's end, so every rank rolls the step back and returns the error together.
          report->resolution = GuardResolution::kSkipped;
          stepLocal_ = StepSeverity::kRaise;
          if (stepError_.isOk()) stepError_ = err;
          return Status::ok();
        }
        count(&GuardCounters::raised);
        return err;
      }
    }
  }
}

Status Guard::run(const GuardedOp& op, CallReport* report) {
  CallReport local;
  if (report == nullptr) report = &local;
  *report = CallReport{};
  if (!inStep_ && policy_.mode == VerdictMode::kDeferred) {
    return Status(
        StatusCode::kInvalidArgument,
        "guard: op '" + op.name + "': deferred mode reads verdicts at a step's end; call it inside runStep");
  }
  RINGGUARD_RETURN_IF_ERROR(validate(op));
  const uint64_t call = calls_[op.name]++;
  report->call = call;
  traceOp_ = op.name;
  if (stepAttempt_ == 0) count(&GuardCounters::calls);

  std::vector<Saved> saved;
  const Status snap = stepToFlag_ ? Status::ok() : snapshotState(op, &saved);
  if (!snap.isOk()) {
    (void)releaseAll(&saved);
    return snap;
  }

  if (policy_.mode == VerdictMode::kImmediate) {
    const Status st = runImmediate(op, call, &saved, report);
    if (inStep_) {
      // Kept until the step's end: an agreed skip or raise restores the whole step.
      for (Saved& s : saved) stepSaved_.push_back(std::move(s));
      saved.clear();
    } else {
      const Status rel = releaseAll(&saved);
      if (st.isOk()) return rel;
    }
    return st;
  }

  // Deferred: run once, queue the scans; runStep reads them all with one wait.
  for (Saved& s : saved) stepSaved_.push_back(std::move(s));
  const bool useFallback =
      stepFallback_ && op.fallback &&
      std::find(stepFallbackOps_.begin(), stepFallbackOps_.end(), op.name) != stepFallbackOps_.end();
  std::vector<uint32_t> before, after;
  if (policy_.checkInputs) RINGGUARD_RETURN_IF_ERROR(checksums(op, &before));
  report->attempts = 1;
  RINGGUARD_RETURN_IF_ERROR(attempt(op, call, stepAttempt_, useFallback));
  if (policy_.checkInputs) {
    RINGGUARD_RETURN_IF_ERROR(checksums(op, &after));
    for (size_t i = 0; i < before.size(); ++i) {
      if (before[i] != after[i]) {
        return Status(StatusCode::kInvalidArgument,
                      "guard: op '" + op.name + "' call " + std::to_string(call) + " changed its input '" +
                          op.inputs[i].name +
                          "': declare a tensor the op writes as state, so it is snapshotted");
      }
    }
  }
  std::vector<const GuardBuffer*> scanned;
  RINGGUARD_RETURN_IF_ERROR(scanOp(op, &scanned));
  Pending p{op.name, call, {}, {}};
  for (const GuardBuffer* b : scanned) {
    p.scanned.push_back(*b);
    p.roles.push_back(roleOf(op, b));
  }
  stepPending_.push_back(std::move(p));
  stepStream_ = op.stream;
  report->resolution = GuardResolution::kPending;
  return Status::ok();
}

Status Guard::agree(uint64_t* severity) {
  if (!agreement_) return Status::ok();
  return agreement_(severity);
}

Status Guard::readStepVerdicts(std::vector<std::string>* flaggedOps, std::string* detail) {
  flaggedOps->clear();
  detail->clear();
  std::vector<ScanResult> hostResults, deviceResults;
  bool anyDevice = false;
  for (const Pending& p : stepPending_) {
    for (const GuardBuffer& b : p.scanned) anyDevice |= b.kind == MemoryKind::kDevice;
  }
  RINGGUARD_RETURN_IF_ERROR(host_->readScans(stepStream_, &hostResults));
  if (anyDevice) RINGGUARD_RETURN_IF_ERROR(device_->readScans(stepStream_, &deviceResults));
  size_t h = 0, d = 0;
  for (const Pending& p : stepPending_) {
    bool flagged = false;
    for (size_t i = 0; i < p.scanned.size(); ++i) {
      const GuardBuffer& b = p.scanned[i];
      std::vector<ScanResult>& results = b.kind == MemoryKind::kDevice ? deviceResults : hostResults;
      size_t& next = b.kind == MemoryKind::kDevice ? d : h;
      RINGGUARD_ENFORCE(next < results.size(), "guard: fewer scan results than scans");
      const ScanResult r = results[next++];
      if (r.clean()) continue;
      if (!flagged) count(&GuardCounters::detections);
      flagged = true;
      logWarn(Subsys::kGuard,
              "guard: op '{}' call {}: {} '{}' has {} non-finite values (first at {}); step rolls back", p.op,
              p.call, p.roles[i], b.name, r.count, r.firstIndex);
      if (detail->empty()) {
        double value = 0;
        RINGGUARD_RETURN_IF_ERROR(backendFor(b)->readElement(b, r.firstIndex, stepStream_, &value));
        *detail = "guard: op '" + p.op + "' call " + std::to_string(p.call) + ": " + p.roles[i] + " '" +
                  b.name + "' has " + std::to_string(r.count) + " non-finite value" +
                  (r.count == 1 ? "" : "s") + " (first at index " + std::to_string(r.firstIndex) + ": " +
                  valueText(value) + ")";
      }
    }
    if (flagged && std::find(flaggedOps->begin(), flaggedOps->end(), p.op) == flaggedOps->end()) {
      flaggedOps->push_back(p.op);
    }
  }
  stepPending_.clear();
  return Status::ok();
}

Status Guard::runStepToFlag(const std::function<Status()>& region, const GuardBuffer& flag, void* stream) {
  if (inStep_) return Status(StatusCode::kInvalidArgument, "guard: runStepToFlag does not nest");
  if (policy_.mode != VerdictMode::kDeferred) {
    return Status(StatusCode::kInvalidArgument, "guard: runStepToFlag needs deferred mode");
  }
  if (flag.dtype != DataType::kFloat32 || flag.bytes != sizeof(float) || flag.data == nullptr) {
    return Status(StatusCode::kInvalidArgument, "guard: the step's flag must be one f32 element");
  }
  GuardBackend* backend = backendFor(flag);
  if (backend == nullptr)
    return Status(StatusCode::kInvalidArgument, "guard: the flag's memory has no backend");
  inStep_ = true;
  stepToFlag_ = true;
  stepPending_.clear();
  count(&GuardCounters::steps);
  auto finish = [&](Status st) {
    stepPending_.clear();
    inStep_ = false;
    stepToFlag_ = false;
    return st;
  };
  const Status ran = region();
  if (!ran.isOk()) return finish(ran);
  for (const Pending& p : stepPending_) {
    for (const GuardBuffer& b : p.scanned) {
      if (b.kind != flag.kind) {
        // Drain both batches so the next step starts empty (a host wait, on this error path only).
        std::vector<ScanResult> drop;
        (void)host_->readScans(stream, &drop);
        if (device_) (void)device_->readScans(stream, &drop);
        return finish(
            Status(StatusCode::kInvalidArgument,
                   "guard: op '" + p.op + "' scanned '" + b.name +
                       "' in other memory than the step's flag (host and device verdicts do not mix)"));
      }
    }
  }
  return finish(backend->verdictFlag(stream, static_cast<float*>(flag.data)));
}

Status Guard::runStep(const std::function<Status()>& region, StepReport* report) {
  StepReport local;
  if (report == nullptr) report = &local;
  *report = StepReport{};
  if (inStep_) return Status(StatusCode::kInvalidArgument, "guard: runStep does not nest");
  inStep_ = true;
  count(&GuardCounters::steps);
  const std::map<std::string, uint64_t> callsAtStart = calls_;
  stepAttempt_ = 0;
  stepFallback_ = false;
  stepFallbackOps_.clear();
  size_t next = 0;
  int replays = 0, fallbacks = 0;

  // Ends the step: snapshots released, step state cleared, `st` returned.
  auto finish = [&](Status st) {
    const Status rel = releaseAll(&stepSaved_);
    stepPending_.clear();
    inStep_ = false;
    stepAttempt_ = 0;
    stepFallback_ = false;
    return st.isOk() ? rel : st;
  };

  for (;;) {
    stepLocal_ = StepSeverity::kClean;
    stepError_ = Status::ok();
    ++report->attempts;
    const Status ran = region();
    if (!ran.isOk()) {
      const Status rest = restore(stepSaved_);
      count(&GuardCounters::rollbacks);
      return finish(rest.isOk() ? ran : rest);
    }
    std::vector<std::string> flagged;
    std::string detail;
    const Status read = readStepVerdicts(&flagged, &detail);
    if (!read.isOk()) return finish(read);
    if (!flagged.empty()) stepLocal_ = std::max(stepLocal_, StepSeverity::kRollback);

    uint64_t severity = static_cast<uint64_t>(stepLocal_);
    const Status agreed = agree(&severity);
    if (!agreed.isOk()) return finish(agreed);
    report->severity = severity;
    if (severity == static_cast<uint64_t>(StepSeverity::kClean)) {
      report->resolution = report->attempts == 1 ? GuardResolution::kClean
                           : stepFallback_       ? GuardResolution::kFellBack
                                                 : GuardResolution::kReplayed;
      return finish(Status::ok());
    }

    // Some rank saw a problem: every rank restores every snapshot of the step, newest first.
    const Status rest = restore(stepSaved_);
    count(&GuardCounters::rollbacks);
    if (!rest.isOk()) return finish(rest);
    const Status rel = releaseAll(&stepSaved_);
    if (!rel.isOk()) return finish(rel);

    GuardAction action = GuardAction::kRaise;
    if (severity == static_cast<uint64_t>(StepSeverity::kSkip)) {
      action = GuardAction::kSkipStep;
    } else if (severity == static_cast<uint64_t>(StepSeverity::kRollback)) {
      RINGGUARD_ENFORCE(next < ladder_.size(), "guard: ladder exhausted");
      if (next == firstStageLength(policy_) && !isTerminal(policy_.onDetect))
        count(&GuardCounters::escalations);
      action = ladder_[next++];
    }
    switch (action) {
      case GuardAction::kReplay:
      case GuardAction::kFallback:
        stepFallback_ = action == GuardAction::kFallback;
        // Ranks without a detection run the step again as it was; the fallback is a local choice of the
        // ranks whose ops were flagged (the step's decision, replaying it, is what is agreed).
        if (stepFallback_) {
          stepFallbackOps_ = flagged;
          ++fallbacks;
          count(&GuardCounters::fallbacks);
        } else {
          ++replays;
          count(&GuardCounters::replays);
        }
        calls_ = callsAtStart;  // a replayed step sees the same call indices, attempts count up
        ++stepAttempt_;
        logInfo(Subsys::kGuard, "guard: step restored, {} (attempt {})", guardActionName(action),
                stepAttempt_);
        continue;
      case GuardAction::kSkipStep:
        count(&GuardCounters::skippedSteps);
        logWarn(Subsys::kGuard, "guard: step restored and skipped (severity {} agreed)", severity);
        report->resolution = GuardResolution::kSkipped;
        return finish(Status::ok());
      default: {
        count(&GuardCounters::raised);
        std::string msg;
        if (!stepError_.isOk()) {
          msg = stepError_.message();
        } else if (!detail.empty()) {
          msg = detail + "; after " + std::to_string(replays) + " step replay" + (replays == 1 ? "" : "s") +
                " and " + std::to_string(fallbacks) + " fallback" + (fallbacks == 1 ? "" : "s") +
                "; raised; step restored";
        } else {
          msg = "guard: another rank's guarded op found non-finite values past its policy (agreed severity " +
                std::to_string(severity) + "); raised; step restored";
        }
        logError(Subsys::kGuard, "{}", msg);
        return finish(Status(StatusCode::kCorruption, msg));
      }
    }
  }
}

}  // namespace ringguard
