// The one-sided collectives beside the one-shot allreduce (src/cuda/peer/): the two-shot allreduce, the
// all-gather, the broadcast and the reduce-scatter, under mpirun with every rank on the one GPU (run under
// MPS: scripts/gpu_peer_check.sh). Every result is checked bit for bit on every rank: every dtype and op
// against the host reduction in rank order 0..N-1 (the two-shot against the one-shot too), the counts 0, 1,
// odd, not divisible by N and 64 MiB, unaligned buffers, in place; with injected read faults (detected ==
// injected, result exact), inside a CUDA graph replayed with faults; and the failures: ranks that disagree on
// the kernel or the root, and a stopped peer (timeout naming it). The arrival kernel (arrival.cu) before the
// grids: the same results, and the same failures found there.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/fingerprint.h"
#include "core/reduce.h"
#include "core/trace_events.h"
#include "peer_test_util.h"
#include "ringguard/observability/observability.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/device_factory.h"

namespace ringguard {
namespace peer {
namespace {

// Every op the engine has, premul_sum with a factor included.
std::vector<ReduceOp> everyOp() {
  std::vector<ReduceOp> ops(std::begin(kAllReduceOps), std::end(kAllReduceOps));
  ReduceOp premul = ReduceOp::kSum;
  EXPECT_TRUE(makePremulSum(0.75, &premul).isOk());
  ops.push_back(premul);
  return ops;
}

// rank r's float i: (r + 1) * (i % 251 + 1) - 126, an integer, so every order of summing gives the same bits.
std::vector<float> integerFloats(int r, size_t count, size_t offset = 0) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float((r + 1) * int((i + offset) % 251 + 1) - 126);
  return v;
}

// `inputs[p]` reduced over p = 0..N-1 in order, as the kernels do (core/reduce.h's reduceHost).
std::vector<uint8_t> rankOrderReduce(DataType t, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                                     size_t from, size_t count) {
  const size_t e = dataTypeSize(t);
  const int size = int(inputs.size());
  std::vector<uint8_t> want(inputs[0].begin() + long(from * e), inputs[0].begin() + long((from + count) * e));
  for (int p = 1; p < size; ++p) {
    reduceHost(t, op, want.data(), inputs[size_t(p)].data() + from * e, want.data(), count, p == size - 1,
               size, p == 1);
  }
  if (size == 1 && baseOp(op) == ReduceOp::kAvg) divideHost(t, want.data(), count, 1);
  return want;
}

// ---- all-to-all helpers ---------------------------------------------------------------------------------

// counts[p][q]: elements rank p sends rank q, the same matrix on every rank.
using Splits = std::vector<std::vector<size_t>>;

Splits equalSplits(int size, size_t count) {
  return Splits(size_t(size), std::vector<size_t>(size_t(size), count));
}

// Random counts up to `most`, a quarter of them zero (blocks of nothing), from `seed` (alike on every rank).
Splits randomSplits(int size, uint32_t seed, size_t most) {
  std::mt19937 gen(seed);
  Splits m = equalSplits(size, 0);
  for (auto& row : m)
    for (size_t& c : row) c = gen() % 4 == 0 ? 0 : gen() % (most + 1);
  return m;
}

// Rank r's arguments for `m`: its row as sendCounts, its column as recvCounts, blocks in rank order `gap`
// elements apart (displacements need not be packed).
struct AlltoallBuffers {
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  size_t sendTotal = 0, recvTotal = 0;  // elements the buffers hold
};
AlltoallBuffers layoutOf(const Splits& m, int r, size_t gap) {
  AlltoallBuffers l;
  for (size_t p = 0; p < m.size(); ++p) {
    l.sendCounts.push_back(m[size_t(r)][p]);
    l.sendDispls.push_back(l.sendTotal);
    l.sendTotal += m[size_t(r)][p] + gap;
    l.recvCounts.push_back(m[p][size_t(r)]);
    l.recvDispls.push_back(l.recvTotal);
    l.recvTotal += m[p][size_t(r)] + gap;
  }
  return l;
}

// The block rank p sends rank q: random bits of `t`, different for every pair.
std::vector<uint8_t> blockOf(DataType t, size_t count, int p, int q) {
  return randomInput(t, count, p, 7919u * uint32_t(q) + 3u);
}

class PeerCollectives : public PeerWindowTest {
 protected:
  Status allreduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                   PeerAlgorithm algorithm, double faultProb = 0) {
    auto a = windowArgs<PeerAllreduceArgs>(CollectiveKind::kAllreduce, t, op, count);
    a.send = send;
    a.recv = recv;
    a.count = count;
    a.dtype = t;
    a.op = op;
    a.algorithm = algorithm;
    a.fault.probability = faultProb;
    a.fault.seed = 17 + uint32_t(rank());
    return launchPeerAllreduce(a, stream_);
  }
  Status allgather(const void* send, void* recv, size_t count, DataType t, double faultProb = 0) {
    auto a = windowArgs<PeerAllgatherArgs>(CollectiveKind::kAllgather, t, ReduceOp::kSum, count);
    a.send = send;
    a.recv = recv;
    a.count = count;
    a.dtype = t;
    a.fault.probability = faultProb;
    a.fault.seed = 23 + uint32_t(rank());
    return launchPeerAllgather(a, stream_);
  }
  Status broadcast(const void* send, void* recv, size_t count, DataType t, int root, double faultProb = 0) {
    auto a = windowArgs<PeerBroadcastArgs>(CollectiveKind::kBroadcast, t, ReduceOp::kSum, count, root);
    a.send = send;
    a.recv = recv;
    a.count = count;
    a.dtype = t;
    a.root = root;
    a.fault.probability = faultProb;
    a.fault.seed = 29 + uint32_t(rank());
    return launchPeerBroadcast(a, stream_);
  }
  Status reduceScatter(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                       double faultProb = 0) {
    auto a = windowArgs<PeerReduceScatterArgs>(CollectiveKind::kReduceScatter, t, op, count);
    a.send = send;
    a.recv = recv;
    a.count = count;
    a.dtype = t;
    a.op = op;
    a.fault.probability = faultProb;
    a.fault.seed = 31 + uint32_t(rank());
    return launchPeerReduceScatter(a, stream_);
  }

  Status alltoall(const void* send, void* recv, const AlltoallBuffers& l, DataType t, bool splits,
                  double faultProb = 0, uint64_t timeoutNs = 0) {
    auto a = windowArgs<PeerAlltoallArgs>(CollectiveKind::kAlltoall, t, ReduceOp::kSum,
                                          splits ? 0 : l.sendCounts[0]);
    a.send = send;
    a.recv = recv;
    for (size_t p = 0; p < l.sendCounts.size(); ++p) {
      a.sendCounts[p] = l.sendCounts[p];
      a.sendDispls[p] = l.sendDispls[p];
      a.recvCounts[p] = l.recvCounts[p];
      a.recvDispls[p] = l.recvDispls[p];
    }
    a.dtype = t;
    a.splits = splits;
    a.fault.probability = faultProb;
    a.fault.seed = 37 + uint32_t(rank());
    if (timeoutNs != 0) a.timeoutNs = timeoutNs;
    return launchPeerAlltoall(a, stream_);
  }

  // A split all-to-all of `l` that every rank must fail with `code` about rank 0's block for rank 1 (the
  // sender, the receiver): launched with a 5 s deadline, waited for; the record, for the fields that differ.
  const ErrorRecord* splitAlltoallFailing(const AlltoallBuffers& l, PeerError code) {
    DeviceBuffer in(l.sendTotal * 4), out(l.recvTotal * 4);
    EXPECT_TRUE(
        alltoall(in.get(), out.get(), l, DataType::kFloat32, true, 0, 5ull * 1000 * 1000 * 1000).isOk());
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_EQ(rec->code, uint32_t(code)) << "code " << rec->code << " peer " << rec->peer;
    EXPECT_EQ(rec->peer, 0);    // the sender
    EXPECT_EQ(rec->chunk, 1u);  // the receiver
    return rec;
  }

  // This rank's input for `m` (block q at sendDispls[q]) and the output it must get (block from p at
  // recvDispls[p]; the gaps between blocks keep the poison 0xff).
  void alltoallData(const Splits& m, DataType t, const AlltoallBuffers& l, std::vector<uint8_t>* in,
                    std::vector<uint8_t>* want) const {
    const size_t e = dataTypeSize(t);
    in->assign(l.sendTotal * e, 0);
    want->assign(l.recvTotal * e, 0xff);
    for (int q = 0; q < size(); ++q) {
      const std::vector<uint8_t> b = blockOf(t, l.sendCounts[size_t(q)], rank(), q);
      std::copy(b.begin(), b.end(), in->begin() + long(l.sendDispls[size_t(q)] * e));
    }
    for (int p = 0; p < size(); ++p) {
      const std::vector<uint8_t> b = blockOf(t, l.recvCounts[size_t(p)], p, rank());
      std::copy(b.begin(), b.end(), want->begin() + long(l.recvDispls[size_t(p)] * e));
    }
  }

  // An all-to-all of `m` in either form, `offset` bytes into fresh buffers (unaligned when not a multiple of
  // 16), blocks `gap` elements apart, checked byte for byte, gaps included; faults at `faultProb`.
  void alltoallExact(const Splits& m, DataType t, bool splits, size_t gap, size_t offset,
                     double faultProb = 0) {
    const AlltoallBuffers l = layoutOf(m, rank(), gap);
    std::vector<uint8_t> in, want;
    alltoallData(m, t, l, &in, &want);
    DeviceBuffer din(in.size() + offset), dout(want.size() + offset);
    ASSERT_EQ(upload(din.get() + offset, in.data(), in.size()), cudaSuccess);
    ASSERT_EQ(fill(dout.get(), 0xff, want.size() + offset + 64), cudaSuccess);
    Status st = alltoall(din.get() + offset, dout.get() + offset, l, t, splits, faultProb);
    ASSERT_TRUE(st.isOk()) << st.toString();
    const std::string what = std::string("alltoall ") + (splits ? "splits " : "equal ") + dataTypeName(t) +
                             " gap " + std::to_string(gap) + " offset " + std::to_string(offset) +
                             " blocks from rank 0 " + std::to_string(l.recvCounts[0]);
    expectClean(what.c_str());
    const std::vector<uint8_t> got = toHost(dout.get() + offset, want.size());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << what;
  }

  // An fp32 allreduce of integer-valued floats `offset` bytes into fresh buffers (16-byte aligned or not, in
  // place or not) with `algorithm`, checked exactly; faults at `faultProb`.
  void allreduceExact(size_t count, size_t offset, bool inPlace, PeerAlgorithm algorithm,
                      double faultProb = 0) {
    const size_t bytes = count * 4;
    DeviceBuffer in(bytes), out(bytes);
    const std::vector<float> mine = integerFloats(rank(), count);
    ASSERT_EQ(upload(in.get() + offset, mine.data(), bytes), cudaSuccess);
    ASSERT_EQ(fill(out.get(), 0xff, bytes + 64), cudaSuccess);  // poisoned: every element is written
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    char* dst = inPlace ? in.get() + offset : out.get() + offset;
    Status st =
        allreduce(in.get() + offset, dst, count, DataType::kFloat32, ReduceOp::kSum, algorithm, faultProb);
    ASSERT_TRUE(st.isOk()) << st.toString();
    const std::string what = "allreduce " + std::to_string(count) + " offset " + std::to_string(offset) +
                             (inPlace ? " in place" : "") + " algorithm " + std::to_string(int(algorithm));
    expectClean(what.c_str());
    std::vector<float> want(count, 0.f);
    for (int r = 0; r < size(); ++r) {
      const std::vector<float> x = integerFloats(r, count);
      for (size_t i = 0; i < count; ++i) want[i] += x[i];
    }
    const std::vector<uint8_t> got = toHost(dst, bytes);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << what;
  }

  // Four rounds of an all-gather, a broadcast (from each root in turn) and a reduce-scatter of 2^18 floats
  // with 2 % of chunk reads damaged: every result checked, detected == injected.
  void gatherBroadcastReduceScatterWithFaults() {
    const size_t count = size_t(1) << 18, bytes = count * 4;
    DeviceBuffer in(bytes * size_t(size())), out(bytes * size_t(size()));
    std::vector<float> mine(count * size_t(size()));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = float((rank() + 1) * int(i % 97));
    ASSERT_EQ(upload(in.get(), mine.data(), mine.size() * 4), cudaSuccess);
    const unsigned long long before = windows_->errorRecord()->injected;
    for (int round = 0; round < 4; ++round) {
      ASSERT_TRUE(allgather(in.get(), out.get(), count, DataType::kFloat32, 0.02).isOk());
      expectClean("allgather with faults");
      std::vector<float> got(count * size_t(size()));
      ASSERT_EQ(cudaMemcpy(got.data(), out.get(), got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int p = 0; p < size(); ++p)
        for (size_t i = 0; i < count; i += 101)
          ASSERT_EQ(got[size_t(p) * count + i], float((p + 1) * int(i % 97)))
              << "allgather p " << p << " i " << i;

      const int root = round % size();
      ASSERT_TRUE(broadcast(in.get(), out.get(), count, DataType::kFloat32, root, 0.02).isOk());
      expectClean("broadcast with faults");
      ASSERT_EQ(cudaMemcpy(got.data(), out.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(got[i], float((root + 1) * int(i % 97))) << "broadcast " << i;

      ASSERT_TRUE(reduceScatter(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, 0.02).isOk());
      expectClean("reduce_scatter with faults");
      ASSERT_EQ(cudaMemcpy(got.data(), out.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      const int sum = size() * (size() + 1) / 2;
      for (size_t i = 0; i < count; ++i) {
        const size_t j = size_t(rank()) * count + i;
        ASSERT_EQ(got[i], float(sum * int(j % 97))) << "reduce_scatter " << i;
      }
    }
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_GT(rec->injected, before);
    EXPECT_EQ(rec->detected, rec->injected);
  }
};

// ---- memory-order scope ---------------------------------------------------------------------------------

// Every rank of this suite maps its window on device 0, so the kernels order at GPU scope; the system-scope
// path (GPUs of one host) runs here too and gives the same bits, with faults re-read.
TEST_F(PeerCollectives, GpuScopeOnOneDeviceAndSystemScopeAreBothExact) {
  ASSERT_TRUE(windows_->oneDevice());
  for (bool system : {false, true}) {
    systemScope_ = system;
    for (PeerAlgorithm algorithm : {PeerAlgorithm::kAllreduceOneShot, PeerAlgorithm::kAllreduceTwoShot}) {
      allreduceExact(size_t(1) << 18, 0, false, algorithm, 0.001);
      allreduceExact(1000, 4, true, algorithm);
    }
  }
}

// ---- two-shot allreduce -------------------------------------------------------------------------------

TEST_F(PeerCollectives, TwoShotExactForEveryShape) {
  // 0, 1, odd, not divisible by N (nor by a chunk), fewer chunks than ranks, many, 64 MiB.
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(255), size_t(1000), size_t(256 * 3 + 1),
                       size_t(256 * 7 + 5), size_t(1) << 20, (size_t(1) << 20) + 3, size_t(16) << 20}) {
    allreduceExact(count, 0, false, PeerAlgorithm::kAllreduceTwoShot);
    allreduceExact(count, 0, true, PeerAlgorithm::kAllreduceTwoShot);
    allreduceExact(count, 4, false, PeerAlgorithm::kAllreduceTwoShot);  // not 16-byte aligned
  }
}

// The two-shot reduces every element as the one-shot does (rank order 0..N-1): for every dtype and op both
// equal the host reduction in that order, NaN-free random inputs whose sums depend on the order.
TEST_F(PeerCollectives, TwoShotEqualsOneShotAndTheHostForEveryDtypeAndOp) {
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : everyOp()) {
      if (!reduceSupported(t, op)) continue;
      for (size_t count : {size_t(1), size_t(333), size_t(4099), size_t(70001)}) {
        const size_t bytes = count * dataTypeSize(t);
        std::vector<std::vector<uint8_t>> inputs;
        for (int p = 0; p < size(); ++p) inputs.push_back(randomInput(t, count, p, uint32_t(baseOp(op))));
        const std::vector<uint8_t> want = rankOrderReduce(t, op, inputs, 0, count);
        DeviceBuffer in(bytes), one(bytes), two(bytes);
        ASSERT_EQ(upload(in.get(), inputs[size_t(rank())].data(), bytes), cudaSuccess);
        ASSERT_TRUE(allreduce(in.get(), one.get(), count, t, op, PeerAlgorithm::kAllreduceOneShot).isOk());
        ASSERT_TRUE(allreduce(in.get(), two.get(), count, t, op, PeerAlgorithm::kAllreduceTwoShot).isOk());
        const std::string what =
            std::string(dataTypeName(t)) + " " + reduceOpName(op) + " count " + std::to_string(count);
        expectClean(what.c_str());
        EXPECT_EQ(toHost(one.get(), bytes), want) << "one-shot " << what;
        EXPECT_EQ(toHost(two.get(), bytes), want) << "two-shot " << what;
      }
    }
  }
}

TEST_F(PeerCollectives, TwoShotReadFaultsAreDetectedAndTheResultIsExact) {
  for (size_t count : {size_t(4096), size_t(1) << 20, size_t(16) << 20})
    allreduceExact(count, 0, false, PeerAlgorithm::kAllreduceTwoShot, 0.01);
  const ErrorRecord* rec = windows_->errorRecord();
  EXPECT_GT(rec->injected, 0u);
  EXPECT_EQ(rec->detected, rec->injected);
}

// Ranks whose thresholds differ run different kernels for one call: every rank fails (a fingerprint
// mismatch on one at least, the others naming a failed peer or the mismatch), none returns.
TEST_F(PeerCollectives, RanksRunningDifferentAllreduceKernelsAllFail) {
  const size_t count = 1 << 16;
  DeviceBuffer in(count * 4), out(count * 4);
  ASSERT_EQ(fill(in.get(), 0, count * 4), cudaSuccess);
  auto a =
      windowArgs<PeerAllreduceArgs>(CollectiveKind::kAllreduce, DataType::kFloat32, ReduceOp::kSum, count);
  a.send = in.get();
  a.recv = out.get();
  a.count = count;
  a.algorithm = rank() == 0 ? PeerAlgorithm::kAllreduceOneShot : PeerAlgorithm::kAllreduceTwoShot;
  a.timeoutNs = 5ull * 1000 * 1000 * 1000;
  ASSERT_TRUE(launchPeerAllreduce(a, stream_).isOk());
  expectEveryRankFailedOnAMismatch();
}

// ---- all-gather ---------------------------------------------------------------------------------------

TEST_F(PeerCollectives, AllgatherExactForEveryDtypeAndShape) {
  for (DataType t : kAllDataTypes) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(333), size_t(4099)}) {
      const size_t bytes = count * dataTypeSize(t);
      std::vector<uint8_t> want;
      for (int p = 0; p < size(); ++p) {
        const std::vector<uint8_t> x = randomInput(t, count, p, 5);
        want.insert(want.end(), x.begin(), x.end());
      }
      DeviceBuffer in(bytes), out(bytes * size_t(size()));
      const std::vector<uint8_t> mine = randomInput(t, count, rank(), 5);
      ASSERT_EQ(upload(in.get(), mine.data(), bytes), cudaSuccess);
      ASSERT_EQ(fill(out.get(), 0xff, bytes * size_t(size())), cudaSuccess);
      ASSERT_TRUE(allgather(in.get(), out.get(), count, t).isOk());
      const std::string what =
          std::string("allgather ") + dataTypeName(t) + " count " + std::to_string(count);
      expectClean(what.c_str());
      EXPECT_EQ(toHost(out.get(), bytes * size_t(size())), want) << what;
    }
  }
}

TEST_F(PeerCollectives, AllgatherLargeUnalignedAndInPlace) {
  for (size_t count : {size_t(1) << 20, (size_t(1) << 20) + 3, size_t(16) << 20}) {  // 16 Mi floats: 64 MiB
    const size_t bytes = count * 4, total = bytes * size_t(size());
    DeviceBuffer in(bytes), out(total);
    std::vector<uint8_t> want;
    for (int p = 0; p < size(); ++p) {
      const std::vector<float> x = integerFloats(p, count);
      const uint8_t* b = reinterpret_cast<const uint8_t*>(x.data());
      want.insert(want.end(), b, b + bytes);
    }
    const std::vector<float> mine = integerFloats(rank(), count);
    // Out of place, the output 4 bytes off 16-byte alignment.
    ASSERT_EQ(upload(in.get(), mine.data(), bytes), cudaSuccess);
    ASSERT_TRUE(allgather(in.get(), out.get() + 4, count, DataType::kFloat32).isOk());
    expectClean("allgather out of place");
    EXPECT_EQ(toHost(out.get() + 4, total), want) << "count " << count;
    // In place: send is this rank's block of recv.
    char* block = out.get() + size_t(rank()) * bytes;
    ASSERT_EQ(fill(out.get(), 0xff, total), cudaSuccess);
    ASSERT_EQ(upload(block, mine.data(), bytes), cudaSuccess);
    ASSERT_TRUE(allgather(block, out.get(), count, DataType::kFloat32).isOk());
    expectClean("allgather in place");
    EXPECT_EQ(toHost(out.get(), total), want) << "in place, count " << count;
  }
}

// ---- broadcast ----------------------------------------------------------------------------------------

TEST_F(PeerCollectives, BroadcastExactFromEveryRoot) {
  for (int root = 0; root < size(); ++root) {
    for (DataType t : {DataType::kFloat32, DataType::kUint8, DataType::kComplex128}) {
      for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(4099), size_t(1) << 20}) {
        const size_t bytes = count * dataTypeSize(t);
        const std::vector<uint8_t> want = randomInput(t, count, root, 9);
        DeviceBuffer in(bytes), out(bytes);
        if (rank() == root) {
          ASSERT_EQ(upload(in.get(), want.data(), bytes), cudaSuccess);
        }
        ASSERT_EQ(fill(out.get(), 0xff, bytes + 64), cudaSuccess);
        ASSERT_TRUE(broadcast(in.get(), out.get() + 1, count, t, root).isOk());  // output unaligned
        const std::string what = "broadcast root " + std::to_string(root) + " " + dataTypeName(t) +
                                 " count " + std::to_string(count);
        expectClean(what.c_str());
        EXPECT_EQ(toHost(out.get() + 1, bytes), want) << what;
        // In place on the root: recv == send.
        char* buf = rank() == root ? in.get() : out.get();
        ASSERT_TRUE(broadcast(buf, buf, count, t, root).isOk());
        expectClean(what.c_str());
        EXPECT_EQ(toHost(buf, bytes), want) << "in place, " << what;
      }
    }
  }
  // 64 MiB from the last rank.
  const size_t count = size_t(16) << 20, bytes = count * 4;
  const int root = size() - 1;
  const std::vector<float> want = integerFloats(root, count);
  DeviceBuffer buf(bytes);
  ASSERT_EQ(fill(buf.get(), 0, bytes), cudaSuccess);
  if (rank() == root) {
    ASSERT_EQ(upload(buf.get(), want.data(), bytes), cudaSuccess);
  }
  ASSERT_TRUE(broadcast(buf.get(), buf.get(), count, DataType::kFloat32, root).isOk());
  expectClean("broadcast 64 MiB");
  const std::vector<uint8_t> got = toHost(buf.get(), bytes);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0);
}

// Ranks that disagree on the root (here: each rank believes it is the root, so nobody reads anything): every
// rank fails at the arrival check with a fingerprint mismatch, none returns its own bytes as the result.
TEST_F(PeerCollectives, RanksThatDisagreeOnTheRootAllFail) {
  const size_t count = 4096;
  DeviceBuffer buf(count * 4);
  ASSERT_EQ(fill(buf.get(), 0, count * 4), cudaSuccess);
  auto a = windowArgs<PeerBroadcastArgs>(CollectiveKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum,
                                         count, rank());
  a.send = a.recv = buf.get();
  a.count = count;
  a.root = rank();
  a.timeoutNs = 5ull * 1000 * 1000 * 1000;
  ASSERT_TRUE(launchPeerBroadcast(a, stream_).isOk());
  expectEveryRankFailedOnAMismatch(/*checkSomeRankSawIt=*/false);
}

// ---- reduce-scatter -----------------------------------------------------------------------------------

TEST_F(PeerCollectives, ReduceScatterEqualsTheHostForEveryDtypeAndOp) {
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : everyOp()) {
      if (!reduceSupported(t, op)) continue;
      // Shares smaller than a chunk, straddling chunks, and several chunks long.
      for (size_t count : {size_t(1), size_t(3), size_t(333), size_t(1025)}) {
        const size_t e = dataTypeSize(t), total = count * size_t(size());
        std::vector<std::vector<uint8_t>> inputs;
        for (int p = 0; p < size(); ++p)
          inputs.push_back(randomInput(t, total, p, 40u + uint32_t(baseOp(op))));
        const std::vector<uint8_t> want = rankOrderReduce(t, op, inputs, size_t(rank()) * count, count);
        DeviceBuffer in(total * e), out(count * e);
        ASSERT_EQ(upload(in.get(), inputs[size_t(rank())].data(), total * e), cudaSuccess);
        ASSERT_EQ(fill(out.get(), 0xff, count * e + 64), cudaSuccess);
        ASSERT_TRUE(reduceScatter(in.get(), out.get(), count, t, op).isOk());
        const std::string what = std::string("reduce_scatter ") + dataTypeName(t) + " " + reduceOpName(op) +
                                 " count " + std::to_string(count);
        expectClean(what.c_str());
        EXPECT_EQ(toHost(out.get(), count * e), want) << what;
      }
    }
  }
}

TEST_F(PeerCollectives, ReduceScatterExactForEveryShape) {
  for (size_t count :
       {size_t(0), size_t(1), size_t(7), size_t(257), size_t(1) << 18, (size_t(16) << 20) / 4 + 1}) {
    const size_t total = count * size_t(size());
    if (total * 4 > kCapacity) continue;  // the whole input must fit one window
    std::vector<float> want(count, 0.f);
    for (int p = 0; p < size(); ++p) {
      const std::vector<float> x = integerFloats(p, count, size_t(rank()) * count);
      for (size_t i = 0; i < count; ++i) want[i] += x[i];
    }
    DeviceBuffer in(total * 4), out(count * 4);
    std::vector<float> mine(total);
    for (int b = 0; b < size(); ++b) {
      const std::vector<float> x = integerFloats(rank(), count, size_t(b) * count);
      std::copy(x.begin(), x.end(), mine.begin() + long(size_t(b) * count));
    }
    ASSERT_EQ(upload(in.get(), mine.data(), total * 4), cudaSuccess);
    // Out of place, output unaligned.
    ASSERT_TRUE(reduceScatter(in.get(), out.get() + 4, count, DataType::kFloat32, ReduceOp::kSum).isOk());
    expectClean("reduce_scatter out of place");
    std::vector<uint8_t> got = toHost(out.get() + 4, count * 4);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), count * 4), 0) << "count " << count;
    // In place: recv is this rank's block of send.
    char* block = in.get() + size_t(rank()) * count * 4;
    ASSERT_TRUE(reduceScatter(in.get(), block, count, DataType::kFloat32, ReduceOp::kSum).isOk());
    expectClean("reduce_scatter in place");
    got = toHost(block, count * 4);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), count * 4), 0) << "in place, count " << count;
  }
}

// ---- faults and graphs for all of them ----------------------------------------------------------------

TEST_F(PeerCollectives, ReadFaultsOfEveryCollectiveAreDetectedAndResultsExact) {
  gatherBroadcastReduceScatterWithFaults();
}

// The arrival kernel before every collective's grid (RINGGUARD_PEER_ARRIVAL_BYTES): the same exact results
// with faults, in place, unaligned, count 0, both allreduce kernels, both all-to-all forms, inside a graph;
// and ranks that differ (only rank 0 arrives first) still agree, since either way every grid finds every
// peer's arrival.
TEST_F(PeerCollectives, ArrivalKernelFirstEveryCollectiveExact) {
  arriveFirst_ = true;
  for (PeerAlgorithm algorithm : {PeerAlgorithm::kAllreduceOneShot, PeerAlgorithm::kAllreduceTwoShot}) {
    allreduceExact(size_t(1) << 18, 0, false, algorithm, 0.01);
    allreduceExact(1000, 4, true, algorithm);
    allreduceExact(0, 0, false, algorithm);
  }
  gatherBroadcastReduceScatterWithFaults();
  alltoallExact(equalSplits(size(), 4099), DataType::kFloat32, /*splits=*/false, 0, 0, 0.01);
  alltoallExact(randomSplits(size(), 5, 5000), DataType::kFloat32, /*splits=*/true, 3, 4, 0.01);

  const size_t count = size_t(1) << 16, bytes = count * 4;
  DeviceBuffer in(bytes), out(bytes);
  const std::vector<float> mine = integerFloats(rank(), count);
  std::vector<float> want(count, 0.f);
  for (int r = 0; r < size(); ++r) {
    const std::vector<float> x = integerFloats(r, count);
    for (size_t i = 0; i < count; ++i) want[i] += x[i];
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_TRUE(allreduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum,
                        PeerAlgorithm::kAllreduceTwoShot, 0.02)
                  .isOk());
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 10; ++replay) {
    ASSERT_EQ(cudaMemcpyAsync(in.get(), mine.data(), bytes, cudaMemcpyHostToDevice, stream_), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(out.get(), 0xff, bytes, stream_), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    expectClean("graph replay behind the arrival kernel");
    const std::vector<uint8_t> got = toHost(out.get(), bytes);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  arriveFirst_ = rank() == 0;
  for (PeerAlgorithm algorithm : {PeerAlgorithm::kAllreduceOneShot, PeerAlgorithm::kAllreduceTwoShot})
    allreduceExact(size_t(1) << 18, 0, false, algorithm, 0.01);
  EXPECT_EQ(windows_->errorRecord()->detected, windows_->errorRecord()->injected);
}

// Ranks that make different calls fail in the arrival kernel (every rank, none waits for its deadline), a
// stopped peer is named there at the deadline, an abort releases it (and one requested before the call ends
// the first kernel at entry), and a call declined on one rank fails
// the others there at once; the grids behind it then end at once (the streams drain) without publishing.
// Fresh windows for each: a failed rank's error word stays set.
TEST_F(PeerCollectives, TheArrivalKernelFailsRanksThatDisagreeNamesAStoppedPeerAndEndsOnAbort) {
  arriveFirst_ = true;
  const size_t count = 4096 + size_t(rank()) * 1024;
  DeviceBuffer in(count * 4), out(count * 4);
  ASSERT_EQ(fill(in.get(), 0, count * 4), cudaSuccess);
  auto launch = [&](size_t n, uint64_t timeoutNs) {
    auto a = windowArgs<PeerAllreduceArgs>(CollectiveKind::kAllreduce, DataType::kFloat32, ReduceOp::kSum, n);
    a.send = in.get();
    a.recv = out.get();
    a.count = n;
    a.algorithm = PeerAlgorithm::kAllreduceTwoShot;
    a.timeoutNs = timeoutNs;
    return launchPeerAllreduce(a, stream_);
  };
  const auto freshWindows = [&] {
    windows_.reset();
    const Status made = PeerWindows::create(*bootstrap_, 0, 1 << 20, &windows_);
    ASSERT_TRUE(made.isOk()) << made.toString();
  };
  const auto msSince = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  // What says the arrival kernel, not the grid, found it: the error came from an arrival wait (no chunk) of
  // the first collective on these windows, and this rank published no chunk of it (its grid, which publishes
  // before it reads, never got to: every entry of both tables of half 1 still holds epoch 0).
  const auto publishedNothing = [&](size_t n, const char* what) {
    const WindowLayout l = windows_->layout();
    const size_t entries = chunkCount(n * 4);
    for (size_t offset : {l.tableOffset[1], l.resultTableOffset[1]}) {
      const std::vector<uint8_t> table =
          toHost(static_cast<char*>(windows_->window(rank())) + offset, entries * sizeof(ChunkEntry));
      for (size_t c = 0; c < entries; ++c) {
        ChunkEntry e;
        std::memcpy(&e, table.data() + c * sizeof e, sizeof e);
        EXPECT_EQ(e.epoch, 0u) << what << ": chunk " << c << " published";
      }
    }
  };
  const auto foundBeforeTheGrid = [&](size_t n, const char* what) {
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_EQ(rec->chunk, ~0u) << what << ": chunk " << rec->chunk;
    EXPECT_EQ(rec->epoch, 1u) << what;
    publishedNothing(n, what);
  };
  // Different counts: every rank fails at once (5 s deadline).
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launch(count, 5ull * 1000 * 1000 * 1000).isOk());
  expectEveryRankFailedOnAMismatch();
  EXPECT_LT(msSince(t0), 4000.0) << "a mismatch waited for the deadline";
  foundBeforeTheGrid(count, "mismatch");

  // A stopped peer: every other rank's arrival kernel waits for it alone, so a timeout naming it.
  const int stopped = size() - 1;
  ASSERT_NO_FATAL_FAILURE(freshWindows());
  if (rank() != stopped) {  // EXPECTs only from here to the barrier: every rank must reach it
    t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(launch(4096, 300ull * 1000 * 1000).isOk());
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_EQ(rec->code, uint32_t(PeerError::kTimeout));
    EXPECT_EQ(rec->peer, stopped);
    EXPECT_LT(msSince(t0), 5000.0);
    foundBeforeTheGrid(4096, "stopped peer");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // An abort of a rank whose peers never come (20 s deadline: only the abort ends it sooner).
  ASSERT_NO_FATAL_FAILURE(freshWindows());
  if (rank() == 0) {  // EXPECTs only, as above
    EXPECT_TRUE(launch(4096, 20ull * 1000 * 1000 * 1000).isOk());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t0 = std::chrono::steady_clock::now();
    *reinterpret_cast<volatile uint32_t*>(&windows_->errorRecord()->abortRequested) = 1;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(windows_->errorRecord()->code, uint32_t(PeerError::kAborted));
    EXPECT_LT(msSince(t0), 1000.0);
    foundBeforeTheGrid(4096, "abort");
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // An abort before the call (PeerPath::abort: the record's word, and the mark abort_mark.cu leaves in the
  // rank's own error word; what the replica check's gate relies on: kernels queued behind it start after the
  // abort): the aborted rank's first kernel, the arrival kernel or the grid itself, ends at its entry and
  // publishes nothing; the others fail at once naming it.
  for (const bool arrival : {true, false}) {
    arriveFirst_ = arrival;
    ASSERT_NO_FATAL_FAILURE(freshWindows());
    if (rank() == 0) {  // EXPECTs only before the barrier: every rank must reach it
      *reinterpret_cast<volatile uint32_t*>(&windows_->errorRecord()->abortRequested) = 1;
      EXPECT_TRUE(launchPeerAbortMark(windows_->window(0), stream_).isOk());
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(launch(4096, 20ull * 1000 * 1000 * 1000).isOk());
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_LT(msSince(t0), 4000.0) << "arrival kernel " << arrival;
    if (rank() == 0) {
      uint32_t word = 0;
      EXPECT_EQ(cudaMemcpy(&word, static_cast<char*>(windows_->window(0)) + kErrorOffset, sizeof word,
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(word, uint32_t(PeerError::kAborted));
      publishedNothing(4096, arrival ? "aborted before the arrival kernel" : "aborted before the grid");
    } else {
      EXPECT_EQ(windows_->errorRecord()->code, uint32_t(PeerError::kPeerFailed))
          << "arrival kernel " << arrival;
      EXPECT_EQ(windows_->errorRecord()->peer, 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  arriveFirst_ = true;

  // A call rank 0 declined (its own checks rejected it, decline.cu): the others' arrival kernels see its
  // arrival with the declined fingerprint and fail at once naming it.
  ASSERT_NO_FATAL_FAILURE(freshWindows());
  t0 = std::chrono::steady_clock::now();
  if (rank() == 0) {
    auto a =
        windowArgs<PeerWindowArgs>(CollectiveKind::kAllreduce, DataType::kUint8, ReduceOp::kSum, 0, kNoRoot);
    a.fingerprint[0] |= uint32_t(kFingerprintInvalidInput) << 8;
    a.timeoutNs = 5ull * 1000 * 1000 * 1000;
    EXPECT_TRUE(launchPeerDecline(a, stream_).isOk());
  } else {
    EXPECT_TRUE(launch(4096, 5ull * 1000 * 1000 * 1000).isOk());
  }
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(windows_->errorRecord()->code, uint32_t(PeerError::kFingerprintMismatch));
  if (rank() != 0) {
    EXPECT_EQ(windows_->errorRecord()->peer, 0);
    foundBeforeTheGrid(4096, "declined on rank 0");
  }
  EXPECT_LT(msSince(t0), 4000.0) << "a declined call waited for the deadline";
  MPI_Barrier(MPI_COMM_WORLD);
}

// Every RINGGUARD_FAULT_MODE on the device path (core/peer_fault.h): damaged bits, bursts, garbage, the CRC
// or the fingerprint compared against, a corruption repeated on the re-read: each damaged read is caught and
// re-read (detected == injected), the results stay exact. delay: a producer publishes late, nothing is
// damaged or counted. A corruption that lasts past every re-read fails every collective naming a peer.
TEST_F(PeerCollectives, EveryFaultModeIsCaughtAndResultsStayExact) {
  for (uint8_t mode : kDamagingFaultModes) {
    fault_ = PeerFault{};
    fault_.mode = mode;
    fault_.bits = 5;
    fault_.burstBits = 12;
    const unsigned long long before = windows_->errorRecord()->injected;
    for (PeerAlgorithm algorithm : {PeerAlgorithm::kAllreduceOneShot, PeerAlgorithm::kAllreduceTwoShot}) {
      allreduceExact(size_t(1) << 16, 0, false, algorithm, 0.05);
    }
    const ErrorRecord* rec = windows_->errorRecord();
    EXPECT_GT(rec->injected, before) << "mode " << int(mode);
    EXPECT_EQ(rec->detected, rec->injected) << "mode " << int(mode);
  }
  // A late producer: exact, nothing counted.
  fault_ = PeerFault{};
  fault_.mode = PeerFault::kDelay;
  fault_.delayNs = 2000000;  // 2 ms, well inside the 20 s deadline
  const unsigned long long injected = windows_->errorRecord()->injected;
  allreduceExact(size_t(1) << 16, 0, false, PeerAlgorithm::kAllreduceOneShot, 0.05);
  EXPECT_EQ(windows_->errorRecord()->injected, injected);
  // Persistent: every read of a hit chunk damaged (repeat 4 > maxRereads 3): the collective fails with
  // kCorrupt naming the peer, or kPeerFailed where a peer failed first; never a result.
  fault_ = PeerFault{};
  fault_.repeat = 4;
  const size_t count = size_t(1) << 16;
  DeviceBuffer in(count * 4), out(count * 4);
  EXPECT_TRUE(allreduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum,
                        PeerAlgorithm::kAllreduceOneShot, 0.05)
                  .isOk());
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const ErrorRecord* rec = windows_->errorRecord();
  EXPECT_TRUE(rec->code == uint32_t(PeerError::kCorrupt) || rec->code == uint32_t(PeerError::kPeerFailed))
      << "code " << rec->code;
  EXPECT_GE(rec->peer, 0);
  EXPECT_NE(rec->peer, rank());
  MPI_Barrier(MPI_COMM_WORLD);
}

// One graph holding a two-shot allreduce, an all-gather, a broadcast and a reduce-scatter, replayed with
// faults: every replay gets fresh epochs on the device and exact results; detected == injected.
TEST_F(PeerCollectives, CapturedInAGraphAndReplayedWithFaults) {
  const size_t count = size_t(1) << 16, bytes = count * 4, n = size_t(size());
  DeviceBuffer in(bytes * n), ar(bytes), ag(bytes * n), bc(bytes), rs(bytes);
  const std::vector<float> mine = integerFloats(rank(), count * n);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_TRUE(allreduce(in.get(), ar.get(), count, DataType::kFloat32, ReduceOp::kSum,
                        PeerAlgorithm::kAllreduceTwoShot, 0.02)
                  .isOk());
  ASSERT_TRUE(allgather(in.get(), ag.get(), count, DataType::kFloat32, 0.02).isOk());
  ASSERT_TRUE(broadcast(in.get(), bc.get(), count, DataType::kFloat32, size() - 1, 0.02).isOk());
  ASSERT_TRUE(reduceScatter(in.get(), rs.get(), count, DataType::kFloat32, ReduceOp::kSum, 0.02).isOk());
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  // Expected results.
  std::vector<std::vector<float>> all;
  for (int p = 0; p < size(); ++p) all.push_back(integerFloats(p, count * n));
  std::vector<float> wantAr(count, 0.f), wantRs(count, 0.f), wantAg;
  for (int p = 0; p < size(); ++p) {
    for (size_t i = 0; i < count; ++i) {
      wantAr[i] += all[size_t(p)][i];
      wantRs[i] += all[size_t(p)][size_t(rank()) * count + i];
    }
    wantAg.insert(wantAg.end(), all[size_t(p)].begin(), all[size_t(p)].begin() + long(count));
  }
  const std::vector<float> wantBc(all.back().begin(), all.back().begin() + long(count));
  for (int replay = 0; replay < 10; ++replay) {
    ASSERT_EQ(cudaMemcpyAsync(in.get(), mine.data(), bytes * n, cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    for (DeviceBuffer* b : {&ar, &bc, &rs})
      ASSERT_EQ(cudaMemsetAsync(b->p, 0xff, bytes, stream_), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(ag.p, 0xff, bytes * n, stream_), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    expectClean("graph replay");
    auto same = [&](const DeviceBuffer& d, const std::vector<float>& want) {
      const std::vector<uint8_t> got = toHost(d.p, want.size() * 4);
      return std::memcmp(got.data(), want.data(), want.size() * 4) == 0;
    };
    ASSERT_TRUE(same(ar, wantAr)) << "two-shot allreduce, replay " << replay;
    ASSERT_TRUE(same(ag, wantAg)) << "allgather, replay " << replay;
    ASSERT_TRUE(same(bc, wantBc)) << "broadcast, replay " << replay;
    ASSERT_TRUE(same(rs, wantRs)) << "reduce_scatter, replay " << replay;
  }
  EXPECT_GT(windows_->errorRecord()->injected, 0u);
  EXPECT_EQ(windows_->errorRecord()->detected, windows_->errorRecord()->injected);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_F(PeerCollectives, AStoppedPeerIsNamedAtTheDeadlineByEveryCollective) {
  const size_t count = 4096;
  DeviceBuffer in(count * 4 * size_t(size())), out(count * 4 * size_t(size()));
  const int stopped = size() - 1;
  const uint64_t deadline = 300ull * 1000 * 1000;
  // One collective per set of fresh windows (a failed rank's error word stays set: later launches on the
  // same windows would end at once). The stopped rank maps them and never launches.
  for (int which = 0; which < 4; ++which) {
    windows_.reset();
    Status made = PeerWindows::create(*bootstrap_, 0, 1 << 20, &windows_);
    ASSERT_TRUE(made.isOk()) << made.toString();
    if (rank() != stopped) {
      Status st;
      if (which == 0) {
        auto a = windowArgs<PeerAllreduceArgs>(CollectiveKind::kAllreduce, DataType::kFloat32, ReduceOp::kSum,
                                               count);
        a.send = in.get();
        a.recv = out.get();
        a.count = count;
        a.algorithm = PeerAlgorithm::kAllreduceTwoShot;
        a.timeoutNs = deadline;
        st = launchPeerAllreduce(a, stream_);
      } else if (which == 1) {
        auto a = windowArgs<PeerAllgatherArgs>(CollectiveKind::kAllgather, DataType::kFloat32, ReduceOp::kSum,
                                               count);
        a.send = in.get();
        a.recv = out.get();
        a.count = count;
        a.timeoutNs = deadline;
        st = launchPeerAllgather(a, stream_);
      } else if (which == 2) {
        auto a = windowArgs<PeerBroadcastArgs>(CollectiveKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum,
                                               count, stopped);
        a.send = in.get();
        a.recv = out.get();
        a.count = count;
        a.root = stopped;
        a.timeoutNs = deadline;
        st = launchPeerBroadcast(a, stream_);
      } else {
        auto a = windowArgs<PeerReduceScatterArgs>(CollectiveKind::kReduceScatter, DataType::kFloat32,
                                                   ReduceOp::kSum, count);
        a.send = in.get();
        a.recv = out.get();
        a.count = count;
        a.timeoutNs = deadline;
        st = launchPeerReduceScatter(a, stream_);
      }
      EXPECT_TRUE(st.isOk()) << st.toString();
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const ErrorRecord* rec = windows_->errorRecord();
      // Every running rank waits on the stopped one (its chunks or its arrival slot) or on a peer that failed
      // first: a timeout naming the stopped rank, or a failed peer.
      EXPECT_TRUE(rec->code == uint32_t(PeerError::kTimeout) || rec->code == uint32_t(PeerError::kPeerFailed))
          << "collective " << which << ": code " << rec->code;
      if (rec->code == uint32_t(PeerError::kTimeout)) {
        EXPECT_EQ(rec->peer, stopped) << "collective " << which;
      }
      EXPECT_LT(ms, 5000.0) << "collective " << which;
    }
    const ErrorRecord* rec = windows_->errorRecord();
    int named =
        rank() != stopped && rec->code == uint32_t(PeerError::kTimeout) && rec->peer == stopped ? 1 : 0;
    int any = 0;
    MPI_Allreduce(&named, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(any, 1) << "no rank named the stopped rank " << stopped << " in collective " << which;
  }
}

// ---- all-to-all -----------------------------------------------------------------------------------

TEST_F(PeerCollectives, AlltoallEqualExactForEveryDtypeAndShape) {
  for (DataType t : kAllDataTypes) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(333), size_t(4099)}) {
      alltoallExact(equalSplits(size(), count), t, /*splits=*/false, 0, 0);
    }
  }
  // Unaligned, blocks apart, and the same counts through the split form give the same bytes.
  for (size_t count : {size_t(255), size_t(1) << 18, (size_t(1) << 20) + 3}) {
    alltoallExact(equalSplits(size(), count), DataType::kFloat32, false, 0, 4);
    alltoallExact(equalSplits(size(), count), DataType::kFloat32, false, 3, 0);
    alltoallExact(equalSplits(size(), count), DataType::kFloat32, true, 0, 0);
  }
  // Large: 16 MiB + 4 bytes a block, (N - 1) of them in the 64 MiB window up to 4 ranks.
  const size_t large = (size_t(4) << 20) + 1;
  if ((size_t(size()) - 1) * ((large * 4 + kChunkBytes - 1) / kChunkBytes) * kChunkBytes <= kCapacity)
    alltoallExact(equalSplits(size(), large), DataType::kFloat32, false, 0, 0);
}

TEST_F(PeerCollectives, AlltoallSplitsExactIncludingZeroBlocks) {
  for (DataType t : kAllDataTypes) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      alltoallExact(randomSplits(size(), seed, 3000), t, /*splits=*/true, 0, 0);
      alltoallExact(randomSplits(size(), seed + 10, 70), t, true, 5, 2);  // unaligned, blocks apart
    }
  }
  // Nothing at all; one pair alone; a rank that sends nothing; one large block among tiny ones.
  alltoallExact(equalSplits(size(), 0), DataType::kFloat32, true, 0, 0);
  Splits one = equalSplits(size(), 0);
  one[size_t(size() - 1)][0] = 1000;
  alltoallExact(one, DataType::kFloat32, true, 0, 0);
  Splits silent = randomSplits(size(), 99, 5000);
  for (size_t& c : silent[0]) c = 0;
  alltoallExact(silent, DataType::kUint8, true, 1, 1);
  Splits large = randomSplits(size(), 7, 10);
  large[0][size_t(size() - 1)] = (size_t(3) << 20) / 4 + 1;  // 3 MiB + 4 bytes
  alltoallExact(large, DataType::kFloat32, true, 0, 0);
}

TEST_F(PeerCollectives, AlltoallReadFaultsAreDetectedAndResultsExact) {
  const unsigned long long before = windows_->errorRecord()->injected;
  for (int round = 0; round < 3; ++round) {
    alltoallExact(equalSplits(size(), size_t(1) << 16), DataType::kFloat32, false, 0, 0, 0.02);
    alltoallExact(randomSplits(size(), 50u + uint32_t(round), 100000), DataType::kFloat32, true, 0, 0, 0.02);
  }
  const ErrorRecord* rec = windows_->errorRecord();
  EXPECT_GT(rec->injected, before);
  EXPECT_EQ(rec->detected, rec->injected);
}

// Both forms in one graph, replayed with faults: fresh epochs on the device, exact results, detected ==
// injected (the split form's table reads included).
TEST_F(PeerCollectives, AlltoallCapturedInAGraphAndReplayedWithFaults) {
  const Splits equal = equalSplits(size(), 5000), splits = randomSplits(size(), 77, 20000);
  const AlltoallBuffers le = layoutOf(equal, rank(), 0), ls = layoutOf(splits, rank(), 2);
  std::vector<uint8_t> inE, wantE, inS, wantS;
  alltoallData(equal, DataType::kFloat32, le, &inE, &wantE);
  alltoallData(splits, DataType::kFloat32, ls, &inS, &wantS);
  DeviceBuffer dinE(inE.size()), doutE(wantE.size()), dinS(inS.size()), doutS(wantS.size());
  ASSERT_EQ(upload(dinE.get(), inE.data(), inE.size()), cudaSuccess);
  ASSERT_EQ(upload(dinS.get(), inS.data(), inS.size()), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_TRUE(alltoall(dinE.get(), doutE.get(), le, DataType::kFloat32, false, 0.02).isOk());
  ASSERT_TRUE(alltoall(dinS.get(), doutS.get(), ls, DataType::kFloat32, true, 0.02).isOk());
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 10; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(doutE.p, 0xff, wantE.size(), stream_), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(doutS.p, 0xff, wantS.size(), stream_), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    expectClean("alltoall graph replay");
    ASSERT_TRUE(toHost(doutE.get(), wantE.size()) == wantE) << "equal form, replay " << replay;
    ASSERT_TRUE(toHost(doutS.get(), wantS.size()) == wantS) << "split form, replay " << replay;
  }
  EXPECT_GT(windows_->errorRecord()->injected, 0u);
  EXPECT_EQ(windows_->errorRecord()->detected, windows_->errorRecord()->injected);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Rank 1 expects one element more from rank 0 than rank 0 sends it: every rank holds every table, so every
// rank fails with the same pair and both counts, none returns.
TEST_F(PeerCollectives, RanksThatDisagreeOnSplitsAllFailNamingThePair) {
  const Splits agreed = randomSplits(size(), 5, 2000);
  Splits mine = agreed;
  if (rank() == 1) ++mine[0][1];
  const ErrorRecord* rec = splitAlltoallFailing(layoutOf(mine, rank(), 0), PeerError::kSplitMismatch);
  EXPECT_EQ(rec->seen, uint32_t(agreed[0][1]));
  EXPECT_EQ(rec->expected, uint32_t(agreed[0][1] + 1));
}

// One rank calls the equal form, the others the split form, with the same counts: the shapes' fingerprints
// differ, so every rank fails (a mismatch on one at least), none returns.
TEST_F(PeerCollectives, RanksCallingDifferentAlltoallFormsAllFail) {
  const AlltoallBuffers l = layoutOf(equalSplits(size(), 1000), rank(), 0);
  DeviceBuffer in(l.sendTotal * 4), out(l.recvTotal * 4);
  ASSERT_TRUE(
      alltoall(in.get(), out.get(), l, DataType::kFloat32, rank() != 0, 0, 5ull * 1000 * 1000 * 1000).isOk());
  expectEveryRankFailedOnAMismatch();
}

// Rank 0's blocks do not fit its window (a block of the window's whole capacity, after the table): it
// publishes its table alone, and every rank fails naming rank 0's block for rank 1 and the window's size.
TEST_F(PeerCollectives, AlltoallBlocksTooLargeForTheWindowFailEveryRankNamingTheRank) {
  Splits m = randomSplits(size(), 3, 100);
  m[0][1] = kCapacity / 4;
  const ErrorRecord* rec = splitAlltoallFailing(layoutOf(m, rank(), 0), PeerError::kBlockTable);
  EXPECT_EQ(rec->expected, uint32_t(kCapacity / kChunkBytes));
  EXPECT_EQ(rec->seen, uint32_t(kCapacity / kChunkBytes + 1));
}

TEST_F(PeerCollectives, AStoppedPeerIsNamedAtTheDeadlineByTheAlltoall) {
  const int stopped = size() - 1;
  for (bool splits : {false, true}) {
    windows_.reset();
    Status made = PeerWindows::create(*bootstrap_, 0, 1 << 20, &windows_);
    ASSERT_TRUE(made.isOk()) << made.toString();
    const AlltoallBuffers l = layoutOf(equalSplits(size(), 4096), rank(), 0);
    DeviceBuffer in(l.sendTotal * 4), out(l.recvTotal * 4);
    if (rank() != stopped) {
      EXPECT_TRUE(
          alltoall(in.get(), out.get(), l, DataType::kFloat32, splits, 0, 300ull * 1000 * 1000).isOk());
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const ErrorRecord* rec = windows_->errorRecord();
      EXPECT_TRUE(rec->code == uint32_t(PeerError::kTimeout) || rec->code == uint32_t(PeerError::kPeerFailed))
          << (splits ? "splits" : "equal") << ": code " << rec->code;
      if (rec->code == uint32_t(PeerError::kTimeout)) {
        EXPECT_EQ(rec->peer, stopped);
      }
      EXPECT_LT(ms, 5000.0);
    }
    const ErrorRecord* rec = windows_->errorRecord();
    int named =
        rank() != stopped && rec->code == uint32_t(PeerError::kTimeout) && rec->peer == stopped ? 1 : 0;
    int any = 0;
    MPI_Allreduce(&named, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(any, 1) << "no rank named the stopped rank " << stopped << (splits ? " (splits)" : " (equal)");
  }
}

}  // namespace
}  // namespace peer

namespace {

// The new collectives as users reach them: a device communicator made with RINGGUARD_DEVICE_TRANSPORT=peer
// (DeviceTransportKind::kPeer) hands the two-shot allreduce, the all-gather, the broadcast and the
// reduce-scatter to the peer path; faults from Options; results exact; detected == injected.
TEST(PeerCommunicatorCollectives, ExplicitPeerTakesEveryCollectiveExactly) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  observability::startTimeline(size_t(1) << 16);  // each launch's enqueue instant says "direct": 2 (below)
  cuda::DeviceOptions d;
  d.peerBytes = 16u << 20;
  d.peerTwoShotBytes = 64u << 10;
  peer::FaultyPeerCommunicator fc;
  ASSERT_NO_FATAL_FAILURE(peer::makeFaultyPeerCommunicator(3, d, &fc));
  Communicator* c = fc.c.get();
  cudaStream_t s = fc.stream;
  Status st;
  const int rank = c->rank(), size = c->size();
  for (size_t count : {size_t(1), size_t(1000), size_t(1) << 18}) {  // one-shot, one-shot, two-shot
    const size_t bytes = count * 4, total = bytes * size_t(size);
    peer::DeviceBuffer in(total), out(total);
    const std::vector<float> x = peer::integerFloats(rank, count * size_t(size));
    ASSERT_EQ(peer::upload(in.get(), x.data(), total), cudaSuccess);
    std::vector<float> wantAr(count, 0.f), wantRs(count, 0.f), wantAg;
    for (int p = 0; p < size; ++p) {
      const std::vector<float> y = peer::integerFloats(p, count * size_t(size));
      for (size_t i = 0; i < count; ++i) {
        wantAr[i] += y[i];
        wantRs[i] += y[size_t(rank) * count + i];
      }
      wantAg.insert(wantAg.end(), y.begin(), y.begin() + long(count));
    }
    auto check = [&](const std::vector<float>& want, const char* what) {
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      const std::vector<uint8_t> got = peer::toHost(out.get(), want.size() * 4);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << what << " count " << count;
    };
    st = c->allreduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, s);
    ASSERT_TRUE(st.isOk()) << st.toString();
    check(wantAr, "allreduce");
    st = c->allgather(in.get(), out.get(), count, DataType::kFloat32, s);
    ASSERT_TRUE(st.isOk()) << st.toString();
    check(wantAg, "allgather");
    st = c->broadcast(in.get(), out.get(), count, DataType::kFloat32, size - 1, s);
    ASSERT_TRUE(st.isOk()) << st.toString();
    check(std::vector<float>(wantAg.end() - long(count), wantAg.end()), "broadcast");
    st = c->reduceScatter(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, s);
    ASSERT_TRUE(st.isOk()) << st.toString();
    check(wantRs, "reduce_scatter");
  }
  const Counters k = c->counters();
  EXPECT_GT(k.injected, 0u);
  EXPECT_EQ(k.detected, k.injected);
  EXPECT_EQ(k.escaped, 0u);
  // On the timeline every launch is an enqueue instant with direct 2 (launched on the stream; no span).
  const std::string timeline = observability::timelineJson();
  size_t launched = 0;
  for (size_t at = timeline.find("\"direct\":2"); at != std::string::npos;
       at = timeline.find("\"direct\":2", at + 1))
    ++launched;
  EXPECT_GE(launched, 12u) << "4 collectives x 3 counts launched on the windows";
}

// With the timeline on, every call of the path is a span timed on the device (core/call_clock.h), eager and
// replayed from a CUDA graph: named by its kind, its bytes as the communicator counts them, the path's epochs
// one after another, inside the host's window around the calls; the per-kind figures take their time.
TEST(PeerCommunicatorCollectives, EveryCallIsATimelineSpanTimedOnTheDevice) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  observability::startTimeline(size_t(1) << 16);  // once per process: later calls find it on
  cuda::DeviceOptions d;
  d.peerBytes = 16u << 20;
  peer::FaultyPeerCommunicator fc;
  ASSERT_NO_FATAL_FAILURE(peer::makeFaultyPeerCommunicator(5, d, &fc));
  Communicator* c = fc.c.get();
  cudaStream_t s = fc.stream;
  const int size = c->size();
  const size_t count = 1000, bytes = count * 4;
  peer::DeviceBuffer in(bytes * size_t(size)), out(bytes * size_t(size));
  const std::vector<float> x = peer::integerFloats(c->rank(), count * size_t(size));
  ASSERT_EQ(peer::upload(in.get(), x.data(), bytes * size_t(size)), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const double t0 = double(trace::nowNs()) / 1000.0;
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(c->allreduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, s).isOk());
  ASSERT_TRUE(c->allgather(in.get(), out.get(), count, DataType::kFloat32, s).isOk());
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_TRUE(c->allreduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, s).isOk());
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const double t1 = double(trace::nowNs()) / 1000.0;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  ASSERT_TRUE(c->firstError().isOk()) << c->firstError().toString();
  static_cast<void>(c->counters());  // reads the path's clocks: every finished call becomes its span

  const nlohmann::json timeline = nlohmann::json::parse(observability::timelineJson());
  std::vector<std::string> names;
  std::vector<uint64_t> seqs;
  for (const nlohmann::json& e : timeline.at("traceEvents")) {
    if (e.value("ph", "") != "X" || !e.contains("args") || e["args"].value("direct", 0) != 2) continue;
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
    if (ts < t0 - 100.0) continue;  // an earlier test's communicator (the offset is good to a few us)
    EXPECT_LE(ts + dur, t1 + 100.0) << e.dump();
    EXPECT_GT(dur, 0.0) << e.dump();
    const std::string name = e.at("name").get<std::string>();
    EXPECT_EQ(e["args"].at("bytes").get<uint64_t>(), name == "allgather" ? bytes * size_t(size) : bytes)
        << e.dump();
    names.push_back(name);
    seqs.push_back(e["args"].at("seq").get<uint64_t>());
  }
  const std::vector<std::string> want = {"allreduce", "allreduce", "allgather",
                                         "allreduce", "allreduce", "allreduce"};
  EXPECT_EQ(names, want) << "two eager allreduces, an allgather, three replays of a captured allreduce";
  for (size_t i = 1; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], seqs[i - 1] + 1) << "span " << i;
}

// The all-to-all as users reach it: the equal form (Communicator::alltoall, c10d's all_to_all_single without
// splits) and the split form (the vectors, with splits) go to the peer path with RINGGUARD_DEVICE_TRANSPORT=
// peer, exact with faults; both can be captured in a CUDA graph (a host-driven collective is refused there,
// so this shows the peer path took them); and ranks whose splits disagree all end with the error naming the
// pair.
TEST(PeerCommunicatorCollectives, ExplicitPeerTakesTheAlltoallExactlyAndInAGraph) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  cuda::DeviceOptions d;
  d.peerBytes = 16u << 20;
  peer::FaultyPeerCommunicator fc;
  ASSERT_NO_FATAL_FAILURE(peer::makeFaultyPeerCommunicator(5, d, &fc));
  Communicator* c = fc.c.get();
  cudaStream_t s = fc.stream;
  Status st;
  const int rank = c->rank(), size = c->size();
  const DataType t = DataType::kFloat32;

  // Equal form: `count` floats to and from every rank.
  const size_t count = 3001;
  const peer::AlltoallBuffers le = peer::layoutOf(peer::equalSplits(size, count), rank, 0);
  std::vector<uint8_t> inE(le.sendTotal * 4), wantE(le.recvTotal * 4);
  for (int q = 0; q < size; ++q) {
    const std::vector<uint8_t> b = peer::blockOf(t, count, rank, q);
    std::copy(b.begin(), b.end(), inE.begin() + long(size_t(q) * count * 4));
    const std::vector<uint8_t> w = peer::blockOf(t, count, q, rank);
    std::copy(w.begin(), w.end(), wantE.begin() + long(size_t(q) * count * 4));
  }
  // Split form, zero blocks among them, displacements apart.
  const peer::Splits m = peer::randomSplits(size, 21, 5000);
  const peer::AlltoallBuffers ls = peer::layoutOf(m, rank, 3);
  std::vector<uint8_t> inS(ls.sendTotal * 4, 0), wantS(ls.recvTotal * 4, 0);
  for (int q = 0; q < size; ++q) {
    const std::vector<uint8_t> b = peer::blockOf(t, ls.sendCounts[size_t(q)], rank, q);
    std::copy(b.begin(), b.end(), inS.begin() + long(ls.sendDispls[size_t(q)] * 4));
    const std::vector<uint8_t> w = peer::blockOf(t, ls.recvCounts[size_t(q)], q, rank);
    std::copy(w.begin(), w.end(), wantS.begin() + long(ls.recvDispls[size_t(q)] * 4));
  }
  peer::DeviceBuffer dinE(inE.size()), doutE(wantE.size()), dinS(inS.size()), doutS(wantS.size());
  ASSERT_EQ(peer::upload(dinE.get(), inE.data(), inE.size()), cudaSuccess);
  ASSERT_EQ(peer::upload(dinS.get(), inS.data(), inS.size()), cudaSuccess);
  auto run = [&] {
    ASSERT_EQ(cudaMemsetAsync(doutE.p, 0, wantE.size(), s), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(doutS.p, 0, wantS.size(), s), cudaSuccess);  // the gaps stay 0
    Status r = c->alltoall(dinE.get(), doutE.get(), count, t, s);
    ASSERT_TRUE(r.isOk()) << r.toString();
    r = c->alltoallAsync(dinS.get(), ls.sendCounts, ls.sendDispls, doutS.get(), ls.recvCounts, ls.recvDispls,
                         t, s)
            ->wait();
    ASSERT_TRUE(r.isOk()) << r.toString();
  };
  auto check = [&](const char* what) {
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_TRUE(peer::toHost(doutE.get(), wantE.size()) == wantE) << "equal form, " << what;
    EXPECT_TRUE(peer::toHost(doutS.get(), wantS.size()) == wantS) << "split form, " << what;
  };
  run();
  check("eager");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  run();
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    check("graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  Counters k = c->counters();
  EXPECT_GT(k.injected, 0u);
  EXPECT_EQ(k.detected, k.injected);

  // Rank 1 expects one element more from rank 0: every rank's call ends with the pair named.
  peer::Splits wrong = m;
  if (rank == 1) ++wrong[0][1];
  const peer::AlltoallBuffers lw = peer::layoutOf(wrong, rank, 0);
  peer::DeviceBuffer win(lw.sendTotal * 4), wout(lw.recvTotal * 4);
  std::shared_ptr<Work> w = c->alltoallAsync(win.get(), lw.sendCounts, lw.sendDispls, wout.get(),
                                             lw.recvCounts, lw.recvDispls, t, s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  st = w->wait();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  const std::string named = "rank 0 sends " + std::to_string(m[0][1]) +
                            " elements to rank 1, which expects " + std::to_string(m[0][1] + 1);
  EXPECT_NE(st.message().find(named), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ringguard
