#include "ringguard/aggregation/bucket_plan.h"

#include <limits>
#include <string>

namespace ringguard {

Status planBuckets(const std::vector<GradientSpec>& grads, size_t bucketBytes, size_t alignBytes,
                   std::vector<BucketLayout>* out) {
  if (alignBytes == 0) return Status(StatusCode::kInvalidArgument, "planBuckets: alignBytes is 0");
  std::vector<BucketLayout> layout;
  size_t filled = 0;  // bytes of gradients (without padding) in the last bucket
  for (size_t r = grads.size(); r-- > 0;) {
    const GradientSpec& g = grads[r];
    if (g.elementSize == 0) {
      return Status(StatusCode::kInvalidArgument,
                    "planBuckets: gradient " + std::to_string(r) + " has element size 0");
    }
    if (g.elements > std::numeric_limits<size_t>::max() / g.elementSize) {
      return Status(StatusCode::kInvalidArgument, "planBuckets: gradient " + std::to_string(r) + " of " +
                                                      std::to_string(g.elements) +
                                                      " elements overflows size_t");
    }
    const size_t bytes = g.elements * g.elementSize;
    bool fresh = layout.empty() || filled + bytes > bucketBytes;
    if (!fresh) {
      const GradientSpec& first = grads[layout.back().params.front()];
      fresh = first.typeKey != g.typeKey || first.deviceKey != g.deviceKey;
    }
    if (fresh) {
      layout.emplace_back();
      filled = 0;
    }
    BucketLayout& b = layout.back();
    const size_t align = alignBytes / g.elementSize > 0 ? alignBytes / g.elementSize : 1;
    const size_t start = (b.elements + align - 1) / align * align;
    if (start < b.elements || start > std::numeric_limits<size_t>::max() - g.elements) {
      return Status(StatusCode::kInvalidArgument, "planBuckets: bucket " + std::to_string(layout.size() - 1) +
                                                      " overflows size_t at gradient " + std::to_string(r));
    }
    b.params.push_back(r);
    b.offsets.push_back(start);
    b.elements = start + g.elements;
    filled += bytes;
  }
  *out = std::move(layout);
  return Status::ok();
}

}  // namespace ringguard
