#pragma once
// What the staged collectives' unit suites (test_staged_allgather.cc, test_staged_allreduce.cc) share: a
// stager whose copies only happen when their slot is waited for, a stager that has no memory to give, and
// running one call per rank with its own arguments.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loopback_util.h"
#include "ringguard/runtime/host_stager.h"

namespace ringguard {
namespace testing {

// Copies run when their slot is waited for, as a device stager's asynchronous copies may (so a missing
// wait, or a slot reused too early, shows as a wrong result); host memory counted, so the bound on staging
// memory is checked.
class DeferredStager final : public HostStager {
 public:
  Status allocateHost(size_t bytes, void** ptr) override {
    RINGGUARD_RETURN_IF_ERROR(inner_->allocateHost(bytes, ptr));
    held += bytes;
    return Status::ok();
  }
  Status freeHost(void* ptr) override { return inner_->freeHost(ptr); }
  Status toHost(void* dst, const void* src, size_t bytes, int slot) override {
    to_[slot].push_back([=] { std::memcpy(dst, src, bytes); });
    return Status::ok();
  }
  Status fromHost(void* dst, const void* src, size_t bytes, int slot) override {
    from_[slot].push_back([=] { std::memcpy(dst, src, bytes); });
    return Status::ok();
  }
  Status waitToHost(int slot) override { return drain(&to_[slot]); }
  Status waitFromHost(int slot) override { return drain(&from_[slot]); }

  size_t held = 0;

 private:
  static Status drain(std::deque<std::function<void()>>* q) {
    while (!q->empty()) {
      q->front()();
      q->pop_front();
    }
    return Status::ok();
  }
  std::unique_ptr<HostStager> inner_ = makeMemcpyStager();
  std::deque<std::function<void()>> to_[2], from_[2];
};

// Staging memory the stager cannot provide.
class NoMemoryStager final : public HostStager {
 public:
  Status allocateHost(size_t, void**) override { return Status(StatusCode::kInternal, "no pinned memory"); }
  Status freeHost(void*) override { return Status::ok(); }
  Status toHost(void*, const void*, size_t, int) override { return Status::ok(); }
  Status fromHost(void*, const void*, size_t, int) override { return Status::ok(); }
  Status waitToHost(int) override { return Status::ok(); }
  Status waitFromHost(int) override { return Status::ok(); }
};

// Small slices, so that every chunk's host collective takes several; a timeout long enough for loaded CI.
inline Options stagedTestOptions() {
  Options o;
  o.sliceBytes = 64;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

// The fault modes the staged suites inject into the chunks' host collectives (gtest parameters, named by
// faultModeParamName).
inline auto stagedFaultModes() {
  return ::testing::Values(FaultMode::kBitFlip, FaultMode::kBurst, FaultMode::kGarbage, FaultMode::kTrailer,
                           FaultMode::kRetransmit);
}

// Runs `calls` on groups of 2, 3 and 4 ranks whose collectives get `mode` faults on 15% of the slices
// (up to 5 retries), then checks that faults were injected, that every one was detected and repaired by
// retransmission, and that none escaped. `calls` checks its own results bit for bit.
inline void underFaults(FaultMode mode, const std::function<void(LoopbackGroup&)>& calls) {
  for (int n : {2, 3, 4}) {
    Options o = stagedTestOptions();
    o.sliceBytes = 256;
    o.maxRetries = 5;
    o.fault.mode = mode;
    o.fault.probability = 0.15;
    o.fault.seed = 11;
    LoopbackGroup g(n, o);
    calls(g);
    const Counters c = g.totalCounters();
    EXPECT_GT(c.injected, 0u) << "np" << n;
    EXPECT_EQ(c.detected, c.injected) << "np" << n;
    EXPECT_GT(c.retransmitted, 0u) << "np" << n;
    EXPECT_EQ(c.escaped, 0u) << "np" << n;
  }
}

// Each rank calls with its own arguments and a memcpy stager of its own; returns every rank's Status.
inline std::vector<Status> runWith(LoopbackGroup& g,
                                   const std::function<Status(int rank, Communicator&, HostStager&)>& call) {
  std::vector<Status> out(size_t(g.size()));
  g.run([&](int rank, Communicator& c) {
    std::unique_ptr<HostStager> stager = makeMemcpyStager();
    out[size_t(rank)] = call(rank, c, *stager);
  });
  return out;
}

inline void expectInvalid(const Status& st, const std::string& text) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
  EXPECT_NE(st.message().find(text), std::string::npos) << st.toString();
}

// Every rank but `refusing` failed with kPeerError naming it.
inline void expectPeersHeard(const std::vector<Status>& st, int refusing) {
  for (size_t r = 0; r < st.size(); ++r) {
    if (int(r) == refusing) continue;
    EXPECT_EQ(st[r].code(), StatusCode::kPeerError) << st[r].toString();
    EXPECT_NE(st[r].message().find("rank " + std::to_string(refusing) + " refused the call"),
              std::string::npos)
        << st[r].toString();
  }
}

}  // namespace testing
}  // namespace ringguard
