#pragma once
// N ranks in one process over a LoopbackFabric: the harness of the algorithm layer's unit suites.
//
//   testing::LoopbackGroup g(4, options);       // 4 Communicators (their handshakes run at once)
//   g.run([&](int rank, Communicator& c) {      // one thread per rank, joined before run() returns
//     EXPECT_TRUE(c.allreduce(...).isOk());
//   });
//   Counters total = g.totalCounters();
//
// For tests below the Communicator (exchanges, the control channel), runRanks(n, fn) runs fn(rank) on n
// threads over transports from makeLoopbackTransports(n), and contextFor() makes a CollectiveContext.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/agreement.h"
#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"
#include "runtime/make_communicator.h"
#include "transport/control/control_channel.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_transport.h"
#include "verifiable.h"

namespace ringguard {
namespace testing {

// The fault modes that damage (or delay) a payload, for suites parameterized over them.
inline auto payloadFaultModes() {
  return ::testing::Values(FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst, FaultMode::kGarbage,
                           FaultMode::kTrailer, FaultMode::kRetransmit, FaultMode::kDelay);
}
inline std::string faultModeParamName(const ::testing::TestParamInfo<FaultMode>& i) {
  return faultModeName(i.param);
}

// After runs with random injection of `mode`: nothing escaped, and every injection was detected and
// repaired (kDelay: some sends were delayed).
inline void expectEveryInjectionRepaired(const Counters& c, FaultMode mode, const std::string& where) {
  EXPECT_EQ(c.escaped, 0u) << where;
  if (mode == FaultMode::kDelay) {
    EXPECT_GT(c.delayed, 0u) << where;
    return;
  }
  EXPECT_GT(c.injected, 0u) << where;
  EXPECT_EQ(c.detected, c.injected) << where;
  EXPECT_GE(c.retransmitted, c.injected) << where;
  EXPECT_GT(c.repairRounds, 0u) << where;
}

// Options for tests whose ranks fail on purpose: a 20 s timeout (nothing waits that long when the code is
// right) and no log (every rank logs the error it returns).
inline Options quietOptions() {
  Options o;
  o.timeout = std::chrono::milliseconds(20000);
  o.logLevel = "off";
  return o;
}

// Runs fn(rank) for rank 0..n-1 on n threads at once and joins them all.
inline void runRanks(int n, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(size_t(n));
  for (int r = 0; r < n; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

// A hostile peer's verdict: appends `f` to the sealed verdict frame `frame`, whose body holds its entry count
// (uint32) at `countOffset`, and seals it again, so the control channel accepts it.
inline void appendVerdictEntry(std::vector<uint8_t>* frame, size_t countOffset, const SliceFailure& f) {
  ControlFrameHeader h;
  std::memcpy(&h, frame->data(), sizeof(h));
  std::vector<uint8_t> body(frame->begin() + sizeof(h), frame->end());
  uint32_t count = 0;
  std::memcpy(&count, body.data() + countOffset, 4);
  ++count;
  std::memcpy(body.data() + countOffset, &count, 4);
  const auto* p = reinterpret_cast<const uint8_t*>(&f);
  body.insert(body.end(), p, p + sizeof(f));
  *frame = sealControlFrame(ControlTag(h.tag), h.sender, h.receiver, h.seq, body.data(), body.size());
}

// A context for calling the collective helpers (exchangeVerdicts, disseminate...) directly.
inline CollectiveContext contextFor(Transport* transport, const Options* options, Counters* counters,
                                    uint64_t seq = 0, const FaultInjector* injector = nullptr) {
  CollectiveContext ctx;
  ctx.transport = transport;
  ctx.options = options;
  ctx.counters = counters;
  ctx.seq = seq;
  ctx.injector = injector;
  ctx.name = "test";
  return ctx;
}

// What carries the data of a LoopbackGroup: the loopback fabric itself, or shared-memory rings over it
// (the shared-memory transport with the loopback control channel; rings of kTestRingBytes, so messages
// wrap around and longer ones stream through), without windows (every collective two-sided) or with
// windows of kTestWindowBytes (collectives that fit take the one-sided protocol, in several chunks, and
// larger ones the two-sided ring).
// kSingleCopy: the windows with single-copy reads (the ranks are threads of this process, which reads its
// own memory with process_vm_readv as it would a peer process's): send/recv messages from
// kTestSingleCopyBytes on, and collectives' parts from twice it, are read straight from the publisher's
// buffer, smaller ones through the windows.
enum class Wire { kLoopback, kSharedMemory, kWindows, kSingleCopy };
inline constexpr size_t kTestSingleCopyBytes = 256;
inline constexpr size_t kTestRingBytes = 1024;
// Room for a two-shot all-reduce (window_exchange.h, kWindowTwoShotBytes) at up to 8 ranks.
inline constexpr size_t kTestWindowBytes = size_t(96) << 10;
inline const char* wireName(Wire w) {
  return w == Wire::kLoopback       ? "loopback"
         : w == Wire::kSharedMemory ? "shm"
         : w == Wire::kWindows      ? "windows"
                                    : "single_copy";
}

// Wraps each of the group's transports (rank r at index r) in a shared-memory transport over segments
// made and opened here (what connectSharedMemory does through a Bootstrap); `windowCapacity` > 0 gives
// each segment a window of that many payload bytes per half.
inline void wrapInSharedMemory(std::vector<std::unique_ptr<Transport>>* transports, size_t ringBytes,
                               size_t windowCapacity = 0, size_t singleCopyBytes = 0) {
  const int n = int(transports->size());
  std::vector<std::unique_ptr<shm::Segment>> own(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const Status st = shm::Segment::create(r, n, ringBytes, kControlRingBytes,
                                           shmWindowBytes(windowCapacity, n), &own[size_t(r)]);
    ASSERT_TRUE(st.isOk()) << st.toString();
  }
  std::vector<std::vector<std::unique_ptr<shm::Segment>>> peers(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    peers[size_t(r)].resize(size_t(n));
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      const Status st = shm::Segment::open(own[size_t(p)]->name(), p, n, own[size_t(p)]->nonce(),
                                           &peers[size_t(r)][size_t(p)]);
      ASSERT_TRUE(st.isOk()) << st.toString();
    }
  }
  for (int r = 0; r < n; ++r) own[size_t(r)]->unlink();  // every peer has it open: nothing stays behind
  for (int r = 0; r < n; ++r) {
    (*transports)[size_t(r)] = makeShmTransport(
        std::move((*transports)[size_t(r)]), std::move(own[size_t(r)]), std::move(peers[size_t(r)]),
        std::chrono::milliseconds(20000), std::chrono::microseconds(0), windowCapacity,
        SingleCopy{
            singleCopyBytes > 0 ? std::vector<int64_t>(size_t(n), int64_t(getpid())) : std::vector<int64_t>{},
            singleCopyBytes});
  }
}

class LoopbackGroup {
 public:
  // `size` ranks with the same options.
  LoopbackGroup(int size, const Options& options, Wire wire = Wire::kLoopback)
      : LoopbackGroup(std::vector<Options>(size_t(size), options), wire) {}
  // One rank per entry, each with its own options (settings that must agree are checked by the handshake).
  explicit LoopbackGroup(const std::vector<Options>& perRank, Wire wire = Wire::kLoopback) {
    std::vector<std::unique_ptr<Transport>> transports =
        makeLoopbackTransports(int(perRank.size()), &fabric_);
    if (wire == Wire::kSharedMemory) wrapInSharedMemory(&transports, kTestRingBytes);
    if (wire == Wire::kWindows) wrapInSharedMemory(&transports, kTestRingBytes, kTestWindowBytes);
    if (wire == Wire::kSingleCopy) {
      wrapInSharedMemory(&transports, kTestRingBytes, kTestWindowBytes, kTestSingleCopyBytes);
    }
    for (size_t r = 0; r < perRank.size(); ++r) {
      comms_.push_back(makeCommunicator(std::move(transports[r]), perRank[r]));
    }
  }

  int size() const { return int(comms_.size()); }
  Communicator& comm(int rank) { return *comms_[size_t(rank)]; }
  LoopbackFabric& fabric() { return *fabric_; }

  // Runs fn(rank, comm(rank)) for every rank on a thread of its own (every rank takes part in each
  // collective) and joins them all.
  void run(const std::function<void(int rank, Communicator& comm)>& fn) {
    runRanks(size(), [&](int r) { fn(r, comm(r)); });
  }

  std::vector<Counters> counters() const {
    std::vector<Counters> out;
    for (const auto& c : comms_) out.push_back(c->counters());
    return out;
  }
  // Field by field sum over the ranks.
  Counters totalCounters() const {
    Counters sum;
    for (const auto& c : comms_) sum += c->counters();
    return sum;
  }

 private:
  std::shared_ptr<LoopbackFabric> fabric_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace testing
}  // namespace ringguard
