// Locating the first differing element by rounds of chunk CRCs (docs/REPLICAS.md).
#include "ringguard/replicas/first_difference.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ringguard {

Status locateFirstDifference(const ReplicaTensor& tensor, ReplicaBackend* backend, ReplicaExchange* exchange,
                             void* stream, int64_t* element, uint64_t* rounds) {
  *element = -1;
  size_t unit = dataTypeSize(tensor.dtype);
  if (unit == 0 || tensor.bytes % unit != 0) unit = 1;
  uint64_t lo = 0, hi = tensor.bytes / unit;
  const int n = exchange->size();
  std::vector<ReplicaTensor> views;
  std::vector<size_t> indices;
  std::vector<uint32_t> crcs, all;
  while (hi > lo) {
    const uint64_t count = hi - lo;
    const uint64_t per = (count + kLocateChunks - 1) / kLocateChunks;  // elements per chunk
    const size_t chunks = static_cast<size_t>((count + per - 1) / per);
    views.assign(chunks, tensor);
    indices.resize(chunks);
    for (size_t c = 0; c < chunks; ++c) {
      const uint64_t first = lo + c * per, last = std::min(hi, first + per);
      views[c].data = static_cast<unsigned char*>(tensor.data) + first * unit;
      views[c].bytes = static_cast<size_t>((last - first) * unit);
      indices[c] = c;
    }
    crcs.assign(chunks, 0);
    RINGGUARD_RETURN_IF_ERROR(backend->fingerprint(views, indices, stream, crcs.data()));
    RINGGUARD_RETURN_IF_ERROR(exchange->allGather(crcs, &all));
    ++*rounds;
    if (all.size() != chunks * static_cast<size_t>(n)) {
      return Status(StatusCode::kInternal, "replica check: locating the first difference in '" + tensor.name +
                                               "': the all-gather returned " + std::to_string(all.size()) +
                                               " words, expected " + std::to_string(chunks * n));
    }
    size_t differing = chunks;
    for (size_t c = 0; c < chunks && differing == chunks; ++c) {
      for (int r = 1; r < n; ++r) {
        if (all[r * chunks + c] != all[c]) {
          differing = c;
          break;
        }
      }
    }
    if (differing == chunks) return Status::ok();  // the same bytes everywhere
    lo += differing * per;
    hi = std::min(hi, lo + per);
    if (per == 1) {
      *element = static_cast<int64_t>(lo);
      return Status::ok();
    }
  }
  return Status::ok();
}

}  // namespace ringguard
