#include "runtime/nan_check.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/logging.h"

namespace ringguard {

namespace {

// What one rank found: the whole input's count and its first bad element.
struct Finding {
  uint64_t count = 0;
  uint64_t firstIndex = UINT64_MAX;
};

Status scanInput(const CollectiveContext& ctx, Executor* exec, const CollectiveInput& input, Finding* out) {
  *out = Finding{};
  const std::vector<Executor::ScanSpan> spans = input.all();
  if (spans.empty() || !holdsNonFinite(input.dtype)) return Status::ok();
  RINGGUARD_RETURN_IF_ERROR(exec->scanNonFinite(spans, input.dtype));
  RINGGUARD_RETURN_IF_ERROR(pollUntil(
      ctx, [exec](bool* done) { return exec->syncTest(done); },
      [] { return std::string("the NaN check's scan of the input"); }));
  const std::vector<NonFiniteCount> counts = exec->nonFiniteCounts();
  const size_t esize = dataTypeSize(input.dtype);
  for (size_t i = 0; i < counts.size() && i < spans.size(); ++i) {
    if (counts[i].clean()) continue;
    const uint64_t offset =
        uint64_t(static_cast<const char*>(spans[i].data) - static_cast<const char*>(input.base)) / esize;
    out->firstIndex = std::min(out->firstIndex, offset + counts[i].firstIndex);
    out->count += counts[i].count;
  }
  return Status::ok();
}

std::string describe(const CollectiveContext& ctx, int rank, const Finding& f) {
  std::ostringstream os;
  os << "the input of " << ctx.name << " seq " << ctx.seq << " on rank " << rank << " holds " << f.count
     << " non-finite value" << (f.count == 1 ? "" : "s") << " (NaN or +-Inf; first at element "
     << f.firstIndex << ")";
  return os.str();
}

// Summary of the skip round: the lowest rank whose input holds non-finite values (INT32_MAX: none), and
// what it found. Merging keeps the lower rank: idempotent and associative, as disseminate needs.
struct SkipSummary {
  int32_t rank;
  uint32_t pad;
  uint64_t count;
  uint64_t firstIndex;
};

}  // namespace

Status checkCollectiveInput(const CollectiveContext& ctx, Executor* exec, NanCheck mode,
                            const CollectiveInput& input, bool* skip) {
  *skip = false;
  if (mode == NanCheck::kOff) return Status::ok();
  const int me = ctx.transport->rank(), n = ctx.transport->size();
  Finding mine;
  RINGGUARD_RETURN_IF_ERROR(scanInput(ctx, exec, input, &mine));
  if (mine.count != 0 && ctx.counters != nullptr) ctx.counters->nonFiniteInputs++;

  switch (mode) {
    case NanCheck::kOff:
      return Status::ok();
    case NanCheck::kWarn:
      if (mine.count != 0) logWarn(Subsys::kRuntime, "RINGGUARD_NAN_CHECK=warn: {}", describe(ctx, me, mine));
      return Status::ok();
    case NanCheck::kError:
      if (mine.count == 0) return Status::ok();
      return Status(StatusCode::kInvalidArgument, "RINGGUARD_NAN_CHECK=error: " + describe(ctx, me, mine));
    case NanCheck::kSkip:
      break;
  }

  SkipSummary sum{mine.count != 0 ? me : std::numeric_limits<int32_t>::max(), 0, mine.count, mine.firstIndex};
  auto summary = [&] {
    std::vector<uint8_t> out(sizeof(sum));
    std::memcpy(out.data(), &sum, sizeof(sum));
    return out;
  };
  auto merge = [&](int from, const uint8_t* body, size_t bytes) {
    SkipSummary t;
    if (bytes == sizeof(t)) std::memcpy(&t, body, sizeof(t));
    if (bytes != sizeof(t) ||
        !(t.rank == std::numeric_limits<int32_t>::max() || (t.rank >= 0 && t.rank < n))) {
      std::ostringstream os;
      os << ctx.name << " seq " << ctx.seq << ": malformed NaN-check summary from rank " << from << " ("
         << bytes << " bytes)";
      return Status(StatusCode::kTransportError, os.str());
    }
    if (t.rank < sum.rank) sum = t;
    return Status::ok();
  };
  RINGGUARD_RETURN_IF_ERROR(
      disseminate(ctx, ControlTag::kFingerprint, /*round=*/1, /*checkSeq=*/true, summary, merge,
                  [](int p) { return "the NaN-check summary from rank " + std::to_string(p); }));
  if (sum.rank == std::numeric_limits<int32_t>::max()) return Status::ok();
  *skip = true;
  if (ctx.counters != nullptr) ctx.counters->skipped++;
  Finding first{sum.count, sum.firstIndex};
  logWarn(Subsys::kRuntime, "RINGGUARD_NAN_CHECK=skip: {} skipped on every rank: {}", ctx.name,
          describe(ctx, sum.rank, first));
  return Status::ok();
}

}  // namespace ringguard
