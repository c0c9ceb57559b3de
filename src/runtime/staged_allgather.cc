#include "ringguard/runtime/staged_allgather.h"

#include <cstdint>

#include "algorithms/arguments.h"
#include "runtime/staged_pipeline.h"

namespace ringguard {

Status stagedAllgather(Communicator& host, HostStager& stager, const void* send, void* recv, size_t count,
                       DataType dtype, size_t chunkBytes, StagedStats* stats) {
  const int n = host.size(), rank = host.rank();
  StagedCall call("staged all-gather", send, recv, count, dtype, chunkBytes);
  call.resultChunks = size_t(n);
  Status refusal = checkStagedCall(call, n);
  const size_t esize = isValid(dtype) ? dataTypeSize(dtype) : 1;
  const size_t blockBytes = count * esize;
  auto* out = static_cast<uint8_t*>(recv);
  // This rank's block is already in place (recv checked non-null first: no offset on a null pointer).
  const bool inPlace = refusal.isOk() && send == out + blockBytes * size_t(rank);
  if (refusal.isOk() && !inPlace)
    refusal = checkDisjoint("send", send, blockBytes, "recv", recv, blockBytes * size_t(n));

  auto gather = [&](const void* hostIn, void* hostOut, size_t elems) {
    return host.allgather(hostIn, hostOut, elems, dtype);
  };
  // Rank r's piece of the chunk lies at r x elems in the host result and at r x count + first in recv.
  auto copyOut = [&](size_t first, size_t elems, const void* hostOut, int slot) {
    const size_t pieceBytes = elems * esize;
    for (int r = 0; r < n; ++r) {
      if (r == rank && inPlace) continue;
      RINGGUARD_RETURN_IF_ERROR(stager.fromHost(out + size_t(r) * blockBytes + first * esize,
                                                static_cast<const uint8_t*>(hostOut) + size_t(r) * pieceBytes,
                                                pieceBytes, slot));
    }
    return Status::ok();
  };
  return runStaged(host, stager, call, refusal, gather, copyOut, stats);
}

}  // namespace ringguard
