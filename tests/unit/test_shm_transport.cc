// The shared-memory transport (src/transport/shm): its setup through a Bootstrap (agreement, fallback,
// nothing left in /dev/shm), messages longer than a ring, and what it refuses (a message of another size
// than the receive, a peer's ring indices that cannot be). The collective suites run over it too
// (test_loopback_collectives.cc, Wire::kSharedMemory).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "loopback_util.h"
#include "memory_bootstrap.h"
#include "transport/shm/cpu_sets.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/stream_store_choice.h"
#include "transport/window.h"

namespace ringguard {
namespace {

using json = nlohmann::json;

using testing::LoopbackGroup;
using testing::Wire;

// Names under /dev/shm that a ringguard segment would have.
int segmentsInDevShm() {
  int n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::strncmp(e->d_name, "ringguard-", 10) == 0;
    closedir(d);
  }
  return n;
}

// Runs connectSharedMemory on n ranks (modes[r], ring bytes rings[r]) over a MemoryBootstrap; returns each
// rank's status and transport name.
struct Connected {
  std::vector<Status> status;
  std::vector<std::string> name;
  std::vector<std::chrono::microseconds> poll;  // each transport's pollBeforeBlocking
  // char, not bool: the rank threads write their own entries at once, and std::vector<bool> packs entries
  // into shared words, where one thread's write can undo another's (seen under load: a rank's entry lost).
  std::vector<char> windows;        // whether each transport offers windows
  std::vector<char> crossReadable;  // whether they read peers' memory (single-copy reads)
  std::vector<char> publishes64K;   // whether they publish a 64 KiB send/recv message so
  std::vector<char> publishes8K;    // and an 8 KiB one
  std::vector<char> cores;          // whether its windows say every rank has a CPU of its own
  std::vector<char> streams;        // and copy into them with non-temporal stores
};
// windows[r]: rank r's RINGGUARD_SHM_WINDOW_BYTES (none given: 0 on every rank); singleCopy[r] its
// RINGGUARD_SHM_SINGLE_COPY_BYTES (none given: 0), set explicitly where `setSingleCopy`; kernelCopy[r] what
// rank r measures of the kernel's copy (none given: the real measurement), each measurement counted in
// *measured when given.
Connected connectAll(const std::vector<std::string>& modes, const std::vector<size_t>& rings,
                     std::chrono::microseconds spin = std::chrono::microseconds(0),
                     const std::vector<size_t>& windows = {}, const std::vector<size_t>& singleCopy = {},
                     bool setSingleCopy = false, const std::vector<shm::KernelCopyCost>& kernelCopy = {},
                     std::atomic<int>* measured = nullptr) {
  const int n = int(modes.size());
  testing::Board board(n);
  Connected out{std::vector<Status>(size_t(n)),
                std::vector<std::string>(size_t(n)),
                std::vector<std::chrono::microseconds>(size_t(n)),
                std::vector<char>(size_t(n)),
                std::vector<char>(size_t(n)),
                std::vector<char>(size_t(n)),
                std::vector<char>(size_t(n)),
                std::vector<char>(size_t(n)),
                std::vector<char>(size_t(n))};
  testing::runRanks(n, [&](int r) {
    testing::MemoryBootstrap b(&board, r);
    std::unique_ptr<Transport> t;
    Status st = b.createHostTransport(&t);
    const std::string& m = modes[size_t(r)];
    SharedMemoryChoice c;
    c.mode = m == "gloo" ? SharedMemory::kOff : m == "shm" ? SharedMemory::kRequired : SharedMemory::kAuto;
    c.setting = m;
    c.offSetting = "gloo";
    c.ringBytes = rings[size_t(r)];
    c.windowBytes = windows.empty() ? 0 : windows[size_t(r)];
    c.singleCopyBytes = singleCopy.empty() ? 0 : singleCopy[size_t(r)];
    c.singleCopySet = setSingleCopy;
    c.timeout = std::chrono::milliseconds(20000);
    c.spin = spin;
    if (!kernelCopy.empty()) {
      c.measureKernelCopy = [cost = kernelCopy[size_t(r)], measured] {
        if (measured != nullptr) ++*measured;
        return cost;
      };
    }
    // A value the caller could not use (mpiSharedMemory, cpuSharedMemory): the text stands for itself.
    if (m == "bogus") c.invalid = Status(StatusCode::kInvalidArgument, "RINGGUARD_CPU_TRANSPORT='bogus'");
    if (st.isOk()) st = connectSharedMemory(b, c, &t);
    out.status[size_t(r)] = st;
    out.name[size_t(r)] = t ? t->name() : "";
    out.poll[size_t(r)] = t ? t->pollBeforeBlocking() : std::chrono::microseconds(-1);
    out.windows[size_t(r)] = t && t->windows() != nullptr;
    out.crossReadable[size_t(r)] = t && t->windows() != nullptr && t->windows()->crossReadable();
    out.publishes64K[size_t(r)] =
        t && t->windows() != nullptr && t->windows()->publishesMessageByAddress(size_t(64) << 10);
    out.publishes8K[size_t(r)] =
        t && t->windows() != nullptr && t->windows()->publishesMessageByAddress(size_t(8) << 10);
    out.cores[size_t(r)] = t && t->windows() != nullptr && t->windows()->coreForEachRank();
    out.streams[size_t(r)] = t && t->windows() != nullptr && t->windows()->streamCopies();
  });
  return out;
}

TEST(ShmTransport, ConnectsWhenEveryRankCanAndLeavesNothingInDevShm) {
  const int before = segmentsInDevShm();
  const Connected c = connectAll({"auto", "auto", "auto"}, {4096, 4096, 4096});
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(c.status[size_t(r)].isOk()) << c.status[size_t(r)].toString();
    EXPECT_EQ(c.name[size_t(r)], "shm") << "rank " << r;
  }
  EXPECT_EQ(segmentsInDevShm(), before) << "a segment's name stayed in /dev/shm";
}

// A rank whose setting is unusable takes part in the first exchange: every rank fails at once naming it, none
// waits for it, and nothing stays in /dev/shm.
TEST(ShmTransport, ARankWithAnUnusableSettingFailsEveryRank) {
  const size_t before = segmentsInDevShm();
  const Connected c = connectAll({"auto", "bogus", "shm"}, {4096, 4096, 4096});
  for (int r = 0; r < 3; ++r) {
    const Status& st = c.status[size_t(r)];
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << st.toString();
    EXPECT_EQ(st.message(),
              r == 1 ? "RINGGUARD_CPU_TRANSPORT='bogus'" : "rank 1: RINGGUARD_CPU_TRANSPORT='bogus'");
  }
  EXPECT_EQ(segmentsInDevShm(), before);
}

// How long a wait polls before it sleeps is the choice's (50 us under mpirun, a few polls under torch); the
// host transport it falls back to keeps its own.
TEST(ShmTransport, WaitsPollAsTheChoiceSays) {
  const Connected c = connectAll({"auto", "auto"}, {4096, 4096}, std::chrono::microseconds(50));
  const Connected off = connectAll({"gloo", "gloo"}, {4096, 4096}, std::chrono::microseconds(50));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(c.status[size_t(r)].isOk()) << c.status[size_t(r)].toString();
    EXPECT_EQ(c.poll[size_t(r)], std::chrono::microseconds(50)) << "rank " << r;
    EXPECT_EQ(off.poll[size_t(r)], std::chrono::microseconds(0)) << "rank " << r;
  }
}

TEST(ShmTransport, OffKeepsTheHostTransport) {
  const Connected c = connectAll({"gloo", "gloo"}, {4096, 4096});
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(c.status[size_t(r)].isOk());
    EXPECT_EQ(c.name[size_t(r)], "loopback");
  }
}

TEST(ShmTransport, RanksWhoseModesDifferAllFailNamingBoth) {
  const Connected c = connectAll({"auto", "gloo", "auto"}, {4096, 4096, 4096});
  for (int r = 0; r < 3; ++r) {
    const Status& st = c.status[size_t(r)];
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << st.toString();
    EXPECT_NE(st.message().find("RINGGUARD_CPU_TRANSPORT differs between ranks"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("gloo"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("auto"), std::string::npos) << st.message();
  }
}

// Windows for the one-sided protocol: every rank's segment holds one when the ranks agree on its size (0:
// none); ranks started with different sizes all fail naming both, before any segment is mapped; a value that
// does not parse is named.
TEST(ShmTransport, WindowsWhenTheRanksAgreeOnTheirSize) {
  const Connected with = connectAll({"auto", "auto", "auto"}, {4096, 4096, 4096},
                                    std::chrono::microseconds(0), {65536, 65536, 65536});
  const Connected without = connectAll({"auto", "auto"}, {4096, 4096}, std::chrono::microseconds(0), {0, 0});
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(with.status[size_t(r)].isOk()) << with.status[size_t(r)].toString();
    EXPECT_TRUE(with.windows[size_t(r)]) << "rank " << r;
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(without.status[size_t(r)].isOk()) << without.status[size_t(r)].toString();
    EXPECT_FALSE(without.windows[size_t(r)]) << "rank " << r;
  }
  const size_t before = segmentsInDevShm();
  const Connected differ = connectAll({"auto", "auto", "auto"}, {4096, 4096, 4096},
                                      std::chrono::microseconds(0), {65536, 65536, 0});
  for (int r = 0; r < 3; ++r) {
    const Status& st = differ.status[size_t(r)];
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << st.toString();
    EXPECT_NE(st.message().find("RINGGUARD_SHM_WINDOW_BYTES differs between ranks"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("has 65536"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("rank 2 has 0"), std::string::npos) << st.message();
  }
  EXPECT_EQ(segmentsInDevShm(), before);

  const SharedMemoryChoice garbage = readSharedMemoryChoice(
      [](const char* name) -> const char* {
        return std::string(name) == "RINGGUARD_SHM_WINDOW_BYTES" ? "lots" : nullptr;
      },
      "gloo", std::chrono::milliseconds(1000));
  EXPECT_EQ(garbage.invalid.code(), StatusCode::kInvalidArgument) << garbage.invalid.toString();
  EXPECT_NE(garbage.invalid.message().find("RINGGUARD_SHM_WINDOW_BYTES"), std::string::npos)
      << garbage.invalid.message();
  EXPECT_NE(garbage.invalid.message().find("lots"), std::string::npos) << garbage.invalid.message();
}

// A rank whose setup records are not what this version writes (another version, a hostile peer): every
// rank fails naming it, nothing throws.
class ForgingBootstrap final : public Bootstrap {
 public:
  // Every record this rank sends is `forged`.
  ForgingBootstrap(testing::Board* board, int rank, std::string forged)
      : inner_(board, rank), forge_([forged](const std::vector<uint8_t>&) { return forged; }) {}
  // Every record this rank sends carries `field` = `value` instead of what it holds (the rest as it is).
  ForgingBootstrap(testing::Board* board, int rank, std::string field, json value)
      : inner_(board, rank), forge_([field, value](const std::vector<uint8_t>& mine) {
          json record = json::parse(mine.begin(), mine.end(), nullptr, /*allow_exceptions=*/false);
          if (record.is_object() && record.contains(field)) record[field] = value;
          return record.dump();
        }) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status broadcast(int root, std::vector<uint8_t>* bytes) override { return inner_.broadcast(root, bytes); }
  Status allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override {
    const std::string sent = forge_(mine);
    return inner_.allgather(std::vector<uint8_t>(sent.begin(), sent.end()), all);
  }
  Status createHostTransport(std::unique_ptr<Transport>* out) override {
    return inner_.createHostTransport(out);
  }

 private:
  testing::MemoryBootstrap inner_;
  std::function<std::string(const std::vector<uint8_t>&)> forge_;
};

// `n` ranks connect over memory bootstraps, rank 1's forging its records (ForgingBootstrap's arguments after
// the board and rank), with windows of `window` bytes a half: each rank's status, and whether its windows
// say every rank has a CPU of its own.
struct Forged {
  std::vector<Status> status;
  std::vector<char> cores;  // char, not bool: written by the rank threads at once (Connected)
};
template <typename... Forge>
Forged connectWithRank1Forging(int n, size_t window, const Forge&... forge) {
  testing::Board board(n);
  Forged out{std::vector<Status>(size_t(n)), std::vector<char>(size_t(n))};
  testing::runRanks(n, [&](int r) {
    std::unique_ptr<Bootstrap> b;
    if (r == 1) {
      b = std::make_unique<ForgingBootstrap>(&board, r, forge...);
    } else {
      b = std::make_unique<testing::MemoryBootstrap>(&board, r);
    }
    std::unique_ptr<Transport> t;
    Status st = b->createHostTransport(&t);
    SharedMemoryChoice c;
    c.mode = SharedMemory::kAuto;
    c.setting = "auto";
    c.ringBytes = 4096;
    c.windowBytes = window;
    c.timeout = std::chrono::milliseconds(20000);
    if (st.isOk()) st = connectSharedMemory(*b, c, &t);
    out.status[size_t(r)] = st;
    out.cores[size_t(r)] = t && t->windows() != nullptr && t->windows()->coreForEachRank();
  });
  return out;
}

// Single-copy reads (docs/design/protocol.md, "Single-copy read") where every rank can read every other's
// memory (threads of this process: it reads itself) and wants them; a rank with
// RINGGUARD_SHM_SINGLE_COPY_BYTES=0, or without windows, makes every rank copy through the windows.
TEST(ShmTransport, SingleCopyReadsOnlyWhereEveryRankHasThem) {
  const size_t w = 4096, on = 65536;
  const Connected all = connectAll({"auto", "auto", "auto"}, {4096, 4096, 4096}, {}, {w, w, w}, {on, on, on});
  const Connected one = connectAll({"auto", "auto", "auto"}, {4096, 4096, 4096}, {}, {w, w, w}, {on, 0, on});
  const Connected none = connectAll({"auto", "auto"}, {4096, 4096}, {}, {w, w}, {0, 0});
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(all.status[size_t(r)].isOk()) << all.status[size_t(r)].toString();
    ASSERT_TRUE(one.status[size_t(r)].isOk()) << one.status[size_t(r)].toString();
    EXPECT_TRUE(all.windows[size_t(r)] && all.crossReadable[size_t(r)]) << "rank " << r;
    EXPECT_TRUE(one.windows[size_t(r)]) << "rank " << r;
    EXPECT_FALSE(one.crossReadable[size_t(r)]) << "rank " << r << ": rank 1 has them off";
  }
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(none.crossReadable[size_t(r)]) << "rank " << r;
  // The default publishes by address only where every rank can have a core of its own; a value set is
  // used as given.
  const Connected set =
      connectAll({"auto", "auto", "auto"}, {4096, 4096, 4096}, {}, {w, w, w}, {on, on, on}, true);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(all.publishes64K[size_t(r)], coreForEachRank(3)) << "rank " << r;
    EXPECT_TRUE(set.publishes64K[size_t(r)]) << "rank " << r;
    EXPECT_FALSE(one.publishes64K[size_t(r)]) << "rank " << r;
  }
}

// The kernel's copy against memcpy (transport/shm/kernel_copy_cost.h): the two machines measured decide as
// they measured, the measurement itself gives figures, and a group reads from 8 KiB single-copy only where
// every rank measured a fast kernel copy and the setting is unset (a value set is used as given, unmeasured).
TEST(ShmTransport, SingleCopyFromSmallerSizesOnlyWhereEveryRankMeasuredAFastKernelCopy) {
  EXPECT_FALSE(shm::kernelCopyFast({6.20, 1.31})) << "the AMD EPYC VM: the windows won";
  EXPECT_TRUE(shm::kernelCopyFast({3.43, 1.49})) << "the Intel Xeon VM: single-copy won";
  EXPECT_FALSE(shm::kernelCopyFast({})) << "no measurement";
  const shm::KernelCopyCost here = shm::measureKernelCopyCost();
  EXPECT_GT(here.kernelUs, 0.0);
  EXPECT_GT(here.copyUs, 0.0);
  if (!coreForEachRank(2)) GTEST_SKIP() << "one core: the default publishes nothing by address";
  const size_t w = 4096, on = 65536;
  const shm::KernelCopyCost fast{3.0, 1.5}, slow{6.0, 1.5};
  std::atomic<int> measured{0};
  const Connected both =
      connectAll({"auto", "auto"}, {4096, 4096}, {}, {w, w}, {on, on}, false, {fast, fast}, &measured);
  EXPECT_EQ(measured.load(), 2);
  const Connected one = connectAll({"auto", "auto"}, {4096, 4096}, {}, {w, w}, {on, on}, false, {fast, slow});
  measured = 0;
  const Connected set =
      connectAll({"auto", "auto"}, {4096, 4096}, {}, {w, w}, {on, on}, true, {fast, fast}, &measured);
  EXPECT_EQ(measured.load(), 0) << "a value set is not second-guessed";
  for (int r = 0; r < 2; ++r) {
    for (const Connected* c : {&both, &one, &set}) {
      ASSERT_TRUE(c->status[size_t(r)].isOk()) << c->status[size_t(r)].toString();
      ASSERT_TRUE(c->crossReadable[size_t(r)]) << "rank " << r;
      EXPECT_TRUE(c->publishes64K[size_t(r)]) << "rank " << r;
    }
    EXPECT_TRUE(both.publishes8K[size_t(r)]) << "rank " << r;
    EXPECT_FALSE(one.publishes8K[size_t(r)]) << "rank " << r << ": rank 1 measured a slow kernel copy";
    EXPECT_FALSE(set.publishes8K[size_t(r)]) << "rank " << r;
  }
}

// Whether the ranks each have a core of their own, from every rank's CPU set (cpu_sets.h): ranks bound to
// distinct cores do (each sees one CPU in its own set, which coreForEachRank alone reads as sharing), ranks
// bound to one core or more ranks than CPUs do not, and a set that only fits once another rank moves over is
// found by the matching.
TEST(ShmTransport, CoresOfTheirOwnFromEveryRanksCpuSet) {
  using shm::everyRankHasACpu;
  EXPECT_TRUE(everyRankHasACpu({{0}, {1}})) << "bound to distinct cores (mpirun's default at 2 ranks)";
  EXPECT_FALSE(everyRankHasACpu({{3}, {3}})) << "bound to the same core";
  EXPECT_TRUE(everyRankHasACpu({{0, 1}, {0, 1}})) << "unbound, 2 ranks on 2 CPUs";
  EXPECT_FALSE(everyRankHasACpu({{0, 1}, {0, 1}, {0, 1}})) << "unbound, 3 ranks on 2 CPUs";
  EXPECT_TRUE(everyRankHasACpu({{0, 1}, {0}})) << "rank 0 must leave CPU 0 to rank 1";
  EXPECT_TRUE(everyRankHasACpu({{5, 6, 7}, {6}, {5, 6}})) << "two ranks move over";
  EXPECT_FALSE(everyRankHasACpu({{0}, {0, 1, 2}, {0}})) << "3 CPUs in all, but two ranks need CPU 0";
  EXPECT_FALSE(everyRankHasACpu({{0}, {}})) << "a rank with no CPU";
  EXPECT_TRUE(everyRankHasACpu({{-7}, {1 << 30}})) << "peer-sent numbers are only names";
  const std::vector<int> mine = shm::cpusOfThisProcess();
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(int(mine.size()), CPU_COUNT(&set));
  EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
  EXPECT_EQ(everyRankHasACpu({mine, mine}), coreForEachRank(2));
  // The mask a record carries.
  std::vector<int> back;
  EXPECT_EQ(shm::cpuMaskText({0, 1, 5, 4095}).size(), shm::kMaxCpuMaskChars);
  EXPECT_EQ(shm::cpuMaskText({0, 1, 5}), "32");
  ASSERT_TRUE(shm::parseCpuMask(shm::cpuMaskText({0, 1, 5, 4095}), &back));
  EXPECT_EQ(back, (std::vector<int>{0, 1, 5, 4095}));
  ASSERT_TRUE(shm::parseCpuMask(shm::cpuMaskText(mine), &back));
  EXPECT_EQ(back, mine);
  EXPECT_TRUE(shm::parseCpuMask("", &back) && back.empty());
  EXPECT_FALSE(shm::parseCpuMask("3z", &back)) << "not hex";
  EXPECT_TRUE(back.empty()) << "nothing taken from a text that is not a mask";
  EXPECT_FALSE(shm::parseCpuMask("3F", &back)) << "upper case is not what cpuMaskText writes";
  EXPECT_FALSE(shm::parseCpuMask(std::string(shm::kMaxCpuMaskChars + 1, 'f'), &back)) << "too long";
}

// A record whose CPU set or streaming verdict is not what this version writes (another version, a hostile
// peer): the group still connects, with no rank counting on a CPU of its own or on a verdict it cannot read;
// and a group whose windows hold the round trip agrees on its verdict.
TEST(ShmTransport, CpuSetsAndTheStreamingVerdictFromPeersAreCheckedAndAgreed) {
  const size_t w = size_t(128) << 10;
  const Connected honest = connectAll({"auto", "auto"}, {4096, 4096}, {}, {w, w});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(honest.status[size_t(r)].isOk()) << honest.status[size_t(r)].toString();
    EXPECT_EQ(honest.cores[size_t(r)], coreForEachRank(2)) << "rank " << r;
    EXPECT_EQ(honest.streams[size_t(r)], honest.streams[0]) << "rank " << r << ": the verdict is rank 0's";
    if (!honest.cores[size_t(r)]) EXPECT_FALSE(honest.streams[size_t(r)]) << "rank " << r;
  }
  for (const auto& forged :
       std::vector<std::pair<std::string, json>>{{"cpus", "zz"},
                                                 {"cpus", std::string(shm::kMaxCpuMaskChars + 1, 'f')},
                                                 {"cpus", json::array({0})}}) {
    const Forged f = connectWithRank1Forging(2, w, forged.first, forged.second);
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(f.status[size_t(r)].isOk())
          << forged.second.dump() << ": " << f.status[size_t(r)].toString();
      EXPECT_FALSE(f.cores[size_t(r)]) << forged.second.dump() << " rank " << r;
    }
  }
}

// The round trip that decides whether copies into the windows stream (stream_store_choice.h): two ranks
// (threads here) measure both kinds of store, the decision follows the figures, and a rank whose partner
// never comes, or whose partner's flag says something other than the next round, gives up in bounded time.
TEST(ShmTransport, StreamStoreChoiceMeasuresARoundTripAndNeverHangs) {
  EXPECT_TRUE(shm::streamStoresPay({9.9, 6.1})) << "the AMD EPYC VM's 64 KiB round trip";
  EXPECT_FALSE(shm::streamStoresPay({6.0, 5.7})) << "a tenth of the round trip saved, at least";
  EXPECT_FALSE(shm::streamStoresPay({})) << "no measurement";
  const auto area = [] {
    return std::vector<uint64_t>((shm::kStreamProbeAreaBytes + 63) / 8 + 8, 0);  // zeroed, 8-byte aligned
  };
  const auto at = [](std::vector<uint64_t>& v) { return reinterpret_cast<uint8_t*>(v.data()); };
  std::vector<uint64_t> w = area(), r = area();
  shm::StreamStoreCost got[2];
  std::thread reader([&] {
    got[1] = shm::measureStreamStores(false, at(w), at(r), std::chrono::milliseconds(5000),
                                      std::chrono::milliseconds(5000));
  });
  got[0] = shm::measureStreamStores(true, at(w), at(r), std::chrono::milliseconds(5000),
                                    std::chrono::milliseconds(5000));
  reader.join();
  EXPECT_GT(got[0].ordinaryUs, 0.0);
  EXPECT_GT(got[0].streamingUs, 0.0);
  EXPECT_EQ(r[0], 78u) << "the reader answered every round of both kinds";
  std::printf("64 KiB round trip between two threads here: ordinary %.2f us, streaming %.2f us\n",
              got[0].ordinaryUs, got[0].streamingUs);

  const auto alone = [&](bool writer, std::vector<uint64_t>& mine, std::vector<uint64_t>& theirs) {
    const auto start = std::chrono::steady_clock::now();
    const shm::StreamStoreCost c =
        shm::measureStreamStores(writer, writer ? at(mine) : at(theirs), writer ? at(theirs) : at(mine),
                                 std::chrono::milliseconds(50), std::chrono::milliseconds(50));
    EXPECT_EQ(c.ordinaryUs, 0.0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  };
  std::vector<uint64_t> a = area(), b = area();
  alone(true, a, b);  // no reader
  EXPECT_EQ(a[0], UINT64_MAX) << "a writer that gives up says so, so a late reader ends at once";
  std::vector<uint64_t> c = area(), d = area();
  alone(false, c, d);  // no writer
  std::vector<uint64_t> e = area(), f = area();
  e[0] = 5;  // a writer's flag that is not the next round
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(shm::measureStreamStores(false, at(e), at(f), std::chrono::milliseconds(5000),
                                     std::chrono::milliseconds(5000))
                .ordinaryUs,
            0.0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << "no wait for a bad flag";
  EXPECT_EQ(f[0], 0u) << "nothing read, nothing answered";
  // A writer that keeps raising its flag past the measurement's rounds holds the reader no longer.
  std::vector<uint64_t> g = area(), h = area();
  std::atomic<bool> stop{false};
  std::thread hostile([&] {
    auto& sent = *reinterpret_cast<std::atomic<uint64_t>*>(at(g));
    auto& taken = *reinterpret_cast<std::atomic<uint64_t>*>(at(h));
    for (uint64_t k = 1; k < 1000 && !stop.load(); ++k) {
      sent.store(k, std::memory_order_release);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      while (taken.load(std::memory_order_acquire) != k && !stop.load() &&
             std::chrono::steady_clock::now() < until) {
      }
    }
  });
  EXPECT_EQ(shm::measureStreamStores(false, at(g), at(h), std::chrono::milliseconds(5000),
                                     std::chrono::milliseconds(5000))
                .ordinaryUs,
            0.0);
  stop = true;
  hostile.join();
  EXPECT_EQ(h[0], 78u) << "the reader answered the measurement's rounds and no more";
}

// The probe and the read: a pid that is not the process that published (another pid namespace shows another
// process under it), a process that does not exist, an address not mapped there: each an error naming the
// rank, never a read of this process's memory.
TEST(ShmTransport, CrossMemoryReadsOnlyWhatThePeerPublished) {
  const uint64_t nonce = 0x1234567890abcdefULL, other = 42;
  const auto at = [](const uint64_t& v) { return uint64_t(uintptr_t(&v)); };
  EXPECT_TRUE(shm::probeCrossMemory(getpid(), 1, at(nonce), nonce).isOk());
  const Status wrong = shm::probeCrossMemory(getpid(), 1, at(other), nonce);
  EXPECT_EQ(wrong.code(), StatusCode::kTransportError);
  EXPECT_NE(wrong.message().find("rank 1's pid"), std::string::npos) << wrong.message();
  const Status gone = shm::probeCrossMemory(int64_t(1) << 30, 2, at(nonce), nonce);  // beyond pid_max
  EXPECT_EQ(gone.code(), StatusCode::kTransportError);
  EXPECT_NE(gone.message().find("in rank 2's process"), std::string::npos) << gone.message();
  char dst[64];
  const Status unmapped = shm::readCrossMemory(getpid(), 3, 16, dst, sizeof dst);
  EXPECT_EQ(unmapped.code(), StatusCode::kTransportError);
  EXPECT_NE(unmapped.message().find("single-copy read of 64 bytes at 0x10 in rank 3's process"),
            std::string::npos)
      << unmapped.message();
  std::vector<uint8_t> src(100000), got(100000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7);
  ASSERT_TRUE(
      shm::readCrossMemory(getpid(), 0, uint64_t(uintptr_t(src.data())), got.data(), got.size()).isOk());
  EXPECT_EQ(got, src);
}

TEST(ShmTransport, ARecordOfAnotherShapeFailsEveryRankNamingItsSender) {
  for (const char* forged : {R"({"mode": "auto", "ok": "yes", "why": 1})", "not json", R"({"mode": 7})"}) {
    const std::vector<Status> status = connectWithRank1Forging(3, 0, std::string(forged)).status;
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(status[size_t(r)].code(), StatusCode::kTransportError) << forged << " rank " << r;
      EXPECT_NE(status[size_t(r)].message().find("rank 1 sent a record this version cannot read"),
                std::string::npos)
          << status[size_t(r)].message();
    }
  }
}

// A ring no /dev/shm can hold: rank 1 cannot make its segment. auto: every rank keeps the host transport;
// shm (required): every rank fails naming rank 1 and the reason.
TEST(ShmTransport, ARankThatCannotShareMakesEveryRankFallBackOrFail) {
  const size_t huge = size_t(1) << 50;
  const int before = segmentsInDevShm();
  Connected c = connectAll({"auto", "auto", "auto"}, {4096, huge, 4096});
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(c.status[size_t(r)].isOk()) << c.status[size_t(r)].toString();
    EXPECT_EQ(c.name[size_t(r)], "loopback") << "rank " << r;
  }
  c = connectAll({"shm", "shm", "shm"}, {4096, huge, 4096});
  for (int r = 0; r < 3; ++r) {
    const Status& st = c.status[size_t(r)];
    EXPECT_EQ(st.code(), StatusCode::kTransportError) << "rank " << r;
    EXPECT_NE(st.message().find("rank 1 could not make its segment"), std::string::npos) << st.message();
  }
  EXPECT_EQ(segmentsInDevShm(), before);
}

// One ring pair per peer, none for the rank itself: what /dev/shm holds per rank is (N - 1) rings.
TEST(ShmTransport, ASegmentHoldsOneRingPairPerPeer) {
  std::unique_ptr<shm::Segment> two, three;
  ASSERT_TRUE(shm::Segment::create(0, 2, 4096, 1024, 0, &two).isOk());
  ASSERT_TRUE(shm::Segment::create(1, 3, 4096, 1024, 0, &three).isOk());
  struct stat a, b;
  ASSERT_EQ(stat(("/dev/shm" + two->name()).c_str(), &a), 0);
  ASSERT_EQ(stat(("/dev/shm" + three->name()).c_str(), &b), 0);
  EXPECT_EQ(size_t(b.st_size - a.st_size), size_t(4096 + 1024 + 2 * sizeof(shm::RingIndices)));
  EXPECT_LT(size_t(a.st_size), size_t(2 * (4096 + 1024))) << "a ring pair for the rank itself";
  // Rank 1 of 3 keeps distinct rings for senders 0 and 2.
  EXPECT_NE(&three->ring(0), &three->ring(2));
  EXPECT_NE(three->data(0), three->data(2));
  EXPECT_NE(three->controlData(0), three->controlData(2));
}

// Names a killed process left behind: removed when their process is gone and they are old enough; a
// live process's, and a young one, stay.
TEST(ShmTransport, LeftoversOfDeadProcessesAreSwept) {
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  auto make = [](const std::string& name, bool old) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << name;
    close(fd);
    if (old) {
      struct utimbuf t;
      t.actime = t.modtime = time(nullptr) - 3600;
      EXPECT_EQ(utime(("/dev/shm" + name).c_str(), &t), 0);
    }
  };
  auto exists = [](const std::string& name) {
    struct stat st;
    return stat(("/dev/shm" + name).c_str(), &st) == 0;
  };
  const std::string deadOld = "/ringguard-" + std::to_string(dead) + "-0-sweeptest";
  const std::string deadYoung = "/ringguard-" + std::to_string(dead) + "-1-sweeptest";
  const std::string aliveOld = "/ringguard-" + std::to_string(getpid()) + "-99999-sweeptest";
  make(deadOld, true);
  make(deadYoung, false);
  make(aliveOld, true);
  shm::sweepStaleSegments(std::chrono::seconds(60));
  EXPECT_FALSE(exists(deadOld)) << "a dead process's old segment stayed";
  EXPECT_TRUE(exists(deadYoung)) << "a young segment was removed";
  EXPECT_TRUE(exists(aliveOld)) << "a live process's segment was removed";
  shm_unlink(deadYoung.c_str());
  shm_unlink(aliveOld.c_str());
}

// Slices of 64 KiB through rings of 1 KiB: every message streams through in pieces, both ends moving it.
TEST(ShmTransport, MessagesLongerThanTheRingStreamThrough) {
  for (int n : {2, 3}) {
    Options o;
    o.sliceBytes = size_t(64) << 10;
    o.timeout = std::chrono::milliseconds(20000);
    LoopbackGroup g(n, o, Wire::kSharedMemory);
    const size_t count = 100000;  // 400 KB of f32: several slices per rank
    g.run([&](int rank, Communicator& c) {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = float((i % 1000) + size_t(rank));
      const Status st = c.allreduce(v.data(), v.data(), count, DataType::kFloat32, ReduceOp::kSum);
      ASSERT_TRUE(st.isOk()) << st.toString();
      for (size_t i = 0; i < count; ++i) {
        const float want = float(n) * float(i % 1000) + float(n * (n - 1) / 2);
        ASSERT_EQ(v[i], want) << "element " << i << " rank " << rank << " np" << n;
      }
    });
  }
}

// Two ranks' shared-memory transports over mapped segments; `attacker` is a third mapping of rank 1's
// segment, through which a test plays a peer that writes what it likes.
struct Pair {
  std::vector<std::unique_ptr<Transport>> t;
  std::unique_ptr<shm::Segment> attacker;
};
Pair makePair() {
  Pair p;
  p.t = makeLoopbackTransports(2);
  std::vector<std::unique_ptr<shm::Segment>> own(2);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(shm::Segment::create(r, 2, 1024, 1024, 0, &own[size_t(r)]).isOk());
  EXPECT_TRUE(shm::Segment::open(own[1]->name(), 1, 2, own[1]->nonce(), &p.attacker).isOk());
  std::vector<std::vector<std::unique_ptr<shm::Segment>>> peers(2);
  for (int r = 0; r < 2; ++r) {
    const int q = 1 - r;
    peers[size_t(r)].resize(2);
    EXPECT_TRUE(shm::Segment::open(own[size_t(q)]->name(), q, 2, own[size_t(q)]->nonce(),
                                   &peers[size_t(r)][size_t(q)])
                    .isOk());
  }
  for (int r = 0; r < 2; ++r) own[size_t(r)]->unlink();
  for (int r = 0; r < 2; ++r) {
    p.t[size_t(r)] = makeShmTransport(std::move(p.t[size_t(r)]), std::move(own[size_t(r)]),
                                      std::move(peers[size_t(r)]), std::chrono::milliseconds(20000));
  }
  return p;
}

Status waitDone(FrameRequest* req) {
  for (int i = 0; i < 100000; ++i) {
    bool done = false;
    const Status st = req->test(&done);
    if (!st.isOk() || done) return st;
  }
  return Status(StatusCode::kTimeout, "the request did not complete");
}

TEST(ShmTransport, AFrameOfAnotherSizeThanTheReceiveIsAnErrorNamingBoth) {
  Pair p = makePair();
  std::vector<uint8_t> big(100, 7), small(50);
  Trailer sent{}, got{};
  FrameRequest send, recv;
  ASSERT_TRUE(p.t[0]->postSend(1, big.data(), big.size(), &sent, &send).isOk());
  ASSERT_TRUE(p.t[1]->postRecv(0, small.data(), small.size(), &got, &recv).isOk());
  const Status st = waitDone(&recv);
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
  EXPECT_NE(st.message().find("expected a payload of 50 bytes, got a payload of 100 bytes"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(small, std::vector<uint8_t>(50, 0)) << "bytes were written into a receive of the wrong size";
}

TEST(ShmTransport, ARingIndexNoWriterCouldHaveWrittenIsRefused) {
  Pair p = makePair();
  p.attacker->ring(0).head.value.store(uint64_t(1) << 40);  // far more than the ring holds
  std::vector<uint8_t> buf(64);
  Trailer got{};
  FrameRequest recv;
  ASSERT_TRUE(p.t[1]->postRecv(0, buf.data(), buf.size(), &got, &recv).isOk());
  const Status st = waitDone(&recv);
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
  EXPECT_NE(st.message().find("shared-memory data ring from rank 0 is corrupt"), std::string::npos)
      << st.message();
}

// A wait sleeps on the doorbell and wakes when the peer writes.
TEST(ShmTransport, AWaitWakesWhenThePeerWrites) {
  Pair p = makePair();
  std::vector<uint8_t> out(64, 3), in(64);
  Trailer sent{}, got{};
  FrameRequest recv;
  ASSERT_TRUE(p.t[1]->postRecv(0, in.data(), in.size(), &got, &recv).isOk());
  const uint64_t seen = p.t[1]->eventCount();
  bool done = false;
  ASSERT_TRUE(recv.test(&done).isOk());
  ASSERT_FALSE(done);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    FrameRequest send;
    ASSERT_TRUE(p.t[0]->postSend(1, out.data(), out.size(), &sent, &send).isOk());
    EXPECT_TRUE(waitDone(&send).isOk());
  });
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(p.t[1]->waitForEvent(seen, std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "the write did not wake the wait";
  sender.join();
  ASSERT_TRUE(waitDone(&recv).isOk());
  EXPECT_EQ(in, out);
}

}  // namespace
}  // namespace ringguard
