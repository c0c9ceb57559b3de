// All-to-all: N - 1 pairwise rounds; in round k (step k - 1) rank r sends its block for r + k and
// receives the block of r - k, straight into its output, verified there. Column src * N + dst is the
// flow src -> dst. Before any payload each rank tells every peer how much it will send it, so splits
// that do not match are an error naming both counts, not a timeout.
#include <algorithm>
#include <cstring>

#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/flow_plan.h"
#include "algorithms/peer_messages.h"
#include "algorithms/window_exchange.h"

namespace ringguard {

Status checkAlltoallArgs(const CollectiveShape& c, const void* send, const void* recv,
                         const AlltoallLayout& l, DataType dtype) {
  RINGGUARD_RETURN_IF_ERROR(checkDtype(dtype));
  const size_t n = size_t(c.size), esize = dataTypeSize(dtype);
  for (const std::vector<size_t>* v : {&l.sendCounts, &l.sendDispls, &l.recvCounts, &l.recvDispls}) {
    if (v->size() != n) {
      return Status(StatusCode::kInvalidArgument,
                    "split vectors need " + std::to_string(n) + " entries, got " + std::to_string(v->size()));
    }
  }
  size_t sendEnd = 0, recvEnd = 0;
  for (size_t p = 0; p < n; ++p) {
    sendEnd = std::max(sendEnd, l.sendDispls[p] + l.sendCounts[p]);
    recvEnd = std::max(recvEnd, l.recvDispls[p] + l.recvCounts[p]);
    RINGGUARD_RETURN_IF_ERROR(checkSlices(std::max(l.sendCounts[p], l.recvCounts[p]), dtype, c.sliceBytes));
  }
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("send", send, sendEnd));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("recv", recv, recvEnd));
  const size_t me = size_t(c.rank);
  if (l.sendCounts[me] != l.recvCounts[me]) {
    return Status(StatusCode::kInvalidArgument, "sends " + std::to_string(l.sendCounts[me]) +
                                                    " elements to itself but receives " +
                                                    std::to_string(l.recvCounts[me]));
  }
  // Receives land in recv while sends read send: they must not share bytes.
  return checkDisjoint("send", send, sendEnd * esize, "recv", recv, recvEnd * esize);
}

namespace {

// Over shared-memory windows: every rank publishes its blocks when they fit a half; when every rank's did,
// each reads its block from every peer (a split that does not match is the same kInvalidArgument on every
// rank), else only the fingerprints were compared and *taken is false.
Status alltoallWindowed(const CollectiveContext& ctx, const Executor& exec, const Fingerprint& fp,
                        const void* send, void* recv, const AlltoallLayout& l, DataType dtype, bool* taken) {
  const size_t n = size_t(ctx.transport->size()), me = size_t(ctx.transport->rank()),
               esize = dataTypeSize(dtype);
  // Per thread (eager.h): no allocation per call.
  thread_local std::vector<EagerPayload> out;
  thread_local std::vector<size_t> inBytes;
  thread_local std::vector<uint8_t*> into;  // each block read straight into place
  thread_local std::vector<std::vector<uint8_t>> in;
  out.assign(n, EagerPayload{});
  inBytes.assign(n, 0);
  size_t publish = 0;
  for (size_t p = 0; p < n; ++p) {
    if (p == me) continue;
    out[p] =
        EagerPayload{static_cast<const uint8_t*>(send) + l.sendDispls[p] * esize, l.sendCounts[p] * esize};
    inBytes[p] = l.recvCounts[p] * esize;
    publish += out[p].bytes;
  }
  into.resize(n);
  for (size_t p = 0; p < n; ++p) into[p] = static_cast<uint8_t*>(recv) + l.recvDispls[p] * esize;
  return windowExchange(ctx, fp, out, inBytes, &in, WindowReads{&into}, runsOneSided(ctx, exec, publish),
                        taken);
}

}  // namespace

Status alltoall(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv,
                const AlltoallLayout& l, DataType dtype) {
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const Fingerprint fp =
      makeFingerprint(CollectiveKind::kAlltoall, ReduceOp::kSum, dtype, 0, kNoRoot, issueOrder(ctx));
  // Where there are windows the fingerprints are compared in them, and the blocks travel there when every
  // rank's fit; otherwise (and when some rank's did not) the ring below.
  bool windowed = false;
  if (n > 1 && ctx.transport->windows() != nullptr && exec->memory() == MemoryKind::kHost) {
    RINGGUARD_RETURN_IF_ERROR(alltoallWindowed(ctx, *exec, fp, send, recv, l, dtype, &windowed));
  } else {
    RINGGUARD_RETURN_IF_ERROR(exchangeFingerprints(ctx, fp));
  }
  const size_t esize = dataTypeSize(dtype), own = l.sendCounts[me] * esize;
  uint8_t* const ownOut = static_cast<uint8_t*>(recv) + l.recvDispls[me] * esize;
  const uint8_t* const ownIn = static_cast<const uint8_t*>(send) + l.sendDispls[me] * esize;
  // A block of several slices is not in the cache, and nothing here reads it again: stored past the cache,
  // as the pipeline's origin copies are.
  RINGGUARD_RETURN_IF_ERROR(own > ctx.options->sliceBytes ? exec->copyCold(ownOut, ownIn, own)
                                                          : exec->copy(ownOut, ownIn, own));
  if (n == 1 || windowed) return Status::ok();

  // The split check: one message to and from every peer (the collective itself is N - 1 exchanges).
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    const Fingerprint f = makeFingerprint(CollectiveKind::kAlltoall, ReduceOp::kSum, dtype, l.sendCounts[to],
                                          kNoRoot, issueOrder(ctx));
    RINGGUARD_RETURN_IF_ERROR(sendToPeer(ctx, to, ControlTag::kFingerprint, &f, sizeof(f)));
  }
  for (int k = 1; k < n; ++k) {
    const int from = (me - k + n) % n;
    const Fingerprint expected = makeFingerprint(CollectiveKind::kAlltoall, ReduceOp::kSum, dtype,
                                                 l.recvCounts[from], kNoRoot, issueOrder(ctx));
    RINGGUARD_RETURN_IF_ERROR(receivePeerFingerprint(ctx, from, expected, "alltoall split"));
  }

  std::vector<Flow> out, in;
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n, from = (me - k + n) % n;
    out.push_back(Flow{me * n + to, to, k - 1, l.sendDispls[to], l.sendCounts[to], ctx.seq});
    in.push_back(Flow{from * n + me, from, k - 1, l.recvDispls[from], l.recvCounts[from], ctx.seq});
  }
  auto route = [n](int column) {
    const int src = column / n, dst = column % n;
    if (src == dst) return FlowRoute{};
    return FlowRoute{src, dst, (dst - src - 1 + n) % n};
  };
  const FlowPlan plan(n, me, n * n, n - 1, dtype, ctx.options->sliceBytes, send, recv, out, in, route);
  return runPipeline(ctx, exec, plan, groupVerdicts(ctx, plan));
}

}  // namespace ringguard
