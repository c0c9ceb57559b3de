// The replica check's sequence: faults, fingerprints, all-gather, comparison, decision, repair.
#include "ringguard/replicas/replica_check.h"

#include <utility>

#include "core/logging.h"
#include "core/trace_events.h"
#include "replicas/replica_track.h"
#include "ringguard/replicas/first_difference.h"

namespace ringguard {

// Tensors per backend call: a model's device tensors in one launch and one wait (the work table grows with
// it, a few bytes per tensor), with a bound on that table.
constexpr size_t kTensorsPerCall = size_t(1) << 16;
// The fingerprints a gated checker's device backend has room for before its first check (more grow it then).
constexpr size_t kPreparedTensors = size_t(1) << 14;

namespace {

// The default startCheck's pending: host memory, gathered already, nothing left to wait for.
class ReadyWords final : public ReplicaPending {
 public:
  explicit ReadyWords(std::vector<uint32_t> all) : all_(std::move(all)) {}
  bool ready() override { return true; }
  Status take(std::vector<uint32_t>* all) override {
    *all = std::move(all_);
    return Status::ok();
  }

 private:
  std::vector<uint32_t> all_;
};

uint64_t totalBytes(const std::vector<ReplicaTensor>& tensors) {
  uint64_t n = 0;
  for (const ReplicaTensor& t : tensors) n += t.bytes;
  return n;
}

// A counted replica event: the run summary's tally and, with the timeline on, an instant on its track.
void event(trace::Tally tally, const char* name, uint64_t step, int rank, const std::string& detail) {
  trace::tally(tally);
  trace::instant(trace::Kind::kReplica, name, replicaTrack(), 0, static_cast<int32_t>(step), rank, 0, 0,
                 trace::on() ? trace::intern(detail) : nullptr);
}

}  // namespace

Status ReplicaExchange::startCheck(const std::vector<uint32_t>& mine, const std::vector<ReplicaTensor>&,
                                   const std::vector<size_t>&, void*, std::unique_ptr<ReplicaPending>* out) {
  std::vector<uint32_t> all;
  RINGGUARD_RETURN_IF_ERROR(allGather(mine, &all));
  *out = std::make_unique<ReadyWords>(std::move(all));
  return Status::ok();
}

Status ReplicaExchange::gatherOnDevice(const std::vector<uint32_t>&, const std::vector<ReplicaTensor>&,
                                       const std::vector<size_t>&, void*, const uint32_t**) {
  return Status(StatusCode::kInvalidArgument,
                "replica check: this exchange cannot gather on the device, which the gate needs");
}

uint32_t replicaTrack() {
  static const uint32_t track = trace::newTrack("replicas");
  return track;
}

ReplicaChecker::ReplicaChecker(ReplicaCheckOptions options, std::unique_ptr<ReplicaExchange> exchange,
                               std::unique_ptr<ReplicaBackend> host, std::unique_ptr<ReplicaBackend> device)
    : options_(options),
      exchange_(std::move(exchange)),
      host_(std::move(host)),
      device_(std::move(device)),
      decider_(options.onMismatch) {
  const Status st = validate(options_);
  RINGGUARD_ENFORCE(st.isOk(), st.toString());
  RINGGUARD_ENFORCE(exchange_ != nullptr && host_ != nullptr,
                    "ReplicaChecker needs an exchange and a host backend");
}

ReplicaChecker::~ReplicaChecker() { stopVerdicts(); }

Status ReplicaChecker::validate(const ReplicaCheckOptions& o) {
  if (o.every == 0) return Status(StatusCode::kInvalidArgument, "replica check: every=0: expected >= 1");
  if (o.onMismatch == ReplicaAction::kNone) {
    return Status(StatusCode::kInvalidArgument,
                  "replica check: on_mismatch='none': expected one of raise, repair, warn");
  }
  return Status::ok();
}

int ReplicaChecker::rank() const { return exchange_->rank(); }
int ReplicaChecker::size() const { return exchange_->size(); }

Status ReplicaChecker::setFault(const ReplicaFault& fault) {
  if (fault.repeat == 0) return Status(StatusCode::kInvalidArgument, "replica fault: repeat=0 never fires");
  if (fault.rank >= exchange_->size()) {
    return Status(StatusCode::kInvalidArgument, "replica fault: rank=" + std::to_string(fault.rank) +
                                                    " is not a rank of the replica group (" +
                                                    std::to_string(exchange_->size()) + " ranks)");
  }
  fault_ = fault;
  faultOn_ = true;
  return Status::ok();
}

void ReplicaChecker::clearFault() { faultOn_ = false; }

ReplicaCounters ReplicaChecker::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  ReplicaCounters c = counters_;
  c.hostWaits = host_->hostWaits() + (device_ ? device_->hostWaits() : 0);
  return c;
}

ReplicaReport ReplicaChecker::lastReport() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

ReplicaBackend* ReplicaChecker::backendFor(MemoryKind kind) {
  return kind == MemoryKind::kHost ? host_.get() : device_.get();
}

Status ReplicaChecker::injectFault(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream) {
  // Located on every rank, so a fault naming no tensor is an error everywhere, not on one rank while the
  // others wait in the all-gather.
  if (!faultAt(step)) return Status::ok();
  size_t index = 0, offset = 0;
  uint8_t mask = 0;
  RINGGUARD_RETURN_IF_ERROR(locateReplicaFault(fault_, tensors, &index, &offset, &mask));
  if (fault_.rank != exchange_->rank()) return Status::ok();
  ReplicaBackend* b = backendFor(tensors[index].kind);
  if (b == nullptr) {
    return Status(StatusCode::kInvalidArgument, "replica fault: '" + tensors[index].name +
                                                    "' is device memory and the check has no device backend");
  }
  RINGGUARD_RETURN_IF_ERROR(b->flipBits(tensors[index], offset, mask, stream));
  logWarn(Subsys::kGuard, "replica fault: flipped bit {} of element {} of '{}' at step {}", fault_.bit,
          fault_.element, tensors[index].name, step);
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.injected;
  return Status::ok();
}

Status ReplicaChecker::fingerprint(const std::vector<ReplicaTensor>& tensors, void* stream,
                                   std::vector<uint32_t>* crcs, std::vector<size_t>* deviceLeft) {
  crcs->assign(tensors.size(), 0);
  uint64_t bytes = 0;
  std::vector<uint32_t> got;
  for (const FingerprintBucket& b : planFingerprintBuckets(tensors, kTensorsPerCall)) {
    if (deviceLeft != nullptr && b.kind == MemoryKind::kDevice) {
      deviceLeft->insert(deviceLeft->end(), b.indices.begin(), b.indices.end());
      bytes += b.bytes;
      continue;
    }
    ReplicaBackend* backend = backendFor(b.kind);
    if (backend == nullptr) {
      return Status(StatusCode::kInvalidArgument,
                    "replica check: '" + tensors[b.indices[0]].name +
                        "' is device memory and the check has no device backend");
    }
    got.assign(b.indices.size(), 0);
    RINGGUARD_RETURN_IF_ERROR(backend->fingerprint(tensors, b.indices, stream, got.data()));
    for (size_t k = 0; k < b.indices.size(); ++k) (*crcs)[b.indices[k]] = got[k];
    bytes += b.bytes;
  }
  std::lock_guard<std::mutex> lock(mu_);
  counters_.bytesFingerprinted += bytes;
  return Status::ok();
}

Status ReplicaChecker::encodeMine(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream,
                                  std::vector<uint32_t>* words, std::vector<size_t>* deviceLeft,
                                  uint64_t layout) {
  ReplicaMessage mine;
  mine.step = step;
  if (layout == 0) {  // (the verdict thread's calls: no cache touched)
    mine.layoutHash = replicaLayoutHash(tensors);
  } else {
    if (layout != hashedLayout_) {
      layoutHash_ = replicaLayoutHash(tensors);
      hashedLayout_ = layout;
    }
    mine.layoutHash = layoutHash_;
  }
  RINGGUARD_RETURN_IF_ERROR(fingerprint(tensors, stream, &mine.crcs, deviceLeft));
  *words = mine.encode();
  return Status::ok();
}

Status ReplicaChecker::compareGathered(const std::vector<uint32_t>& all, size_t wordsPerRank,
                                       ReplicaComparison* out) {
  const int n = exchange_->size();
  if (all.size() != wordsPerRank * static_cast<size_t>(n)) {
    return Status(StatusCode::kInternal, "replica check: the all-gather returned " +
                                             std::to_string(all.size()) + " words, expected " +
                                             std::to_string(wordsPerRank * n));
  }
  std::vector<ReplicaMessage> messages(n);
  for (int r = 0; r < n; ++r) {
    RINGGUARD_RETURN_IF_ERROR(
        ReplicaMessage::decode(all.data() + r * wordsPerRank, wordsPerRank, r, &messages[r]));
  }
  *out = compareReplicas(messages);
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.checks;
  if (out->mismatch) ++counters_.mismatches;
  return Status::ok();
}

Status ReplicaChecker::gatherAndCompare(uint64_t step, const std::vector<ReplicaTensor>& tensors,
                                        void* stream, ReplicaComparison* out) {
  trace::Span span(trace::Kind::kReplica, "replica check", replicaTrack());
  std::vector<uint32_t> words, all;
  RINGGUARD_RETURN_IF_ERROR(encodeMine(step, tensors, stream, &words));
  RINGGUARD_RETURN_IF_ERROR(exchange_->allGather(words, &all));
  RINGGUARD_RETURN_IF_ERROR(compareGathered(all, words.size(), out));
  trace::tally(trace::Tally::kReplicaCheck);
  span.event().a = static_cast<int32_t>(step);
  span.event().b = out->oddRanks.empty() ? -1 : out->oddRanks[0];
  span.event().value = totalBytes(tensors);
  return Status::ok();
}

void ReplicaChecker::finish(ReplicaReport report) {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = std::move(report);
}

bool ReplicaChecker::needsTensors(uint64_t step) const { return checksAt(step) || faultAt(step); }

Status ReplicaChecker::afterStep(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.steps;
  }
  // Gated: a fault's flip waits for the verdicts before it (it uses the device backend, as they may).
  if (gate_ != nullptr && faultAt(step)) awaitVerdicts();
  RINGGUARD_RETURN_IF_ERROR(injectFault(step, tensors, stream));
  if (!checksAt(step)) return Status::ok();
  if (gate_ != nullptr) return checkGated(step, tensors, stream);
  return checkNow(step, tensors, stream);
}

Status ReplicaChecker::checkNow(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream) {
  if (gate_ != nullptr) {
    // Outside the step hook: the checks before it settled first, then a check of the host's own, with its
    // wait (its collectives go over the exchange as the verdict thread's do; that thread is idle now).
    awaitVerdicts();
    RINGGUARD_RETURN_IF_ERROR(gateFailure());
  }
  if (!options_.sync) {
    RINGGUARD_RETURN_IF_ERROR(resolveDeferred(step, tensors, stream));
    return launchDeferred(step, tensors, stream);
  }
  ReplicaComparison c;
  RINGGUARD_RETURN_IF_ERROR(gatherAndCompare(step, tensors, stream, &c));
  return act(step, step, std::move(c), tensors, stream);
}

Status ReplicaChecker::flush(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream) {
  if (gate_ != nullptr) {
    awaitVerdicts();
    return gateFailure();
  }
  return resolveDeferred(step, tensors, stream);
}

Status ReplicaChecker::launchDeferred(uint64_t step, const std::vector<ReplicaTensor>& tensors,
                                      void* stream) {
  trace::Span span(trace::Kind::kReplica, "replica check", replicaTrack());
  span.event().a = static_cast<int32_t>(step);
  span.event().b = -1;  // the verdict comes at the next check
  span.event().value = totalBytes(tensors);
  std::vector<uint32_t> words;
  std::vector<size_t> onDevice;
  const bool deviceLeft = exchange_->fingerprintsOnDevice();
  RINGGUARD_RETURN_IF_ERROR(encodeMine(step, tensors, stream, &words, deviceLeft ? &onDevice : nullptr));
  RINGGUARD_RETURN_IF_ERROR(exchange_->startCheck(words, tensors, onDevice, stream, &pending_));
  pendingStep_ = step;
  pendingWords_ = words.size();
  trace::tally(trace::Tally::kReplicaCheck);
  return Status::ok();
}

Status ReplicaChecker::resolveDeferred(uint64_t step, const std::vector<ReplicaTensor>& tensors,
                                       void* stream) {
  if (pending_ == nullptr) return Status::ok();
  std::unique_ptr<ReplicaPending> pending = std::move(pending_);
  if (!pending->ready()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.deferredWaits;
  }
  std::vector<uint32_t> all;
  RINGGUARD_RETURN_IF_ERROR(pending->take(&all));
  ReplicaComparison c;
  RINGGUARD_RETURN_IF_ERROR(compareGathered(all, pendingWords_, &c));
  if (c.mismatch && options_.onMismatch == ReplicaAction::kRepair && c.structural.empty() && c.majority) {
    // The verdict is one check old and the odd replica has stepped since (its own gradients and updates
    // may have spread its difference to other tensors): the repair works from a comparison of the state
    // it will repair, on this rare path only.
    ReplicaComparison now;
    RINGGUARD_RETURN_IF_ERROR(gatherAndCompare(step, tensors, stream, &now));
    if (now.mismatch) c = std::move(now);
  }
  return act(pendingStep_, step, std::move(c), tensors, stream);
}

Status ReplicaChecker::act(uint64_t checked, uint64_t now, ReplicaComparison c,
                           const std::vector<ReplicaTensor>& tensors, void* stream, bool repairHost) {
  ReplicaReport rep;
  rep.step = checked;
  rep.readAtStep = now;
  rep.checked = true;
  rep.comparison = std::move(c);
  const ReplicaComparison& cmp = rep.comparison;
  rep.mismatch = cmp.mismatch;
  if (!cmp.mismatch) {
    finish(std::move(rep));
    return Status::ok();
  }
  const int firstOdd = cmp.oddRanks.empty() ? -1 : cmp.oddRanks[0];
  std::vector<std::string> names;
  names.reserve(tensors.size());
  for (const ReplicaTensor& t : tensors) names.push_back(t.name);
  for (size_t t : cmp.tensors) rep.tensors.push_back(names[t]);
  std::string what = "replica check: step " + std::to_string(checked) + ": " + cmp.describe(names);
  if (now != checked) what += " (sync=False: read at the check after step " + std::to_string(now) + ")";
  if (cmp.structural.empty()) {
    // Located in the state the tensors hold now: with sync=False a difference may have been overwritten.
    std::string located;
    for (size_t k = 0; k < cmp.tensors.size() && k < options_.locateElements; ++k) {
      const ReplicaTensor& t = tensors[cmp.tensors[k]];
      ReplicaBackend* b = backendFor(t.kind);
      int64_t element = -1;
      uint64_t rounds = 0;
      if (b != nullptr) {
        RINGGUARD_RETURN_IF_ERROR(locateFirstDifference(t, b, exchange_.get(), stream, &element, &rounds));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        counters_.locateRounds += rounds;
      }
      rep.firstElements.push_back(element);
      located += (located.empty() ? "" : ", ") + std::string("'") + t.name + "'" +
                 (element >= 0 ? "[" + std::to_string(element) + "]" : " (no longer differs)");
    }
    if (!located.empty()) what += "; first differing element: " + located;
  }
  event(trace::Tally::kReplicaMismatch, "replica mismatch", checked, firstOdd, what);
  rep.decision = decider_.decide(cmp, checked);
  if (rep.decision.action == ReplicaAction::kRepair && !repairHost) {
    for (size_t t : cmp.tensors) {
      if (tensors[t].kind != MemoryKind::kHost) continue;
      rep.decision.action = ReplicaAction::kRaise;
      rep.decision.escalated = true;
      rep.decision.reason = "'" + tensors[t].name +
                            "' is host memory, which the training thread has moved on since the gated check: "
                            "not repairable";
      break;
    }
  }

  switch (rep.decision.action) {
    case ReplicaAction::kNone:
      break;
    case ReplicaAction::kWarn: {
      rep.message = what + " (on_mismatch=warn: training continues)";
      logWarn(Subsys::kGuard, "{}", rep.message);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++counters_.warnings;
      }
      event(trace::Tally::kReplicaWarn, "replica warn", checked, firstOdd, rep.message);
      finish(std::move(rep));
      return Status::ok();
    }
    case ReplicaAction::kRepair: {
      for (size_t t : cmp.tensors)
        RINGGUARD_RETURN_IF_ERROR(exchange_->broadcast(tensors[t], cmp.source, stream));
      decider_.noteRepaired(cmp, checked);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++counters_.repairs;
        counters_.repairedTensors += cmp.tensors.size();
      }
      ReplicaComparison again;
      RINGGUARD_RETURN_IF_ERROR(gatherAndCompare(now, tensors, stream, &again));
      if (!again.mismatch) {
        rep.repaired = true;
        rep.message = what + "; repaired from rank " + std::to_string(cmp.source);
        logWarn(Subsys::kGuard, "{}", rep.message);
        event(trace::Tally::kReplicaRepair, "replica repair", checked, firstOdd, rep.message);
        finish(std::move(rep));
        return Status::ok();
      }
      rep.decision.action = ReplicaAction::kRaise;
      rep.decision.escalated = true;
      rep.decision.reason = "the repair from rank " + std::to_string(cmp.source) +
                            " did not converge: " + again.describe(names);
      break;
    }
    case ReplicaAction::kRaise:
      break;
  }
  rep.message = what + (rep.decision.reason.empty() ? "" : "; " + rep.decision.reason) +
                " (on_mismatch=" + replicaActionName(decider_.policy()) +
                (rep.decision.escalated ? ", escalated to raise)" : ")");
  logError(Subsys::kGuard, "{}", rep.message);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.raised;
    if (rep.decision.escalated) ++counters_.escalations;
  }
  if (rep.decision.escalated)
    event(trace::Tally::kReplicaEscalate, "replica escalate", checked, firstOdd, rep.message);
  event(trace::Tally::kReplicaRaise, "replica raise", checked, firstOdd, rep.message);
  Status st(StatusCode::kCorruption, rep.message);
  finish(std::move(rep));
  return st;
}

// ---- The gate (docs/REPLICAS.md, "The gate") --------------------------------------------------------------

Status ReplicaChecker::useGate(std::unique_ptr<ReplicaGate> gate, void* verdictStream,
                               AbortTraining abortTraining) {
  if (!options_.sync) {
    return Status(
        StatusCode::kInvalidArgument,
        "replica check: the gate is sync=True's way to the verdict; sync=False reads it at the next check");
  }
  if (gate == nullptr || gate_ != nullptr) {
    return Status(StatusCode::kInvalidArgument, "replica check: useGate needs a gate, once");
  }
  // What the verdict thread's first fingerprint would allocate, made now, before any gate holds a stream.
  if (device_ != nullptr) RINGGUARD_RETURN_IF_ERROR(device_->prepare(kPreparedTensors));
  gate_ = std::move(gate);
  verdictStream_ = verdictStream;
  abortTraining_ = std::move(abortTraining);
  verdictThread_ = std::thread([this] { verdictLoop(); });
  return Status::ok();
}

Status ReplicaChecker::gateFailure() {
  std::lock_guard<std::mutex> lock(verdictMu_);
  return gateFailure_;
}

void ReplicaChecker::awaitVerdicts() {
  if (gate_ == nullptr) return;
  std::unique_lock<std::mutex> lock(verdictMu_);
  verdictCv_.wait(lock, [this] { return (verdicts_.empty() && !settling_) || stopping_; });
}

void ReplicaChecker::stopVerdicts() {
  if (!verdictThread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(verdictMu_);
    stopping_ = true;
  }
  verdictCv_.notify_all();
  gate_->abandon();  // a settle waiting for words its stream may never write gives up after the timeout
  verdictThread_.join();
  std::deque<GatedCheck> dropped;
  {
    std::lock_guard<std::mutex> lock(verdictMu_);
    dropped.swap(verdicts_);
  }
  gate_->release(ReplicaGate::kOpenAll);  // nothing will settle them now: no stream may wait on them
  verdictCv_.notify_all();
}

Status ReplicaChecker::checkGated(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream) {
  // A verdict thread's failure (a raise, an escalation, a gate out of time) is every later check's error:
  // the training group is aborted and the replicas are not known to agree.
  RINGGUARD_RETURN_IF_ERROR(gateFailure());
  {
    std::lock_guard<std::mutex> lock(verdictMu_);
    if (stopping_) {
      return Status(StatusCode::kInvalidArgument, "replica check: step " + std::to_string(step) +
                                                      ": the checker's verdict thread was stopped");
    }
  }
  trace::Span span(trace::Kind::kReplica, "replica check", replicaTrack());
  span.event().a = static_cast<int32_t>(step);
  span.event().b = -1;  // the verdict comes from the verdict thread
  span.event().value = totalBytes(tensors);
  GatedCheck c;
  std::vector<uint32_t> words;
  std::vector<size_t> onDevice;
  RINGGUARD_RETURN_IF_ERROR(encodeMine(step, tensors, stream, &words, &onDevice, layoutVersion_));
  const uint32_t* gathered = nullptr;
  RINGGUARD_RETURN_IF_ERROR(exchange_->gatherOnDevice(words, tensors, onDevice, stream, &gathered));
  c.step = step;
  c.epoch = ++epoch_;
  c.wordsPerRank = words.size();
  // The tensors without their names, which only a mismatch needs: those are shared while the layout stays
  // (hundreds of strings not copied every check).
  if (layoutVersion_ == 0 || layoutVersion_ != namedLayout_ || names_ == nullptr ||
      names_->size() != tensors.size()) {
    auto names = std::make_shared<std::vector<std::string>>();
    names->reserve(tensors.size());
    for (const ReplicaTensor& t : tensors) names->push_back(t.name);
    names_ = std::move(names);
    namedLayout_ = layoutVersion_;
  }
  c.names = names_;
  c.tensors.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    c.tensors[i].data = tensors[i].data;
    c.tensors[i].bytes = tensors[i].bytes;
    c.tensors[i].dtype = tensors[i].dtype;
    c.tensors[i].kind = tensors[i].kind;
  }
  // Host tensors (Adam's `step`) as they are now: the training thread changes them before the verdict thread
  // locates or checks again (device tensors wait behind the gate).
  // One allocation for all of them, each copy at a 16-byte boundary.
  if (!gate_->holdsHostTensors()) {
    const auto at16 = [](size_t n) { return (n + 15) / 16 * 16; };
    size_t total = 0;
    for (const ReplicaTensor& t : c.tensors) {
      if (t.kind == MemoryKind::kHost) total = at16(total) + t.bytes;
    }
    c.hostCopies.resize(total);
    size_t at = 0;
    for (ReplicaTensor& t : c.tensors) {
      if (t.kind != MemoryKind::kHost) continue;
      at = at16(at);
      if (t.bytes != 0) std::memcpy(c.hostCopies.data() + at, t.data, t.bytes);
      t.data = c.hostCopies.data() + at;
      at += t.bytes;
    }
  }
  RINGGUARD_RETURN_IF_ERROR(
      gate_->hold(gathered, words.size(), exchange_->size(), c.epoch, stream, &c.pending));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.gatedChecks;
  }
  {
    std::lock_guard<std::mutex> lock(verdictMu_);
    verdicts_.push_back(std::move(c));
  }
  verdictCv_.notify_all();
  trace::tally(trace::Tally::kReplicaCheck);
  return Status::ok();
}

void ReplicaChecker::verdictLoop() {
  gate_->bindThread();
  for (;;) {
    GatedCheck c;
    {
      std::unique_lock<std::mutex> lock(verdictMu_);
      verdictCv_.wait(lock, [this] { return stopping_ || !verdicts_.empty(); });
      if (stopping_) return;
      c = std::move(verdicts_.front());
      verdicts_.pop_front();
      settling_ = true;
    }
    // After a failure the checks queued behind it are not settled: the training group is aborted, so their
    // gathers may hold anything, and a comparison of them could send the ranks into different collectives.
    Status st = gateFailure();
    if (st.isOk()) {
      try {
        st = settle(c);
      } catch (const std::exception& e) {
        st = Status(StatusCode::kInternal,
                    std::string("replica check: the verdict thread failed: ") + e.what());
      }
    }
    // The gate ran out before this verdict (its thread stalled): what was queued behind it already ran on
    // this rank's replica, checked or not. Raised as a failure of its own.
    if (st.isOk() && gate_->expired() >= c.epoch) {
      st = Status(
          StatusCode::kTimeout,
          "replica check: step " + std::to_string(c.step) +
              ": the gate's deadline (RINGGUARD_TIMEOUT_MS) passed before its verdict was settled; the "
              "steps queued behind it ran on this rank unchecked");
    }
    bool first = false;
    if (!st.isOk()) {
      std::lock_guard<std::mutex> lock(verdictMu_);
      first = gateFailure_.isOk();
      if (first) gateFailure_ = st;
    }
    // (A failure found here from an earlier one is not `first`: that one aborted already.)
    // Abort first, then release: the kernels queued behind the gate see the abort at their entry.
    if (first && abortTraining_) abortTraining_(st.message(), st.code() == StatusCode::kCorruption);
    gate_->release(c.epoch);
    {
      std::lock_guard<std::mutex> lock(verdictMu_);
      settling_ = false;
    }
    c.pending.reset();  // its slot back to the gate
    verdictCv_.notify_all();
  }
}

Status ReplicaChecker::settle(GatedCheck& c) {
  std::vector<uint32_t> all;
  RINGGUARD_RETURN_IF_ERROR(c.pending->take(&all));
  ReplicaComparison cmp;
  RINGGUARD_RETURN_IF_ERROR(compareGathered(all, c.wordsPerRank, &cmp));
  if (cmp.mismatch) {
    for (size_t i = 0; i < c.tensors.size(); ++i) c.tensors[i].name = (*c.names)[i];
  }
  // Locating, the repair and the check after it run here, on the verdict stream, over the exchange's
  // collectives (the check's own communicator), while the training stream waits at the gate; a difference
  // in a host tensor is raised unless the gate holds those too (the training thread did not wait for the
  // verdict to change them).
  return act(c.step, c.step, std::move(cmp), c.tensors, verdictStream_, gate_->holdsHostTensors());
}

}  // namespace ringguard
