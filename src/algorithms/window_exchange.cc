#include "algorithms/window_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>

#include "algorithms/error_frames.h"
#include "algorithms/window_seal.h"
#include "algorithms/window_wait.h"
#include "core/copy_bytes.h"
#include "core/fault_injector.h"
#include "ringguard/core/crc32.h"
#include "transport/window.h"

namespace ringguard {

namespace {

std::string where(const CollectiveContext& ctx) {
  return std::string(ctx.name) + " seq " + std::to_string(ctx.seq) + " on rank " +
         std::to_string(ctx.transport->rank());
}

// This rank's publication of epoch `e`: the part table (one entry per reader; payloads that are the same
// bytes for several readers share one part), the fingerprint, then the chunks, each visible to readers as
// soon as its epoch is stored.
// A part of `readersCopy` (the readers copy it into their output, not read it in place) and as large as
// Windows::publishesPartByAddress says is published by address: its bytes stay in the caller's buffer, which
// the readers copy straight into theirs (docs/design/protocol.md, "Single-copy read"); its chunks' CRCs and
// epochs are published as for bytes in the window.
void publish(const CollectiveContext& ctx, const Windows& w, uint64_t e, uint32_t step,
             const Fingerprint& mine, const std::vector<EagerPayload>& out, bool offered, bool readersCopy) {
  const int n = w.size(), me = w.rank();
  const WindowLayout& layout = w.layout();
  thread_local std::vector<int> ownerOf;  // the reader whose part a reader's payload shares (per thread)
  ownerOf.assign(size_t(n), -1);
  uint64_t offset = 0, chunk = 0;
  for (int r = 0; r < n; ++r) {
    PartEntry& part = w.part(me, e, r);
    const EagerPayload& o = out[size_t(r)];
    if (r == me || o.bytes == 0 || !offered) {
      part = PartEntry{0, 0, 0, 0};
      continue;
    }
    for (int q = 0; q < r; ++q) {
      if (q != me && out[size_t(q)].data == o.data && out[size_t(q)].bytes == o.bytes) {
        ownerOf[size_t(r)] = q;
        break;
      }
    }
    if (ownerOf[size_t(r)] >= 0) {
      part = w.part(me, e, ownerOf[size_t(r)]);
      continue;
    }
    if (readersCopy && w.publishesPartByAddress(o.bytes)) {
      part = PartEntry{0, o.bytes, chunk, uint64_t(uintptr_t(o.data))};
    } else {
      part = PartEntry{offset, o.bytes, chunk, 0};
      offset += (o.bytes + 63) / 64 * 64;
    }
    chunk += layout.chunksOf(o.bytes);
  }
  HalfHeader& h = w.half(me, e);
  h.seal.fingerprint = mine;
  h.seal.declined = offered ? 0 : 1;
  h.seal.crc = crc32(&h.seal, offsetof(HalfSeal, crc));
  h.epoch.store(e, std::memory_order_release);
  if (!offered) return;

  uint8_t* data = w.data(me, e);
  for (int r = 0; r < n; ++r) {
    if (r == me || out[size_t(r)].bytes == 0 || ownerOf[size_t(r)] >= 0) continue;
    const PartEntry part = w.part(me, e, r);
    const auto* src = static_cast<const uint8_t*>(out[size_t(r)].data);
    for (uint64_t k = 0; k < layout.chunksOf(part.bytes); ++k) {
      const size_t at = size_t(k) * kWindowChunkBytes;
      const size_t len = std::min(kWindowChunkBytes, size_t(part.bytes) - at);
      const uint32_t slice = uint32_t(part.firstChunk + k);
      if (ctx.injector != nullptr && ctx.injector->enabled()) {
        int delay = 0;
        for (int p = 0; p < n; ++p) {
          if (p != me) delay = std::max(delay, ctx.injector->delayMs(ctx.seq, int(step), int(slice), p, 0));
        }
        if (delay > 0) {
          ctx.counters->delayed++;
          std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        }
      }
      // The CRC of the source, so a copy damaged on its way into the window fails the readers' check.
      const uint32_t crc = crc32(src + at, len);
      if (part.address == 0) w.copyIn(data + part.offset + at, src + at, len);
      ChunkEntry& c = w.chunk(me, e, size_t(part.firstChunk + k));
      c.trailer = makeTrailer(SliceId{ctx.seq, step, slice, uint32_t(me), uint32_t(len), 0}, crc, 0);
      c.epoch.store(e, std::memory_order_release);
      ctx.counters->slicesSent++;
      ctx.counters->bytesSent += len;
    }
  }
  for (int p = 0; p < n; ++p) {
    if (p != me) w.wake(p);
  }
}

// A peer whose call differs so much that it took the two-sided path (its payload does not fit the window)
// sends a fingerprint frame instead of publishing: the mismatch, named with both fingerprints when the
// frame's first summary is the peer's own (what a one-round exchange and dissemination round 0 send).
Status twoSidedPeer(const CollectiveContext& ctx, const Fingerprint& mine, int p) {
  std::vector<uint8_t> frame;
  int from = -1;
  bool got = false;
  RINGGUARD_RETURN_IF_ERROR(
      ctx.transport->control()->probe(p, ControlTag::kFingerprint, &frame, &from, &got));
  if (!got) return Status::ok();
  constexpr size_t kAt = sizeof(DisseminationHeader) + 8;  // the summary's (lowest rank, differing rank)
  int32_t low = -1;
  Fingerprint theirs;
  if (frame.size() >= kAt + sizeof theirs) {
    std::memcpy(&low, frame.data() + sizeof(DisseminationHeader), sizeof low);
    std::memcpy(&theirs, frame.data() + kAt, sizeof theirs);
  }
  const int me = ctx.transport->rank();
  Status mismatch =
      low == p && !(theirs == mine)
          ? (me < p ? compareFingerprints(me, mine, p, theirs) : compareFingerprints(p, theirs, me, mine))
          : Status(StatusCode::kFingerprintMismatch,
                   where(ctx) + ": rank " + std::to_string(p) +
                       " took the two-sided path where this rank's call fits the window: the calls differ (" +
                       describeFingerprint(mine) + " here)");
  // Only this rank sees it (a mismatch found in the windows is seen by all, and is not announced): the
  // peers waiting in the two-sided exchange learn it from the error frame.
  broadcastError(ctx.transport, mismatch, ctx.seq);
  return mismatch;
}

// Peer p's seal of epoch `e` (fingerprint, declined), once its CRC holds (control-mode fault injection
// damages the first read, keyed as the fingerprint frame from p would be).
Status readSeal(const CollectiveContext& ctx, const Windows& w, uint64_t e, const Fingerprint& mine, int p,
                HalfSeal* out) {
  const int me = w.rank();
  const HalfHeader& h = w.half(p, e);
  RINGGUARD_RETURN_IF_ERROR(waitUntil(
      ctx, [&h, e] { return h.epoch.load(std::memory_order_acquire) == e; },
      [p] { return "rank " + std::to_string(p) + "'s fingerprint in its window"; }, p,
      [&ctx, &mine, p] { return twoSidedPeer(ctx, mine, p); }));
  int reads = 0;
  if (readSealCopy(ctx, h.seal, p, me, out, &reads)) return Status::ok();
  return Status(StatusCode::kCorruption, where(ctx) + ": rank " + std::to_string(p) +
                                             "'s fingerprint in its window failed its CRC on all " +
                                             std::to_string(reads) + " reads");
}

// A chunk of peer p's publication that failed every read: the error every rank returns (the settle).
Status chunkCorrupt(const CollectiveContext& ctx, int p, uint32_t step, uint32_t slice, int reads,
                    SliceCheck check) {
  return Status(StatusCode::kCorruption, where(ctx) + ": chunk " + std::to_string(slice) + " of rank " +
                                             std::to_string(p) + "'s window" +
                                             (step > 0 ? " (step " + std::to_string(step) + ")" : "") +
                                             " failed verification on all " + std::to_string(reads) +
                                             " reads (" + sliceCheckName(check) + ")");
}

// Peer p's part published by address (partReadable already held): as its chunks' CRCs are published, the
// run of chunks published so far is read in one single-copy read from p's buffer into `dst` (or `spill`,
// where the caller reads in place: *at then points there), so the reads overlap p's CRCs as window reads
// overlap p's copies; then each chunk is checked as a ring slice where it landed and re-read from p's
// buffer when it fails. p's buffer stays valid until this rank settled (p returns only then). A read the
// kernel refuses (an address p's process does not map, a process gone) is a kTransportError naming p in
// *failure; a chunk corrupt on every read a kCorruption, as for bytes in the window.
Status readPartByAddress(const CollectiveContext& ctx, const Windows& w, uint64_t e, uint32_t step, int p,
                         const PartEntry& part, uint8_t* dst, const uint8_t** at, std::vector<uint8_t>* spill,
                         Status* failure) {
  const WindowLayout& layout = w.layout();
  const size_t bytes = size_t(part.bytes);
  if (!w.crossReadable() || !sourceReadable(part.address, bytes)) {
    *failure = Status(StatusCode::kTransportError,
                      where(ctx) + ": rank " + std::to_string(p) + "'s window gives this rank " +
                          std::to_string(bytes) + " bytes at address " + std::to_string(part.address) +
                          (w.crossReadable() ? ", a range that wraps"
                                             : " in its process, which this rank cannot read (no single-copy "
                                               "reads in this group)"));
    return Status::ok();
  }
  if (dst == nullptr) {
    spill->resize(bytes);
    dst = spill->data();
  }
  if (at != nullptr) *at = dst;
  // The kernel's refusal, named in this collective's words.
  const auto crossRead = [&](size_t off, size_t len) {
    const Status st = w.crossRead(p, part.address + off, dst + off, len);
    if (!st.isOk()) *failure = Status(st.code(), where(ctx) + ": " + st.message());
    return st.isOk();
  };
  const auto published = [&w, p, e, &part](size_t k) {
    return w.chunk(p, e, size_t(part.firstChunk + k)).epoch.load(std::memory_order_acquire) == e;
  };
  const size_t chunks = layout.chunksOf(bytes);
  const int reads = std::max(1, ctx.options->maxRetries + 1);
  for (size_t k = 0; k < chunks;) {
    const uint32_t first = uint32_t(part.firstChunk + k);
    RINGGUARD_RETURN_IF_ERROR(waitUntil(
        ctx, [&published, k] { return published(k); },
        [p, first] {
          return "chunk " + std::to_string(first) + " in rank " + std::to_string(p) + "'s window";
        },
        p));
    size_t end = k + 1;
    while (end < chunks && published(end)) ++end;
    const size_t runAt = k * kWindowChunkBytes;
    if (!crossRead(runAt, std::min(bytes, end * kWindowChunkBytes) - runAt)) return Status::ok();
    for (; k < end; ++k) {
      const size_t off = k * kWindowChunkBytes;
      const size_t len = std::min(kWindowChunkBytes, bytes - off);
      const uint32_t slice = uint32_t(part.firstChunk + k);
      const SliceId expected{ctx.seq, step, slice, uint32_t(p), uint32_t(len), 0};
      SliceCheck check = SliceCheck::kOk;
      for (int attempt = 0; attempt < reads; ++attempt) {
        if (attempt > 0) {
          ctx.counters->retransmitted++;  // re-read from the buffer the peer keeps until the settle
          if (!crossRead(off, len)) return Status::ok();
        }
        EagerView view;
        view.payload = dst + off;
        view.bytes = len;
        view.trailer = w.chunk(p, e, size_t(slice)).trailer;  // read once: the check and the verdict use it
        check = verifyEagerPayload(ctx, expected, view, ctx.counters, attempt);
        if (!isLinkFailure(check)) break;
      }
      if (isLinkFailure(check)) {
        *failure = chunkCorrupt(ctx, p, step, slice, reads, check);
        return Status::ok();
      }
    }
  }
  return Status::ok();
}

// Peer p's part for this rank (`bytes`, what the agreed arguments say): the part table entry bounds-checked,
// then chunk by chunk as each is published, verified, re-read on a failure. Copied into `dst`, or, where
// `at` is given, verified where it lies and not copied: *at then points at it in p's window, which p leaves
// untouched until this rank's next collective on the windows (docs/design/protocol.md, "Read once"). A read
// that data-mode fault injection damages is a copy in `spill` (the window is the peer's, and other readers
// read it); when such a damaged read passes its check (an escape), the part is used as read: every chunk is
// copied into `spill` and *at points there. A failure of the data (a chunk corrupt on every re-read, a part
// of another size) goes to *failure, for the settle; the return value is a wait's error (timeout, a peer's
// error, abort).
Status readPart(const CollectiveContext& ctx, const Windows& w, uint64_t e, uint32_t step, int p,
                size_t bytes, uint8_t* dst, const uint8_t** at, std::vector<uint8_t>* spill,
                Status* failure) {
  const int me = w.rank();
  const WindowLayout& layout = w.layout();
  const PartEntry part = w.part(p, e, me);
  if (!partReadable(layout, part, bytes)) {
    // A consistent entry of another size: the calls' split counts differ (all-to-all). Anything else is a
    // peer that wrote nonsense.
    const bool otherSize = part.bytes != bytes && part.bytes <= layout.capacity &&
                           partReadable(layout, part, size_t(part.bytes));
    *failure = otherSize
                   ? Status(StatusCode::kInvalidArgument,
                            where(ctx) + ": rank " + std::to_string(p) + " sends rank " + std::to_string(me) +
                                " " + std::to_string(part.bytes) + " bytes, which expects " +
                                std::to_string(bytes) + " (split counts that do not match)")
                   : Status(StatusCode::kTransportError,
                            where(ctx) + ": rank " + std::to_string(p) + "'s window gives this rank " +
                                std::to_string(part.bytes) + " bytes at offset " +
                                std::to_string(part.offset) + ", chunk " + std::to_string(part.firstChunk) +
                                "; expected " + std::to_string(bytes) + " bytes within a window of " +
                                std::to_string(layout.capacity) + " bytes and " +
                                std::to_string(layout.maxChunks) + " chunks");
    return Status::ok();
  }
  if (part.address != 0) return readPartByAddress(ctx, w, e, step, p, part, dst, at, spill, failure);
  const uint8_t* data = w.data(p, e) + part.offset;
  const bool inPlace = at != nullptr;
  if (inPlace) *at = data;
  const int reads = std::max(1, ctx.options->maxRetries + 1);
  for (uint64_t k = 0; k < layout.chunksOf(bytes); ++k) {
    const size_t off = size_t(k) * kWindowChunkBytes;
    const size_t len = std::min(kWindowChunkBytes, bytes - off);
    const uint32_t slice = uint32_t(part.firstChunk + k);
    const ChunkEntry& c = w.chunk(p, e, size_t(part.firstChunk + k));
    RINGGUARD_RETURN_IF_ERROR(waitUntil(
        ctx, [&c, e] { return c.epoch.load(std::memory_order_acquire) == e; },
        [p, slice] {
          return "chunk " + std::to_string(slice) + " in rank " + std::to_string(p) + "'s window";
        },
        p));
    const SliceId expected{ctx.seq, step, slice, uint32_t(p), uint32_t(len), 0};
    SliceCheck check = SliceCheck::kOk;
    bool copied = false;  // whether the read checked last is a copy (not the window's bytes)
    for (int attempt = 0; attempt < reads; ++attempt) {
      EagerView view;
      view.bytes = len;
      view.trailer = c.trailer;  // read once: the check below and the verdict use this copy
      copied = dst != nullptr || (ctx.injector != nullptr &&
                                  ctx.injector->corrupts(ctx.seq, int(step), int(slice), me, attempt));
      if (copied) {
        uint8_t* to = dst;
        if (to == nullptr) {
          spill->resize(bytes);
          to = spill->data();
        }
        copyBytes(to + off, data + off, len);
        view.payload = to + off;
      } else {
        // Checked in place: no injection applies to this read (above), so nothing writes through it.
        view.payload = const_cast<uint8_t*>(data + off);
      }
      if (attempt > 0) ctx.counters->retransmitted++;  // re-read from the publication the peer retains
      check = verifyEagerPayload(ctx, expected, view, ctx.counters, attempt);
      if (!isLinkFailure(check)) break;
    }
    if (isLinkFailure(check)) {
      *failure = chunkCorrupt(ctx, p, step, slice, reads, check);
      return Status::ok();
    }
    if (copied && inPlace && dst == nullptr) {
      // An injected damage that passed: what was read is what is used, as on every path. The chunks
      // before it were verified in place; from here on the part is read into the spill.
      copyBytes(spill->data(), data, off);
      dst = spill->data();
      *at = dst;
    }
  }
  return Status::ok();
}

// The end of a collective: this rank says whether its reads succeeded (done) or failed (failed, with its
// code and why), then waits for every peer to say the same, so every rank returns the same outcome in the
// same collective: OK, or the lowest failed rank's error. Peers' publications stay untouched until then, as
// does this rank's (a peer still reading it).
Status settle(const CollectiveContext& ctx, const Windows& w, uint64_t e, const Status& read) {
  const int n = w.size(), me = w.rank();
  WindowHeader& own = w.header(me);
  if (read.isOk()) {
    own.done.store(e, std::memory_order_release);
  } else {
    const std::string& why = read.message();
    const size_t len = std::min(why.size(), kWindowWhyBytes - 1);
    std::memcpy(own.why, why.data(), len);
    own.why[len] = '\0';
    own.code = uint32_t(read.code());
    own.failed.store(e, std::memory_order_release);
  }
  for (int p = 0; p < n; ++p) {
    if (p != me) w.wake(p);
  }
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const WindowHeader& h = w.header(p);
    RINGGUARD_RETURN_IF_ERROR(waitUntil(
        ctx,
        [&h, e] {
          return h.done.load(std::memory_order_acquire) >= e || h.failed.load(std::memory_order_acquire) == e;
        },
        [p] { return "rank " + std::to_string(p) + " to finish reading the windows"; }, p));
  }
  for (int p = 0; p < n; ++p) {
    if (p == me) {
      if (!read.isOk()) return read;
      continue;
    }
    const WindowHeader& h = w.header(p);
    if (h.failed.load(std::memory_order_acquire) != e) continue;
    char why[kWindowWhyBytes];
    std::memcpy(why, h.why, sizeof why);  // a peer's text: bounded here, whatever it wrote
    why[sizeof why - 1] = '\0';
    // A peer's code: one of those a settle carries, else the peer is not to be believed.
    const auto code = StatusCode(h.code);
    const bool known = code == StatusCode::kCorruption || code == StatusCode::kInvalidArgument;
    return Status(known ? code : StatusCode::kTransportError, why);
  }
  return Status::ok();
}

}  // namespace

bool runsOneSided(const CollectiveContext& ctx, const Executor& exec, size_t publishBytes) {
  const Windows* w = ctx.transport->windows();
  // Each part is padded to 64 bytes: at most `size` parts.
  return w != nullptr && exec.memory() == MemoryKind::kHost && w->size() >= 2 &&
         publishBytes + 64 * size_t(w->size()) <= w->layout().capacity;
}

Status windowExchange(const CollectiveContext& ctx, const Fingerprint& mine,
                      const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                      std::vector<std::vector<uint8_t>>* in, const WindowReads& reads, bool offered,
                      bool* taken) {
  Windows& w = *ctx.transport->windows();
  const int n = w.size(), me = w.rank();
  const uint64_t e = w.nextEpoch();
  // Half e & 1 is free: every peer finished reading this rank's epoch e - 1 (and e - 2) before the settle
  // of e - 1 let this rank return, or, where the payloads did not travel, before it published e - 1.
  publish(ctx, w, e, reads.step, mine, out, offered, /*readersCopy=*/reads.at == nullptr);

  thread_local std::vector<HalfSeal> all;  // per thread (eager.h): no allocation per call
  all.resize(size_t(n));
  all[size_t(me)].fingerprint = mine;
  all[size_t(me)].declined = offered ? 0 : 1;
  bool everyone = offered;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    RINGGUARD_RETURN_IF_ERROR(readSeal(ctx, w, e, mine, p, &all[size_t(p)]));
    everyone = everyone && all[size_t(p)].declined == 0;
  }
  // The same error on every rank: the lowest rank against the lowest rank that differs from it.
  for (int r = 1; r < n; ++r) {
    if (!(all[size_t(r)].fingerprint == all[0].fingerprint)) {
      return compareFingerprints(0, all[0].fingerprint, r, all[size_t(r)].fingerprint);
    }
  }
  if (taken != nullptr) *taken = everyone;
  if (!everyone) return Status::ok();  // a payload too large for a window: the caller takes the ring

  in->assign(size_t(n), {});
  if (reads.at != nullptr) reads.at->assign(size_t(n), nullptr);
  Status failure;
  for (int p = 0; p < n && failure.isOk(); ++p) {
    if (p == me) continue;
    std::vector<uint8_t>& own = (*in)[size_t(p)];
    uint8_t* dst = reads.into != nullptr && reads.at == nullptr ? (*reads.into)[size_t(p)] : nullptr;
    if (dst == nullptr && reads.at == nullptr) {
      own.resize(inBytes[size_t(p)]);
      dst = own.data();
    }
    const uint8_t** at = reads.at != nullptr ? &(*reads.at)[size_t(p)] : nullptr;
    RINGGUARD_RETURN_IF_ERROR(
        readPart(ctx, w, e, reads.step, p, inBytes[size_t(p)], dst, at, &own, &failure));
  }
  // A peer that wrote nonsense is not one to settle with: this rank's error goes out as an error frame
  // from the communicator, as a transport error does on every path.
  if (failure.code() == StatusCode::kTransportError) return failure;
  return settle(ctx, w, e, failure);
}

SmallRoute smallRoute(const CollectiveContext& ctx, const Executor& exec, size_t maxPayload,
                      size_t publishBytes) {
  if (runsOneSided(ctx, exec, publishBytes)) return SmallRoute::kWindow;
  return runsEager(ctx, exec, maxPayload) ? SmallRoute::kEager : SmallRoute::kPipeline;
}

Status smallExchange(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& mine,
                     const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                     std::vector<std::vector<uint8_t>>* in, const WindowReads& reads) {
  if (route == SmallRoute::kWindow) return windowExchange(ctx, mine, out, inBytes, in, reads);
  RINGGUARD_RETURN_IF_ERROR(eagerExchange(ctx, mine, out, inBytes, in));
  if (reads.at != nullptr) {
    reads.at->assign(in->size(), nullptr);
    for (size_t p = 0; p < in->size(); ++p) (*reads.at)[p] = (*in)[p].data();
  }
  return Status::ok();
}

Status smallExchangeAll(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& mine,
                        const void* data, size_t bytes, std::vector<std::vector<uint8_t>>* in,
                        const WindowReads& reads) {
  const size_t n = size_t(ctx.transport->size()), me = size_t(ctx.transport->rank());
  thread_local std::vector<EagerPayload> out;  // per thread (eager.h): no allocation per call
  thread_local std::vector<size_t> inBytes;
  out.assign(n, EagerPayload{data, bytes});
  inBytes.assign(n, bytes);
  out[me] = EagerPayload{};
  inBytes[me] = 0;
  return smallExchange(route, ctx, mine, out, inBytes, in, reads);
}

}  // namespace ringguard
