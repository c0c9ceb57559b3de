#pragma once
// Readiness and in-order launch of gradient buckets (framework-free; docs/AGGREGATION.md).
//
// A bucket is ready when every gradient in it was produced this step. Buckets are launched strictly in
// bucket order: a ready bucket waits for every lower-numbered one, so every rank issues the same
// collectives in the same order whatever order its gradients arrive in (collectives are matched by issue
// order). Not thread-safe: the caller serialises (the torch layer holds its mutex).
#include <cstddef>
#include <vector>

namespace ringguard {

class LaunchOrder {
 public:
  // bucketOf[p]: the bucket of gradient p; buckets are numbered 0 .. max(bucketOf).
  explicit LaunchOrder(std::vector<int> bucketOf);

  // Gradient p was produced. False (and nothing changes) when it was already counted this step.
  bool markReady(size_t p);
  bool isReady(size_t p) const { return ready_[p]; }
  // The next bucket to launch, or -1: the lowest unlaunched one, when it is ready or `all` (the end of
  // backward: what is left goes now). Each bucket is returned once per step.
  int nextLaunch(bool all);

  int numBuckets() const { return int(pending_.size()); }
  int launched() const { return next_; }
  // Every gradient unready and every bucket unlaunched again.
  void reset();

 private:
  std::vector<int> bucketOf_;
  std::vector<size_t> sizes_;    // gradients per bucket
  std::vector<size_t> pending_;  // per bucket: gradients not yet ready this step
  std::vector<bool> ready_;      // per gradient
  int next_ = 0;                 // the lowest bucket not launched this step
};

}  // namespace ringguard
