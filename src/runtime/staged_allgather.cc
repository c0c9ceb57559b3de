#include "ringguard/runtime/staged_allgather.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

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

// What every rank says before the first chunk, all-gathered (one small verified host all-gather per call):
// whether its arguments and staging memory are good, and the count, chunk and dtype it called with. So a
// rank that refuses, and ranks whose calls differ (counts that differ by whole chunks would otherwise leave
// one rank waiting for a chunk nobody sends), give every rank one clean error before any chunk moves, and
// the host communicator stays usable.
struct Header {
  uint64_t ok;
  uint64_t count;
  uint64_t chunkBytes;
  uint64_t dtype;
};

std::string describe(const Header& h) {
  return "{count=" + std::to_string(h.count) + " chunk_bytes=" + std::to_string(h.chunkBytes) + " dtype=" +
         (isValid(DataType(h.dtype)) ? dataTypeName(DataType(h.dtype)) : std::to_string(h.dtype)) + "}";
}

Status agree(Communicator& host, const Status& mine, const Header& header) {
  std::vector<Header> all(size_t(host.size()));
  RINGGUARD_RETURN_IF_ERROR(host.allgather(&header, all.data(), sizeof(Header) / 8, DataType::kInt64));
  const std::string prefix = "staged all-gather on rank " + std::to_string(host.rank()) + ": ";
  if (!mine.isOk()) return Status(mine.code(), prefix + mine.message());
  for (int r = 0; r < host.size(); ++r) {
    if (all[size_t(r)].ok == 0) {
      return Status(StatusCode::kPeerError, prefix + "rank " + std::to_string(r) +
                                                " refused the call (its arguments or its staging memory; "
                                                "its own error names which)");
    }
  }
  for (int r = 1; r < host.size(); ++r) {
    const Header& a = all[0];
    const Header& b = all[size_t(r)];
    if (a.count != b.count || a.chunkBytes != b.chunkBytes || a.dtype != b.dtype) {
      return Status(StatusCode::kInvalidArgument,
                    prefix + "ranks called with different arguments: rank 0 has " + describe(a) + ", rank " +
                        std::to_string(r) + " has " + describe(b));
    }
  }
  return Status::ok();
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
  const size_t esize = isValid(dtype) ? dataTypeSize(dtype) : 1;
  const size_t chunkElems = std::max<size_t>(chunkBytes / esize, 1);
  const size_t chunks = count == 0 ? 1 : (count + chunkElems - 1) / chunkElems;
  const size_t stageElems = std::min(chunkElems, std::max<size_t>(count, 1));
  Staging staging(stager);
  if (bad.isOk()) bad = staging.allocate(stageElems * esize, stageElems * esize * size_t(n));
  RINGGUARD_RETURN_IF_ERROR(
      agree(host, bad, Header{bad.isOk() ? 1u : 0u, count, chunkBytes, uint64_t(dtype)}));
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
