#pragma once
// Gradient outliers, the replica check's second signal (docs/REPLICAS.md): before a bucket's allreduce each
// rank's local gradient norm of it is all-gathered; a rank whose norm departs from the median of the other
// ranks' by more than a factor is reported. A wrong value that only changed one step's gradient is averaged
// into every replica alike, so the replica comparison cannot see it; its norm often can.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringguard {

struct GradientOutliers {
  std::vector<int> ranks;      // ascending
  std::vector<double> ratios;  // per rank in `ranks`: its norm / the median of the others' (floored)
  std::string describe(uint64_t step, size_t bucket) const;  // for logs and errors
};

// norms[r] = rank r's local norm of one bucket (every rank passes the same gathered norms, so every rank
// gets the same answer). Rank r is an outlier when its norm is not finite, or when max(norm, floor) and
// max(median of the others, floor) differ by more than `factor` (> 1) either way; with an even number of
// others, of their two middle values the one nearer to r's norm (so one outlier among 3 ranks does not make
// the other two look odd). With 2 ranks "the others" is the one other rank, so both or neither are named.
// Fewer than 2 ranks: none.
GradientOutliers findGradientOutliers(const std::vector<double>& norms, double factor, double floor = 1e-30);

// Counts one report in the run summary ("gradient_outliers") and, with the timeline on, records it as a
// "gradient outlier" instant on the replicas track.
void recordGradientOutliers(uint64_t step, size_t bucket, const GradientOutliers& outliers);

}  // namespace ringguard
