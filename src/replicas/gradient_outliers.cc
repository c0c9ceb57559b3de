// Gradient-norm outliers across the data-parallel ranks (docs/REPLICAS.md).
#include "ringguard/replicas/gradient_outliers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/trace_events.h"
#include "replicas/replica_track.h"

namespace ringguard {

namespace {

// The median of `v` as seen from `x`: with an even count, of the two middle values the one nearer to x (as a
// ratio). The mean of the two would let one outlier among 3 ranks drag the others' reference with it (1, 1.3
// and 900: rank 0's others average 450), and every rank would look odd.
double medianFrom(std::vector<double> v, double x, double floor) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n % 2 == 1) return v[n / 2];
  const double lo = v[n / 2 - 1], hi = v[n / 2], y = std::max(x, floor);
  const double dLo = std::fabs(std::log(y / std::max(lo, floor))),
               dHi = std::fabs(std::log(y / std::max(hi, floor)));
  return dLo <= dHi ? lo : hi;
}

}  // namespace

GradientOutliers findGradientOutliers(const std::vector<double>& norms, double factor, double floor) {
  GradientOutliers out;
  const size_t n = norms.size();
  if (n < 2) return out;
  std::vector<double> others;
  for (size_t r = 0; r < n; ++r) {
    others.clear();
    for (size_t q = 0; q < n; ++q) {
      if (q != r && std::isfinite(norms[q])) others.push_back(norms[q]);
    }
    const double mine = norms[r];
    if (!std::isfinite(mine)) {
      out.ranks.push_back(static_cast<int>(r));
      out.ratios.push_back(mine);
      continue;
    }
    if (others.empty()) continue;  // every other rank is non-finite: they are the outliers
    const double m = std::max(medianFrom(others, mine, floor), floor), x = std::max(mine, floor);
    const double ratio = x / m;
    if (ratio > factor || ratio * factor < 1.0) {
      out.ranks.push_back(static_cast<int>(r));
      out.ratios.push_back(ratio);
    }
  }
  return out;
}

std::string GradientOutliers::describe(uint64_t step, size_t bucket) const {
  std::string s =
      "gradient outliers: step " + std::to_string(step) + ", bucket " + std::to_string(bucket) + ": ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g", ratios[i]);
    s += (i == 0 ? "rank " : ", rank ") + std::to_string(ranks[i]) + " at " + buf + "x";
  }
  return s + " the median norm of the other ranks";
}

void recordGradientOutliers(uint64_t step, size_t bucket, const GradientOutliers& outliers) {
  if (outliers.ranks.empty()) return;
  trace::tally(trace::Tally::kGradientOutlier);
  trace::instant(trace::Kind::kReplica, "gradient outlier", replicaTrack(), 0, static_cast<int32_t>(step),
                 outliers.ranks[0], static_cast<int32_t>(bucket), 0,
                 trace::on() ? trace::intern(outliers.describe(step, bucket)) : nullptr);
}

}  // namespace ringguard
