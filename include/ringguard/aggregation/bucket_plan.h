#pragma once
// Bucket planning for zero-copy gradient aggregation (framework-free: the torch layer describes its
// parameters with GradientSpec and lays its buckets out as planned; docs/AGGREGATION.md).
//
// Buckets are filled in reverse registration order (the gradients of the last layers are ready first in
// backward, as in DDP), one element type and device per bucket, each at most `bucketBytes` unless one
// gradient alone is larger. Inside a bucket every gradient starts on a multiple of `alignBytes` (rounded to
// whole elements; 1 packs them), so device kernels can move aligned vectors; the gaps are padding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

struct GradientSpec {
  size_t elements = 0;     // numel
  size_t elementSize = 1;  // bytes per element (> 0)
  int64_t typeKey = 0;     // gradients of different keys never share a bucket (the dtype)
  int64_t deviceKey = 0;   // ... nor of different devices
};

struct BucketLayout {
  std::vector<size_t> params;   // indices into the specs, in the order they were placed
  std::vector<size_t> offsets;  // per entry of params: its first element in the bucket
  size_t elements = 0;          // the bucket's length, padding included
};

// Fails with kInvalidArgument naming the gradient when an element size is 0, or when alignBytes is 0, or
// when a bucket's length would overflow size_t.
Status planBuckets(const std::vector<GradientSpec>& grads, size_t bucketBytes, size_t alignBytes,
                   std::vector<BucketLayout>* out);

}  // namespace ringguard
