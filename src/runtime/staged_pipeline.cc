#include "runtime/staged_pipeline.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/arguments.h"

namespace ringguard {

namespace {

// Host buffers of the two pipeline slots, freed by the stager on every way out (after the slots' copies
// have completed: a device stager's asynchronous copies must not outlive their staging memory).
class Staging {
 public:
  explicit Staging(HostStager& stager) : stager_(stager) {}
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
  HostStager& stager_;
};

// What every rank says before the first chunk, all-gathered (one small verified host all-gather per call):
// whether its arguments and staging memory are good, and the count, chunk, dtype and op it called with. So
// a rank that refuses, and ranks whose calls differ (counts that differ by whole chunks would otherwise
// leave one rank waiting for a chunk nobody sends), give every rank one clean error before any chunk moves,
// and the host communicator stays usable. The op travels as its kind and its factor's bits: premul_sum op
// handles are per process (types.h), the factor is what ranks must agree on.
struct Header {
  uint64_t ok;
  uint64_t count;
  uint64_t chunkBytes;
  uint64_t dtype;
  uint64_t op;      // baseOp, or kNoOp for a call that does not reduce
  uint64_t factor;  // premulFactor's f64 bits (1.0 for every other op)
};
constexpr uint64_t kNoOp = 0xFF;

Header headerOf(const StagedCall& call, const Status& refusal) {
  Header h{refusal.isOk() ? 1u : 0u, call.count, call.chunkBytes, uint64_t(call.dtype), kNoOp, 0};
  if (call.reduces) {
    h.op = uint64_t(baseOp(call.op));
    const double factor = premulFactor(call.op);
    std::memcpy(&h.factor, &factor, sizeof factor);
  }
  return h;
}

std::string describe(const Header& h) {
  std::ostringstream s;
  s << "{count=" << h.count << " chunk_bytes=" << h.chunkBytes
    << " dtype=" << (isValid(DataType(h.dtype)) ? dataTypeName(DataType(h.dtype)) : std::to_string(h.dtype));
  if (h.op != kNoOp) {
    s << " op=" << reduceOpName(ReduceOp(h.op));
    if (ReduceOp(h.op) == ReduceOp::kPremulSum) {
      double factor;
      std::memcpy(&factor, &h.factor, sizeof factor);
      s << "(" << factor << ")";
    }
  }
  s << "}";
  return s.str();
}

bool sameCall(const Header& a, const Header& b) {
  return a.count == b.count && a.chunkBytes == b.chunkBytes && a.dtype == b.dtype && a.op == b.op &&
         a.factor == b.factor;
}

Status agree(Communicator& host, const char* name, const Status& mine, const Header& header) {
  std::vector<Header> all(size_t(host.size()));
  RINGGUARD_RETURN_IF_ERROR(host.allgather(&header, all.data(), sizeof(Header) / 8, DataType::kInt64));
  const std::string prefix = std::string(name) + " on rank " + std::to_string(host.rank()) + ": ";
  if (!mine.isOk()) return Status(mine.code(), prefix + mine.message());
  for (int r = 0; r < host.size(); ++r) {
    if (all[size_t(r)].ok == 0) {
      return Status(StatusCode::kPeerError, prefix + "rank " + std::to_string(r) +
                                                " refused the call (its arguments or its staging memory; "
                                                "its own error names which)");
    }
  }
  for (int r = 1; r < host.size(); ++r) {
    if (!sameCall(all[0], all[size_t(r)])) {
      return Status(StatusCode::kInvalidArgument,
                    prefix + "ranks called with different arguments: rank 0 has " + describe(all[0]) +
                        ", rank " + std::to_string(r) + " has " + describe(all[size_t(r)]));
    }
  }
  return Status::ok();
}

}  // namespace

Status checkStagedCall(const StagedCall& call, int size) {
  RINGGUARD_RETURN_IF_ERROR(checkDtype(call.dtype));
  if (call.reduces) {
    RINGGUARD_RETURN_IF_ERROR(checkOp(call.op, call.dtype));
    RINGGUARD_RETURN_IF_ERROR(checkOpRanks(call.op, size));
  }
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("send", call.send, call.count));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("recv", call.recv, call.count));
  const size_t esize = dataTypeSize(call.dtype);
  if (call.chunkBytes < esize) {
    return Status(StatusCode::kInvalidArgument, "chunk size " + std::to_string(call.chunkBytes) +
                                                    " bytes is smaller than one " + dataTypeName(call.dtype) +
                                                    " element (" + std::to_string(esize) + " bytes)");
  }
  if (call.count > std::numeric_limits<size_t>::max() / esize / call.resultChunks) {
    return Status(StatusCode::kInvalidArgument,
                  "count " + std::to_string(call.count) + " of " + dataTypeName(call.dtype) + " in " +
                      std::to_string(call.resultChunks) + " blocks overflows the byte size");
  }
  return Status::ok();
}

Status runStaged(Communicator& host, HostStager& stager, const StagedCall& call, Status refusal,
                 const StagedChunk& chunk, const StagedCopyOut& copyOut, StagedStats* stats) {
  const size_t count = call.count;
  const size_t esize = isValid(call.dtype) ? dataTypeSize(call.dtype) : 1;
  const size_t chunkElems = std::max<size_t>(call.chunkBytes / esize, 1);
  const size_t chunks = count == 0 ? 1 : (count + chunkElems - 1) / chunkElems;
  const size_t stageBytes = std::min(chunkElems, std::max<size_t>(count, 1)) * esize;
  Staging staging(stager);
  if (refusal.isOk()) refusal = staging.allocate(stageBytes, stageBytes * call.resultChunks);
  RINGGUARD_RETURN_IF_ERROR(agree(host, call.name, refusal, headerOf(call, refusal)));
  if (stats != nullptr) {
    stats->chunks = chunks;
    stats->chunkBytes = chunkElems * esize;
    stats->stagingBytes = 2 * stageBytes * (call.resultChunks + 1);
  }

  const auto* in = static_cast<const uint8_t*>(call.send);
  auto elemsOf = [&](size_t c) { return std::min(chunkElems, count - std::min(count, c * chunkElems)); };
  auto copyIn = [&](size_t c) {
    const size_t e = elemsOf(c);
    return e == 0 ? Status::ok()
                  : stager.toHost(staging.in[c % 2], in + c * chunkElems * esize, e * esize, int(c % 2));
  };

  RINGGUARD_RETURN_IF_ERROR(copyIn(0));
  for (size_t c = 0; c < chunks; ++c) {
    const int s = int(c % 2);
    const size_t e = elemsOf(c);
    // Chunk c+1 goes to the host while chunk c is reduced or gathered: its slot's input buffer was last
    // read by the host collective of chunk c-1, which has returned.
    if (c + 1 < chunks) RINGGUARD_RETURN_IF_ERROR(copyIn(c + 1));
    RINGGUARD_RETURN_IF_ERROR(stager.waitToHost(s));
    // The slot's result buffer still feeds the copies back of chunk c-2.
    RINGGUARD_RETURN_IF_ERROR(stager.waitFromHost(s));
    RINGGUARD_RETURN_IF_ERROR(chunk(staging.in[s], staging.out[s], e));
    if (e > 0) RINGGUARD_RETURN_IF_ERROR(copyOut(c * chunkElems, e, staging.out[s], s));
  }
  for (int s = 0; s < 2; ++s) RINGGUARD_RETURN_IF_ERROR(stager.waitFromHost(s));
  return Status::ok();
}

}  // namespace ringguard
