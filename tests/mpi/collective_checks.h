#pragma once
// One round of every collective besides allreduce, each checked against its closed form, on host memory
// or (tests/gpu) device memory: the checks are written once over a `Memory` that moves test data in and
// out of the buffers the collective sees.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

namespace ringguard {
namespace testing {

// Where a collective's buffers live. Host: plain vectors. Device: tests/gpu's CUDA memory.
class Memory {
 public:
  virtual ~Memory() = default;
  // A buffer of `bytes` holding `init` (or 0xAB bytes when `init` is empty).
  virtual void* make(size_t bytes, const std::vector<uint8_t>& init) = 0;
  virtual std::vector<uint8_t> read(const void* p, size_t bytes) = 0;
  virtual void* stream() { return nullptr; }  // the caller's stream of the collectives
  virtual void releaseAll() = 0;
};

class HostMemory final : public Memory {
 public:
  void* make(size_t bytes, const std::vector<uint8_t>& init) override {
    bufs_.emplace_back(bytes + 1, uint8_t(0xAB));
    if (!init.empty()) std::memcpy(bufs_.back().data(), init.data(), std::min(bytes, init.size()));
    return bufs_.back().data();
  }
  std::vector<uint8_t> read(const void* p, size_t bytes) override {
    auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + bytes);
  }
  void releaseAll() override { bufs_.clear(); }

 private:
  std::vector<std::vector<uint8_t>> bufs_;
};

// sameBytes and pattern (the copy collectives' inputs): tests/unit/verifiable.h, shared with tests/soak.

inline void everyCollective(Communicator& comm, Memory& mem, DataType t, size_t count, bool reduceAllOps) {
  const int me = worldRank(), n = worldSize();
  const size_t esize = dataTypeSize(t), bytes = count * esize;
  void* stream = mem.stream();
  SCOPED_TRACE(std::string(dataTypeName(t)) + " count=" + std::to_string(count));
  for (ReduceOp op : kAllReduceOps) {
    if (!reduceAllOps && op != ReduceOp::kSum) continue;
    if (!reduceSupported(t, op)) continue;  // float8 is copy-only, bitwise ops integer-only, ...
    void* in = mem.make(bytes * size_t(n), makeInput(t, op, me, count * size_t(n)));
    void* out = mem.make(bytes + 1, {});
    Status st = comm.reduceScatterAsync(in, out, count, t, op, stream)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    std::vector<uint8_t> full = expectedResult(t, op, n, count * size_t(n)), got = mem.read(out, bytes + 1);
    ASSERT_TRUE(sameBytes(got.data(), full.data() + size_t(me) * bytes, bytes))
        << "reduce_scatter " << reduceOpName(op);
    ASSERT_EQ(got[bytes], 0xAB) << "reduce_scatter wrote past its block";
  }
  {  // all-gather, in place
    std::vector<uint8_t> init(bytes * size_t(n), 0);
    std::vector<uint8_t> mine = pattern(t, me, count);
    if (bytes) std::memcpy(init.data() + size_t(me) * bytes, mine.data(), bytes);
    void* out = mem.make(bytes * size_t(n), init);
    Status st =
        comm.allgatherAsync(static_cast<uint8_t*>(out) + size_t(me) * bytes, out, count, t, stream)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    std::vector<uint8_t> got = mem.read(out, bytes * size_t(n));
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(sameBytes(got.data() + size_t(r) * bytes, pattern(t, r, count).data(), bytes))
          << "allgather block " << r;
    }
  }
  for (int root = 0; root < n; ++root) {  // broadcast from every root, out of place
    void* in = mem.make(bytes, me == root ? pattern(t, root, count) : std::vector<uint8_t>(bytes, 0));
    void* out = mem.make(bytes + 1, {});
    Status st = comm.broadcastAsync(in, out, count, t, root, stream)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    std::vector<uint8_t> got = mem.read(out, bytes + 1);
    ASSERT_EQ(std::vector<uint8_t>(got.begin(), got.end() - 1), pattern(t, root, count))
        << "broadcast root " << root;
    ASSERT_EQ(got[bytes], 0xAB) << "broadcast wrote past the result";
  }
  {  // send/recv: ring shift
    void* in = mem.make(bytes, pattern(t, me, count));
    void* out = mem.make(bytes, {});
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    Status st = comm.sendRecvAsync(in, count, right, out, count, left, t, stream)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    ASSERT_EQ(mem.read(out, bytes), pattern(t, left, count)) << "sendrecv";
  }
  {  // grouped send/recv (sendRecvGroupAsync): both ways around the ring, to the right in `t` and to the left
     // in i64 (a dtype per direction), the receives listed first on odd ranks and last on even ones
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    const size_t wide = count + 1;
    void* toRight = mem.make(bytes, pattern(t, me, count));
    void* toLeft = mem.make(wide * 8, pattern(DataType::kInt64, me, wide));
    void* fromLeft = mem.make(bytes, {});
    void* fromRight = mem.make(wide * 8, {});
    std::vector<P2pOp> ops = {P2pOp{P2pOp::Kind::kSend, right, toRight, count, t},
                              P2pOp{P2pOp::Kind::kSend, left, toLeft, wide, DataType::kInt64}};
    const std::vector<P2pOp> recvs = {P2pOp{P2pOp::Kind::kRecv, left, fromLeft, count, t},
                                      P2pOp{P2pOp::Kind::kRecv, right, fromRight, wide, DataType::kInt64}};
    ops.insert(me % 2 == 1 ? ops.begin() : ops.end(), recvs.begin(), recvs.end());
    Status st = comm.sendRecvGroupAsync(ops, stream)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    ASSERT_EQ(mem.read(fromLeft, bytes), pattern(t, left, count)) << "grouped sendrecv from the left";
    ASSERT_EQ(mem.read(fromRight, wide * 8), pattern(DataType::kInt64, right, wide))
        << "grouped sendrecv from the right";
  }
  {  // all-to-all, unequal splits (rank r sends (count + r + p) % 5 + count / 3 elements to rank p)
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    size_t s = 0, r = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = (count + size_t(me + p)) % 5 + count / 3;
      rc[p] = (count + size_t(p + me)) % 5 + count / 3;
      sd[p] = s;
      rd[p] = r;
      s += sc[p];
      r += rc[p];
    }
    std::vector<uint8_t> init;
    for (int p = 0; p < n; ++p) {
      std::vector<uint8_t> b = pattern(t, me * n + p, sc[p]);
      init.insert(init.end(), b.begin(), b.end());
    }
    void* in = mem.make(s * esize, init);
    void* out = mem.make(r * esize, {});
    Status st = comm.alltoallAsync(in, sc, sd, out, rc, rd, t, stream)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    std::vector<uint8_t> got = mem.read(out, r * esize);
    for (int p = 0; p < n; ++p) {
      ASSERT_TRUE(sameBytes(got.data() + rd[p] * esize, pattern(t, p * n + me, rc[p]).data(), rc[p] * esize))
          << "alltoall block from " << p;
    }
  }
  mem.releaseAll();
}

}  // namespace testing
}  // namespace ringguard
