// Gradient-norm outliers across the data-parallel ranks (docs/REPLICAS.md).
#include "ringguard/replicas/gradient_outliers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/trace_events.h"
#include "replicas/replica_track.h"

namespace ringguard {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
    const double m = std::max(median(others), floor), x = std::max(mine, floor);
    const double ratio = x / m;
    if (ratio > factor || ratio * factor < 1.0) {
      out.ranks.push_back(static_cast<int>(r));
      out.ratios.push_back(mine / std::max(median(others), floor));
    }
  }
  return out;
}

std::string GradientOutliers::describe(uint64_t step, size_t bucket) const {
  std::string s = "gradient outliers: step " + std::to_string(step) + ", bucket " + std::to_string(bucket) + ": ";
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
