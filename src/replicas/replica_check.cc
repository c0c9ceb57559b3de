// The replica check's sequence: faults, fingerprints, all-gather, comparison, decision, repair.
#include "ringguard/replicas/replica_check.h"

#include <utility>

#include "core/logging.h"

namespace ringguard {

// Tensors per backend call: a model's device tensors in one launch and one wait (the work table grows with
// it, a few bytes per tensor), with a bound on that table.
constexpr size_t kTensorsPerCall = size_t(1) << 16;

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

ReplicaChecker::~ReplicaChecker() = default;

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
  if (!faultOn_ || !fault_.hits(fault_.rank, step)) return Status::ok();
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
                                   std::vector<uint32_t>* crcs) {
  crcs->assign(tensors.size(), 0);
  uint64_t bytes = 0;
  std::vector<uint32_t> got;
  for (const FingerprintBucket& b : planFingerprintBuckets(tensors, kTensorsPerCall)) {
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

Status ReplicaChecker::gatherAndCompare(uint64_t step, const std::vector<ReplicaTensor>& tensors,
                                        void* stream, ReplicaComparison* out) {
  ReplicaMessage mine;
  mine.step = step;
  mine.layoutHash = replicaLayoutHash(tensors);
  RINGGUARD_RETURN_IF_ERROR(fingerprint(tensors, stream, &mine.crcs));
  const std::vector<uint32_t> words = mine.encode();
  std::vector<uint32_t> all;
  RINGGUARD_RETURN_IF_ERROR(exchange_->allGather(words, &all));
  const int n = exchange_->size();
  if (all.size() != words.size() * static_cast<size_t>(n)) {
    return Status(StatusCode::kInternal, "replica check: the all-gather returned " +
                                             std::to_string(all.size()) + " words, expected " +
                                             std::to_string(words.size() * n));
  }
  std::vector<ReplicaMessage> messages(n);
  for (int r = 0; r < n; ++r) {
    RINGGUARD_RETURN_IF_ERROR(
        ReplicaMessage::decode(all.data() + r * words.size(), words.size(), r, &messages[r]));
  }
  *out = compareReplicas(messages);
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.checks;
  if (out->mismatch) ++counters_.mismatches;
  return Status::ok();
}

void ReplicaChecker::finish(ReplicaReport report) {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = std::move(report);
}

Status ReplicaChecker::afterStep(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.steps;
  }
  RINGGUARD_RETURN_IF_ERROR(injectFault(step, tensors, stream));
  if ((step + 1) % options_.every != 0) return Status::ok();
  return checkNow(step, tensors, stream);
}

Status ReplicaChecker::checkNow(uint64_t step, const std::vector<ReplicaTensor>& tensors, void* stream) {
  ReplicaReport rep;
  rep.step = step;
  rep.checked = true;
  RINGGUARD_RETURN_IF_ERROR(gatherAndCompare(step, tensors, stream, &rep.comparison));
  const ReplicaComparison& c = rep.comparison;
  rep.mismatch = c.mismatch;
  if (!c.mismatch) {
    finish(std::move(rep));
    return Status::ok();
  }
  std::vector<std::string> names;
  names.reserve(tensors.size());
  for (const ReplicaTensor& t : tensors) names.push_back(t.name);
  for (size_t t : c.tensors) rep.tensors.push_back(names[t]);
  rep.decision = decider_.decide(c, step);
  const std::string what = "replica check: step " + std::to_string(step) + ": " + c.describe(names);

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
      finish(std::move(rep));
      return Status::ok();
    }
    case ReplicaAction::kRepair: {
      for (size_t t : c.tensors)
        RINGGUARD_RETURN_IF_ERROR(exchange_->broadcast(tensors[t], c.source, stream));
      decider_.noteRepaired(c, step);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++counters_.repairs;
        counters_.repairedTensors += c.tensors.size();
      }
      ReplicaComparison again;
      RINGGUARD_RETURN_IF_ERROR(gatherAndCompare(step, tensors, stream, &again));
      if (!again.mismatch) {
        rep.repaired = true;
        rep.message = what + "; repaired from rank " + std::to_string(c.source);
        logWarn(Subsys::kGuard, "{}", rep.message);
        finish(std::move(rep));
        return Status::ok();
      }
      rep.decision.action = ReplicaAction::kRaise;
      rep.decision.escalated = true;
      rep.decision.reason =
          "the repair from rank " + std::to_string(c.source) + " did not converge: " + again.describe(names);
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
  Status st(StatusCode::kCorruption, rep.message);
  finish(std::move(rep));
  return st;
}

}  // namespace ringguard
