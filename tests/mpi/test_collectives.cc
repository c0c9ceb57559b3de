// Every collective besides allreduce over the MPI transport inside one mpirun: reduce-scatter (every dtype
// and op), all-gather, broadcast from every root, send/recv (ring shift), all-to-all (equal and unequal
// splits), fault-free against closed forms and then with fault injection in every mode (bit-identical,
// detected == injected, escaped == 0). RINGGUARD_TEST_SMOKE=1 runs a subset.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "test_util.h"

namespace ringguard {
namespace {

using testing::expectedResult;
using testing::makeComm;
using testing::makeInput;
using testing::sumOverRanks;
using testing::worldRank;
using testing::worldSize;

bool smoke() {
  const char* s = std::getenv("RINGGUARD_TEST_SMOKE");
  return s && std::string(s) == "1";
}

std::vector<size_t> counts(int n) {
  std::vector<size_t> c = {0, 1, size_t(n) - 1, size_t(n) + 1, 7, 1000, 4099};
  if (smoke()) c = {0, 1, 4099};
  return c;
}

std::vector<uint8_t> pattern(DataType t, int source, size_t count) {
  return makeInput(t, ReduceOp::kSum, source * 5 + 3, count);
}

// One round of every collective on `comm`, each checked against its closed form.
void everyCollective(Communicator& comm, DataType t, size_t count, bool reduceAllOps) {
  const int me = worldRank(), n = worldSize();
  const size_t esize = dataTypeSize(t), bytes = count * esize;
  SCOPED_TRACE(std::string(dataTypeName(t)) + " count=" + std::to_string(count));
  // reduce-scatter
  for (ReduceOp op : kAllReduceOps) {
    if (!reduceAllOps && op != ReduceOp::kSum) continue;
    std::vector<uint8_t> in = makeInput(t, op, me, count * size_t(n)), out(bytes + 1, 0xAB);
    Status st = comm.reduceScatterAsync(in.data(), out.data(), count, t, op)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    std::vector<uint8_t> full = expectedResult(t, op, n, count * size_t(n));
    ASSERT_EQ(std::memcmp(out.data(), full.data() + size_t(me) * bytes, bytes), 0)
        << "reduce_scatter " << reduceOpName(op);
    ASSERT_EQ(out[bytes], 0xAB);
  }
  // all-gather, in place
  {
    std::vector<uint8_t> out(bytes * size_t(n));
    std::vector<uint8_t> mine = pattern(t, me, count);
    if (bytes) std::memcpy(out.data() + size_t(me) * bytes, mine.data(), bytes);
    Status st = comm.allgatherAsync(out.data() + size_t(me) * bytes, out.data(), count, t)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(std::memcmp(out.data() + size_t(r) * bytes, pattern(t, r, count).data(), bytes), 0)
          << "allgather block " << r;
    }
  }
  // broadcast from every root
  for (int root = 0; root < n; ++root) {
    std::vector<uint8_t> buf = me == root ? pattern(t, root, count) : std::vector<uint8_t>(bytes, 0);
    Status st = comm.broadcastAsync(buf.data(), buf.data(), count, t, root)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    ASSERT_TRUE(buf == pattern(t, root, count)) << "broadcast root " << root;
  }
  // send/recv: ring shift
  {
    std::vector<uint8_t> in = pattern(t, me, count), out(bytes);
    const int right = (me + 1) % n, left = (me + n - 1) % n;
    Status st = comm.sendRecvAsync(in.data(), count, right, out.data(), count, left, t)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    ASSERT_TRUE(out == pattern(t, left, count)) << "sendrecv";
  }
  // all-to-all, unequal splits (rank r sends (count + r + p) % 5 elements to p)
  {
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
    std::vector<uint8_t> in, out(r * esize);
    for (int p = 0; p < n; ++p) {
      std::vector<uint8_t> b = pattern(t, me * n + p, sc[p]);
      in.insert(in.end(), b.begin(), b.end());
    }
    Status st = comm.alltoallAsync(in.data(), sc, sd, out.data(), rc, rd, t)->wait();
    ASSERT_TRUE(st.isOk()) << st.toString();
    for (int p = 0; p < n; ++p) {
      ASSERT_EQ(std::memcmp(out.data() + rd[p] * esize, pattern(t, p * n + me, rc[p]).data(), rc[p] * esize),
                0)
          << "alltoall block from " << p;
    }
  }
}

TEST(MpiCollectives, EveryCollectiveDtypeAndCount) {
  Options options;
  options.sliceBytes = 512;  // several slices per block from 1000 elements on
  options.timeout = std::chrono::milliseconds(60000);
  auto comm = makeComm(options);
  for (DataType t : kAllDataTypes) {
    for (size_t count : counts(worldSize())) everyCollective(*comm, t, count, true);
  }
  EXPECT_EQ(comm->counters().detected, 0u);
}

TEST(MpiCollectives, EveryFaultModeBitIdenticalAndDetected) {
  for (FaultMode mode : {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst, FaultMode::kGarbage,
                         FaultMode::kTrailer, FaultMode::kRetransmit, FaultMode::kDelay}) {
    if (smoke() && mode != FaultMode::kBitFlip) continue;
    SCOPED_TRACE(faultModeName(mode));
    Options options;
    options.sliceBytes = 1024;
    options.maxRetries = 5;
    options.timeout = std::chrono::milliseconds(60000);
    options.fault.mode = mode;
    options.fault.probability = 0.1;
    options.fault.seed = 11;
    options.fault.delayMs = 1;
    auto comm = makeComm(options);
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
      everyCollective(*comm, t, 3001, false);
    }
    const Counters c = comm->counters();
    const uint64_t injected = sumOverRanks(c.injected), detected = sumOverRanks(c.detected);
    EXPECT_EQ(sumOverRanks(c.escaped), 0u);
    EXPECT_EQ(detected, injected);
    if (mode == FaultMode::kDelay) {
      EXPECT_GT(sumOverRanks(c.delayed), 0u);
    } else {
      EXPECT_GT(injected, 0u);
    }
  }
}

}  // namespace
}  // namespace ringguard
