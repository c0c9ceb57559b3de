#include "ringguard/runtime/staged_allgather.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "algorithms/arguments.h"

namespace ringguard {

namespace {

// Host buffers of the two pipeline slots, freed by the stager on every way out (after the slots' copies
// have completed: a device stager's asynchronous copies must not outlive their staging memory).
class Staging {
 public:
  explicit Staging(AllgatherStager& stager) : stager_(stager) {}
  ~Staging() {
    for (int s = 0; s < 2; ++s) {
      if (in[s] == nullptr && out[s] == nullptr) continue;
      (void)stager_.waitToHost(s);
      (void)stager_.waitFromHost(s);
    }
    for (void* p : {in[0], in[1], out[0], out[1]}) {
      if (p != nullptr) (void)stager_.freeHost(p);
    }
  }
  Status allocate(size_t inBytes, size_t outBytes) {
    for (int s = 0; s < 2; ++s) {
      RINGGUARD_RETURN_IF_ERROR(stager_.allocateHost(inBytes, &in[s]));
      RINGGUARD_RETURN_IF_ERROR(stager_.allocateHost(outBytes, &out[s]));
    }
    return Status::ok();
  }

  void* in[2] = {nullptr, nullptr};
  void* out[2] = {nullptr, nullptr};

 private:
  AllgatherStager& stager_;
};

Status checkArguments(int size, const void* send, void* recv, size_t count, DataType dtype,
                      size_t chunkBytes) {
  RINGGUARD_RETURN_IF_ERROR(checkDtype(dtype));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("send", send, count));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("recv", recv, count));
  const size_t esize = dataTypeSize(dtype);
  if (chunkBytes < esize) {
    return Status(StatusCode::kInvalidArgument, "chunk size " + std::to_string(chunkBytes) +
                                                    " bytes is smaller than one " + dataTypeName(dtype) +
                                                    " element (" + std::to_string(esize) + " bytes)");
  }
  if (count > std::numeric_limits<size_t>::max() / esize / size_t(size)) {
    return Status(StatusCode::kInvalidArgument, "count " + std::to_string(count) + " x " +
                                                    std::to_string(size) + " ranks of " +
                                                    dataTypeName(dtype) + " overflows the byte size");
  }
  return Status::ok();
}

// A call that fails on this rank before its first chunk: the other ranks are told through the host
// communicator (their first chunk fails with kPeerError, as for any refused collective) instead of
// waiting for this rank. The Communicator has no way to refuse a collective with a reason of the caller's,
// so the peers' error names the stand-in refusal (a null buffer of one element); this rank's names the cause.
Status refuse(Communicator& host, const Status& why) {
  (void)host.allgather(nullptr, nullptr, 1, DataType::kUint8);
  return Status(why.code(),
                "staged all-gather on rank " + std::to_string(host.rank()) + ": " + why.message());
}

}  // namespace

Status stagedAllgather(Communicator& host, AllgatherStager& stager, const void* send, void* recv,
                       size_t count, DataType dtype, size_t chunkBytes, StagedAllgatherStats* stats) {
  const int n = host.size(), rank = host.rank();
  Status bad = checkArguments(n, send, recv, count, dtype, chunkBytes);
  if (bad.isOk()) {
    const size_t bytes = count * dataTypeSize(dtype);
    if (send != static_cast<const uint8_t*>(recv) + bytes * size_t(rank))
      bad = checkDisjoint("send", send, bytes, "recv", recv, bytes * size_t(n));
  }
  if (!bad.isOk()) return refuse(host, bad);

  const size_t esize = dataTypeSize(dtype);
  const size_t chunkElems = chunkBytes / esize;
  const size_t chunks = count == 0 ? 1 : (count + chunkElems - 1) / chunkElems;
  const size_t stageElems = std::min(chunkElems, std::max<size_t>(count, 1));
  Staging staging(stager);
  Status st = staging.allocate(stageElems * esize, stageElems * esize * size_t(n));
  if (!st.isOk()) return refuse(host, st);
  if (stats != nullptr) {
    stats->chunks = chunks;
    stats->chunkBytes = chunkElems * esize;
    stats->stagingBytes = 2 * stageElems * esize * size_t(n + 1);
  }

  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  const size_t blockBytes = count * esize;
  const bool inPlace = in == out + blockBytes * size_t(rank);  // this rank's block is already in place
  auto elemsOf = [&](size_t c) { return std::min(chunkElems, count - std::min(count, c * chunkElems)); };
  auto copyIn = [&](size_t c) {
    const size_t e = elemsOf(c);
    return e == 0 ? Status::ok()
                  : stager.toHost(staging.in[c % 2], in + c * chunkElems * esize, e * esize, int(c % 2));
  };

  RINGGUARD_RETURN_IF_ERROR(copyIn(0));
  for (size_t c = 0; c < chunks; ++c) {
    const int s = int(c % 2);
    const size_t e = elemsOf(c), pieceBytes = e * esize;
    // Chunk c+1 goes to the host while chunk c is all-gathered: its slot's input buffer was last read by
    // the all-gather of chunk c-1, which has returned.
    if (c + 1 < chunks) RINGGUARD_RETURN_IF_ERROR(copyIn(c + 1));
    RINGGUARD_RETURN_IF_ERROR(stager.waitToHost(s));
    // The slot's result buffer still feeds the copies back of chunk c-2.
    RINGGUARD_RETURN_IF_ERROR(stager.waitFromHost(s));
    RINGGUARD_RETURN_IF_ERROR(host.allgather(staging.in[s], staging.out[s], e, dtype));
    if (pieceBytes == 0) continue;
    const auto* gathered = static_cast<const uint8_t*>(staging.out[s]);
    for (int r = 0; r < n; ++r) {
      if (r == rank && inPlace) continue;
      RINGGUARD_RETURN_IF_ERROR(stager.fromHost(out + size_t(r) * blockBytes + c * chunkElems * esize,
                                                gathered + size_t(r) * pieceBytes, pieceBytes, s));
    }
  }
  for (int s = 0; s < 2; ++s) RINGGUARD_RETURN_IF_ERROR(stager.waitFromHost(s));
  return Status::ok();
}

}  // namespace ringguard
