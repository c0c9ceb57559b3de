#include "ringguard/aggregation/launch_order.h"

#include <algorithm>

namespace ringguard {

LaunchOrder::LaunchOrder(std::vector<int> bucketOf) : bucketOf_(std::move(bucketOf)) {
  int buckets = 0;
  for (int b : bucketOf_) buckets = std::max(buckets, b + 1);
  sizes_.assign(size_t(buckets), 0);
  for (int b : bucketOf_) sizes_[size_t(b)]++;
  reset();
}

bool LaunchOrder::markReady(size_t p) {
  if (ready_[p]) return false;
  ready_[p] = true;
  pending_[size_t(bucketOf_[p])]--;
  return true;
}

int LaunchOrder::nextLaunch(bool all) {
  if (next_ >= numBuckets() || (!all && pending_[size_t(next_)] != 0)) return -1;
  return next_++;
}

void LaunchOrder::reset() {
  pending_ = sizes_;
  ready_.assign(bucketOf_.size(), false);
  next_ = 0;
}

}  // namespace ringguard
