// Settings that used to be accepted and then broke at run time or were silently ignored (issue 17,
// defects 3, 4, 5 and 7's LOG_LEVEL aliases), and the progress thread's handling of an allocation failure.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <cstdint>
#include <limits>
#include <map>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/ring_plan.h"
#include "core/env.h"
#include "core/fault_injector.h"
#include "core/logging.h"
#include "executor/host_executor.h"
#include "loopback_util.h"
#include "ringguard/core/options.h"

namespace ringguard {
namespace {

using Env = std::map<std::string, std::string>;

Status parse(const Env& env, Options* out) {
  return Options::fromLookup(
      [&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      out);
}

// The error names the variable and the value as given.
void expectRejected(const std::string& name, const std::string& value) {
  Options o;
  Status st = parse({{name, value}}, &o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << name << "='" << value << "'";
  EXPECT_NE(st.message().find(name + "='" + value + "'"), std::string::npos) << st.message();
}

void expectAccepted(const std::string& name, const std::string& value) {
  Options o;
  Status st = parse({{name, value}}, &o);
  EXPECT_TRUE(st.isOk()) << name << "='" << value << "': " << st.toString();
}

TEST(SettingsBounds, SliceBytesHasAnUpperBound) {
  expectAccepted("RINGGUARD_SLICE_BYTES", "1073741824");
  expectRejected("RINGGUARD_SLICE_BYTES", "1073741825");
  expectRejected("RINGGUARD_SLICE_BYTES", "9223372036854775807");
  expectRejected("RINGGUARD_SLICE_BYTES", "99999999999999999999");
  Options o;
  o.sliceBytes = Options::kMaxSliceBytes + 1;
  Status st = o.validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sliceBytes"), std::string::npos) << st.message();
}

TEST(SettingsBounds, TimeoutCannotOverflowNanoseconds) {
  expectAccepted("RINGGUARD_TIMEOUT_MS", "31536000000");
  expectRejected("RINGGUARD_TIMEOUT_MS", "31536000001");
  expectRejected("RINGGUARD_TIMEOUT_MS", "9223372036854775807");
  expectRejected("RINGGUARD_TIMEOUT_MS", "0");
  expectRejected("RINGGUARD_TIMEOUT_MS", "-5");
  Options o;
  o.timeout = std::chrono::milliseconds(INT64_MAX);
  EXPECT_EQ(o.validate().code(), StatusCode::kInvalidArgument);
  // In nanoseconds, with the slack the control rounds add (k x timeout / 4, k up to 31), it still fits.
  EXPECT_LT(Options::kMaxTimeoutMs, INT64_MAX / 1000000 / 9);
}

// Device settings are checked by the same parser as the rest, on a machine without a GPU, when the
// options are read (group or communicator creation), and out-of-range numbers are not wrapped.
TEST(SettingsBounds, DeviceSettingsValidatedWithoutAGpu) {
  expectRejected("RINGGUARD_DEVICE_TRANSPORT", "bogus");
  expectAccepted("RINGGUARD_DEVICE_TRANSPORT", "staged");
  expectRejected("RINGGUARD_POOL_RELEASE_BYTES", " -5");
  expectRejected("RINGGUARD_POOL_RELEASE_BYTES", "-5");
  expectRejected("RINGGUARD_POOL_RELEASE_BYTES", "99999999999999999999");
  expectRejected("RINGGUARD_POOL_RELEASE_BYTES", "281474976710657");  // 2^48 + 1
  expectRejected("RINGGUARD_POOL_RELEASE_BYTES", "12 ");
  expectAccepted("RINGGUARD_POOL_RELEASE_BYTES", "0");
  expectRejected("RINGGUARD_NCCL_LANES", "9");
  expectRejected("RINGGUARD_NCCL_LANES", "+2");
  expectRejected("RINGGUARD_CPU_TRANSPORT", "tcp");
  expectRejected("RINGGUARD_KERNEL_SMS", "-1");

  DeviceSettings d;
  ASSERT_TRUE(DeviceSettings::fromLookup(
                  [](const char* name) -> const char* {
                    if (std::string(name) == "RINGGUARD_POOL_RELEASE_BYTES") return "281474976710656";
                    if (std::string(name) == "RINGGUARD_NCCL_LANES") return "8";
                    if (std::string(name) == "RINGGUARD_DEVICE_TRANSPORT") return "nccl";
                    return nullptr;
                  },
                  &d)
                  .isOk());
  EXPECT_EQ(d.poolReleaseBytes, uint64_t(1) << 48);
  EXPECT_EQ(d.ncclLanes, 8);
  EXPECT_EQ(d.transport, "nccl");
}

TEST(SettingsBounds, UnsignedParserNamesWhatIsWrong) {
  uint64_t v = 7;
  Status st = parseUnsignedSetting("RINGGUARD_X", "99999999999999999999", 0, 10, &v);
  EXPECT_NE(st.message().find("too large"), std::string::npos) << st.message();
  st = parseUnsignedSetting("RINGGUARD_X", "11", 0, 10, &v);
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.message();
  st = parseUnsignedSetting("RINGGUARD_X", " 1", 0, 10, &v);
  EXPECT_NE(st.message().find("not a non-negative decimal integer"), std::string::npos) << st.message();
  EXPECT_EQ(v, 7u);
  ASSERT_TRUE(parseUnsignedSetting("RINGGUARD_X", "10", 0, 10, &v).isOk());
  EXPECT_EQ(v, 10u);
}

// Slots are sized to the largest slice of the collective, not to the configured slice.
TEST(SlotSizing, SlotsFollowTheCollectiveNotTheSliceSetting) {
  const size_t kGiB = size_t(1) << 30;
  // RingPlan keeps a reference to its schedule: the schedules are named, not temporaries.
  const RingSchedule tiny(2, 3, 4, kGiB);
  RingPlan small(RingPlan::Kind::kAllreduce, tiny, 0, DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                 nullptr);
  EXPECT_EQ(small.slotBytes(), 12u);
  const RingSchedule s(3, 1001, 8, kGiB);
  RingPlan odd(RingPlan::Kind::kAllreduce, s, 0, DataType::kFloat64, ReduceOp::kSum, nullptr, nullptr,
               nullptr);
  const size_t largest = std::max(s.column(0).count, s.column(2).count);
  EXPECT_EQ(odd.slotBytes(), largest * 8);
  const RingSchedule blocks = RingSchedule::blocks(2, 1 << 20, 4, 4096);
  RingPlan big(RingPlan::Kind::kReduceScatter, blocks, 0, DataType::kFloat32, ReduceOp::kSum, nullptr,
               nullptr, nullptr);
  EXPECT_EQ(big.slotBytes(), 4096u);
}

long maxRssKiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(SlotSizing, TinyAllreduceWithGiantSlicesStaysSmall) {
  Options o;
  o.sliceBytes = Options::kMaxSliceBytes;
  const long before = maxRssKiB();
  testing::LoopbackGroup g(2, o);
  g.run([](int rank, Communicator& c) {
    std::vector<float> v = {float(rank), 1.0f, 2.0f};
    ASSERT_TRUE(c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).isOk());
    EXPECT_EQ(v, (std::vector<float>{1.0f, 2.0f, 4.0f}));
  });
  // Before: two 1 GiB slots per rank, zero-filled (4 GiB resident).
  EXPECT_LT(maxRssKiB() - before, 64 * 1024);
}

// An executor whose allocation fails: the error must come back as the collective's Status, not end the
// process through std::terminate on the progress thread.
class ThrowingExecutor final : public Executor {
 public:
  Status prepare(size_t, int, size_t) override { throw std::bad_alloc(); }
  Trailer* sendTrailer(size_t item) override { return inner_.sendTrailer(item); }
  void* slot(int index) override { return inner_.slot(index); }
  Trailer* slotTrailer(int index) override { return inner_.slotTrailer(index); }
  Status sealFirst(size_t item, const void* data, const SliceId& id) override {
    return inner_.sealFirst(item, data, id);
  }
  Status retag(size_t item, uint16_t attempt) override { return inner_.retag(item, attempt); }
  Status corruptReceived(int index, void* payload, size_t bytes, const CorruptionPlan& plan) override {
    return inner_.corruptReceived(index, payload, bytes, plan);
  }
  Status verifyAndApply(const ApplyTask& task, int index, size_t item, size_t nextItem) override {
    return inner_.verifyAndApply(task, index, item, nextItem);
  }
  Status copy(void* dst, const void* src, size_t bytes) override { return inner_.copy(dst, src, bytes); }
  Status scratch(size_t bytes, void** out) override { return inner_.scratch(bytes, out); }
  Status syncTest(bool* done) override { return inner_.syncTest(done); }
  SliceCheck verdict(size_t item) const override { return inner_.verdict(item); }

 private:
  HostExecutor inner_;
};

TEST(AllocationFailure, BecomesTheCollectivesStatus) {
  std::shared_ptr<LoopbackFabric> fabric;
  std::vector<std::unique_ptr<Transport>> transports = makeLoopbackTransports(2, &fabric);
  Options o;
  o.timeout = std::chrono::milliseconds(5000);
  o.sliceBytes = 1024;  // the pipeline, which allocates (a payload within one slice travels in one round)
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : transports) {
    comms.push_back(makeCommunicator(std::move(t), o, std::make_unique<ThrowingExecutor>()));
  }
  testing::runRanks(2, [&](int rank) {
    std::vector<float> v(1000, 1.0f);
    Status st =
        comms[size_t(rank)]->allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    // Its own failure, or the peer's announced one when that arrived first: out of memory either way.
    EXPECT_TRUE(st.code() == StatusCode::kInternal || st.code() == StatusCode::kPeerError) << st.toString();
    EXPECT_NE(st.message().find("out of memory"), std::string::npos) << st.toString();
    // The communicator is poisoned with it, and the process is still here.
    EXPECT_FALSE(comms[size_t(rank)]->firstError().isOk());
  });
}

TEST(AllocationFailure, HostExecutorReturnsAStatus) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer allocators abort on an impossible allocation instead of throwing";
#else
  HostExecutor exec;
  Status st = exec.prepare(4, 2, size_t(1) << 62);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("cannot allocate"), std::string::npos) << st.message();
  void* p = nullptr;
  st = exec.scratch(size_t(1) << 62, &p);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  ASSERT_TRUE(exec.prepare(4, 2, 64).isOk());  // still usable
#endif
}

// Schedule entries that can never fire are errors once the world size is known.
TEST(FaultScheduleReach, ImpossibleEntriesAreErrors) {
  FaultOptions f;
  f.schedule = {{0, 1, 0, 1}};
  EXPECT_TRUE(checkFaultSchedule(f, 2).isOk());
  f.schedule = {{0, 2, 0, 1}};  // 2 ranks: steps 0..1
  Status st = checkFaultSchedule(f, 2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("0:2:0:1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("step 2"), std::string::npos) << st.message();
  EXPECT_TRUE(checkFaultSchedule(f, 3).isOk());
  f.schedule = {{0, 0, 0, 4}};
  st = checkFaultSchedule(f, 4);
  EXPECT_NE(st.message().find("rank 4 does not exist"), std::string::npos) << st.message();
  f.mode = FaultMode::kControl;
  f.schedule = {{0, 2, 1, 0}};
  EXPECT_TRUE(checkFaultSchedule(f, 2).isOk());
  f.schedule = {{0, 4, 1, 0}};
  EXPECT_NE(checkFaultSchedule(f, 2).message().find("tag 4"), std::string::npos);
  f.schedule = {{0, 1, 0, 0}};
  EXPECT_NE(checkFaultSchedule(f, 2).message().find("receiver itself"), std::string::npos);
  f.schedule = {{0, 1, 2, 0}};
  EXPECT_NE(checkFaultSchedule(f, 2).message().find("sender 2 does not exist"), std::string::npos);

  Options o;
  o.fault.schedule = {{0, 0, 0, 2}};
  EXPECT_TRUE(o.validate().isOk());  // without a world size nothing is known
  EXPECT_EQ(o.validateFor(2).code(), StatusCode::kInvalidArgument);
}

// Found by tests/fuzz/fuzz_fault_schedule.cc (UBSan: signed overflow in 2 * (worldSize - 1)): past 2^30
// ranks the step bound wrapped (to -4 at INT_MAX, so every step but 0 read as one no plan has). No real
// group is that large, but checkFaultSchedule is a public entry point taking any int.
TEST(FaultScheduleReach, HugeWorldSizesDoNotOverflowTheStepBound) {
  FaultOptions f;
  f.schedule = {{0, 5, 0, 0}, {0, std::numeric_limits<int>::max(), 0, 1}};
  EXPECT_TRUE(checkFaultSchedule(f, std::numeric_limits<int>::max()).isOk());
  EXPECT_TRUE(checkFaultSchedule(f, (1 << 30) + 3).isOk());
  f.schedule = {{0, 0, 0, 0}};
  EXPECT_TRUE(checkFaultSchedule(f, 1).isOk());  // one rank: step 0 only
  f.schedule = {{0, 1, 0, 0}};
  EXPECT_NE(checkFaultSchedule(f, 1).message().find("steps 0..0"), std::string::npos);
  EXPECT_NE(checkFaultSchedule(f, std::numeric_limits<int>::min()).message().find("rank 0 does not exist"),
            std::string::npos);
}

TEST(FaultScheduleReach, SetFaultRejectsAnEntryThatCannotFire) {
  testing::LoopbackGroup g(2, Options());
  FaultOptions f;
  f.schedule = {{0, 0, 0, 2}};
  Status st = g.comm(0).setFault(f);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 2 does not exist"), std::string::npos) << st.message();
  f.schedule = {{0, 0, 0, 1}};
  EXPECT_TRUE(g.comm(0).setFault(f).isOk());
}

// Misspelt RINGGUARD_* variables warn, naming the closest registered one; the tools' own are left alone.
TEST(UnknownEnv, WarningsNameTheClosestVariable) {
  std::string a = "RINGGUARD_FAULT_PROBABILITY=0.5", b = "RINGGUARD_TIMEOUT=5", c = "RINGGUARD_SLOTS=2",
              d = "RINGGUARD_TEST_SMOKE=1", e = "PATH=/bin", f = "RINGGUARD_AUTOLOAD=0";
  char* env[] = {a.data(), b.data(), c.data(), d.data(), e.data(), f.data(), nullptr};
  const std::vector<std::string> w = unknownEnvWarnings(env);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("RINGGUARD_FAULT_PROBABILITY"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("did you mean RINGGUARD_FAULT_PROB?"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("did you mean RINGGUARD_TIMEOUT_MS?"), std::string::npos) << w[1];
  EXPECT_EQ(closestEnvName("RINGGUARD_SLICE_BYTE"), "RINGGUARD_SLICE_BYTES");
  EXPECT_EQ(findEnvVar("RINGGUARD_NOT_A_VARIABLE"), nullptr);
}

// Once per process: run in a fresh process (threadsafe death tests re-execute the binary), where no earlier
// test has read the environment yet.
TEST(UnknownEnvDeathTest, WarnsOncePerProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("RINGGUARD_FAULT_PROBABILITY", "0.5", 1);
        std::ostringstream os;
        logger()->sinks().push_back(std::make_shared<spdlog::sinks::ostream_sink_mt>(os));
        Options o;
        const bool ok = Options::fromEnv(&o).isOk() && Options::fromEnv(&o).isOk();
        const std::string text = os.str();
        size_t count = 0;
        for (size_t at = text.find("RINGGUARD_FAULT_PROBABILITY"); at != std::string::npos;
             at = text.find("RINGGUARD_FAULT_PROBABILITY", at + 1)) {
          ++count;
        }
        const bool named = text.find("did you mean RINGGUARD_FAULT_PROB?") != std::string::npos;
        std::exit(ok && count == 1 && named ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Defect 7: spdlog takes "warning" and "err" besides its level names; they were accepted but named nowhere.
// Every spelling the logger takes is now in the registry (docs/ENV.md) and in both error texts, and keeps
// its meaning through Options.
TEST(LogLevelAliases, EveryAcceptedSpellingIsDocumented) {
  const std::string doc = findEnvVar("RINGGUARD_LOG_LEVEL")->description;
  const char* candidates[] = {"trace", "debug", "info", "warn",     "warning", "error",  "err",  "critical",
                              "off",   "WARN",  "Warn", "fatal",    "crit",    "notice", "verb", "verbose",
                              "dbg",   "inf",   "trc",  "warning ", " warn",   "0",      "3",    "6",
                              "W",     "E",     "I",    "D",        "T",       "C",      "O",    "none"};
  for (const char* level : candidates) {
    Options o;
    const Status st = parse({{"RINGGUARD_LOG_LEVEL", level}}, &o);
    EXPECT_EQ(st.isOk(), isValidLogLevel(level)) << level;
    if (!isValidLogLevel(level)) {
      EXPECT_NE(st.message().find("warn (or warning), error (or err)"), std::string::npos) << st.message();
      continue;
    }
    EXPECT_EQ(o.logLevel, level);
    const std::string l(level);
    const bool named =
        doc.find(" " + l + ",") != std::string::npos || doc.find(" " + l + " ") != std::string::npos ||
        doc.find("(or " + l + ")") != std::string::npos || doc.find(" " + l + ".") != std::string::npos;
    EXPECT_TRUE(named) << "log level '" << level << "' is accepted but not in the registry: " << doc;
  }
  Options bad;
  bad.logLevel = "verbose";
  EXPECT_NE(bad.validate().message().find("warn (or warning), error (or err)"), std::string::npos);
  // The aliases mean what their names say.
  EXPECT_EQ(spdlog::level::from_str("warning"), spdlog::level::warn);
  EXPECT_EQ(spdlog::level::from_str("err"), spdlog::level::err);
}

}  // namespace
}  // namespace ringguard
