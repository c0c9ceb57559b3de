// Options from RINGGUARD_* variables, the env registry and its generated documentation.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ringguard/core/env.h"
#include "ringguard/core/log.h"
#include "ringguard/core/options.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace {

// Clears every registered variable for the test and puts the caller's environment back afterwards, so
// tests neither see the developer's shell settings nor leak into each other.
class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const EnvVar& v : envRegistry()) {
      const char* value = std::getenv(v.name);
      if (value != nullptr) saved_[v.name] = value;
      unsetenv(v.name);
    }
  }
  void TearDown() override {
    for (const EnvVar& v : envRegistry()) {
      auto it = saved_.find(v.name);
      if (it == saved_.end()) {
        unsetenv(v.name);
      } else {
        setenv(v.name, it->second.c_str(), 1);
      }
    }
  }
  static void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

 private:
  std::map<std::string, std::string> saved_;
};

void expectDefaults(const Options& o) {
  const Options d;
  EXPECT_EQ(o.sliceBytes, d.sliceBytes);
  EXPECT_EQ(o.slots, d.slots);
  EXPECT_EQ(o.maxRetries, d.maxRetries);
  EXPECT_EQ(o.timeout, d.timeout);
  EXPECT_EQ(o.logLevel, d.logLevel);
  EXPECT_EQ(o.fault.mode, d.fault.mode);
  EXPECT_EQ(o.fault.probability, d.fault.probability);
  EXPECT_EQ(o.fault.schedule, d.fault.schedule);
  EXPECT_EQ(o.fault.seed, d.fault.seed);
  EXPECT_EQ(o.fault.bits, d.fault.bits);
  EXPECT_EQ(o.fault.burstBits, d.fault.burstBits);
  EXPECT_EQ(o.fault.delayMs, d.fault.delayMs);
  EXPECT_EQ(o.fault.repeat, d.fault.repeat);
}

TEST_F(EnvTest, UnsetGivesDefaults) {
  Options o;
  ASSERT_TRUE(Options::fromEnv(&o).isOk());
  expectDefaults(o);
  EXPECT_TRUE(o.validate().isOk());
  EXPECT_FALSE(o.fault.enabled());
}

TEST_F(EnvTest, StartsFromDefaultsNotFromOut) {
  Options o;
  o.sliceBytes = 7;
  o.slots = 9;
  o.logLevel = "trace";
  o.fault.probability = 0.5;
  o.fault.schedule.push_back({1, 2, 3, 4});
  ASSERT_TRUE(Options::fromEnv(&o).isOk());
  expectDefaults(o);
}

// The registry's documented defaults must be the real ones: setting each variable to its documented
// default changes nothing.
TEST_F(EnvTest, RegistryDefaultsMatchOptionsDefaults) {
  for (const EnvVar& v : envRegistry()) set(v.name, v.defaultValue);
  Options o;
  const Status s = Options::fromEnv(&o);
  ASSERT_TRUE(s.isOk()) << s.toString();
  expectDefaults(o);
}

struct GoodCase {
  const char* name;
  std::string value;
  std::function<void(const Options&)> check;
};

TEST_F(EnvTest, GoodValues) {
  const std::vector<GoodCase> cases = {
      {"RINGGUARD_SLICE_BYTES", "0", [](const Options& o) { EXPECT_EQ(o.sliceBytes, 0u); }},
      {"RINGGUARD_SLICE_BYTES", "1", [](const Options& o) { EXPECT_EQ(o.sliceBytes, 1u); }},
      {"RINGGUARD_SLICE_BYTES", "4194304", [](const Options& o) { EXPECT_EQ(o.sliceBytes, 4194304u); }},
      {"RINGGUARD_SLOTS", "0", [](const Options& o) { EXPECT_EQ(o.slots, 0); }},
      {"RINGGUARD_SLOTS", "2", [](const Options& o) { EXPECT_EQ(o.slots, 2); }},
      {"RINGGUARD_SLOTS", "64", [](const Options& o) { EXPECT_EQ(o.slots, 64); }},
      {"RINGGUARD_MAX_RETRIES", "0", [](const Options& o) { EXPECT_EQ(o.maxRetries, 0); }},
      {"RINGGUARD_MAX_RETRIES", "100", [](const Options& o) { EXPECT_EQ(o.maxRetries, 100); }},
      {"RINGGUARD_TIMEOUT_MS", "1", [](const Options& o) { EXPECT_EQ(o.timeout.count(), 1); }},
      {"RINGGUARD_TIMEOUT_MS", "3600000", [](const Options& o) { EXPECT_EQ(o.timeout.count(), 3600000); }},
      {"RINGGUARD_LOG_LEVEL", "debug", [](const Options& o) { EXPECT_EQ(o.logLevel, "debug"); }},
      {"RINGGUARD_LOG_LEVEL", "off", [](const Options& o) { EXPECT_EQ(o.logLevel, "off"); }},
      {"RINGGUARD_FAULT_MODE", "burst", [](const Options& o) { EXPECT_EQ(o.fault.mode, FaultMode::kBurst); }},
      {"RINGGUARD_FAULT_MODE", "delay", [](const Options& o) { EXPECT_EQ(o.fault.mode, FaultMode::kDelay); }},
      {"RINGGUARD_FAULT_PROB", "0.25",
       [](const Options& o) {
         EXPECT_DOUBLE_EQ(o.fault.probability, 0.25);
         EXPECT_TRUE(o.fault.enabled());
       }},
      {"RINGGUARD_FAULT_PROB", "1", [](const Options& o) { EXPECT_EQ(o.fault.probability, 1.0); }},
      {"RINGGUARD_FAULT_PROB", "1e-3", [](const Options& o) { EXPECT_DOUBLE_EQ(o.fault.probability, 1e-3); }},
      {"RINGGUARD_FAULT_SCHEDULE", "0:1:2:3,5:0:0:1",
       [](const Options& o) {
         const std::vector<FaultScheduleEntry> want = {{0, 1, 2, 3}, {5, 0, 0, 1}};
         EXPECT_EQ(o.fault.schedule, want);
         EXPECT_TRUE(o.fault.enabled());
       }},
      {"RINGGUARD_FAULT_SCHEDULE", "", [](const Options& o) { EXPECT_TRUE(o.fault.schedule.empty()); }},
      {"RINGGUARD_FAULT_SEED", "0", [](const Options& o) { EXPECT_EQ(o.fault.seed, 0u); }},
      {"RINGGUARD_FAULT_SEED", "18446744073709551615",
       [](const Options& o) { EXPECT_EQ(o.fault.seed, UINT64_MAX); }},
      {"RINGGUARD_FAULT_BITS", "1", [](const Options& o) { EXPECT_EQ(o.fault.bits, 1); }},
      {"RINGGUARD_FAULT_BITS", "64", [](const Options& o) { EXPECT_EQ(o.fault.bits, 64); }},
      {"RINGGUARD_FAULT_BURST_BITS", "2", [](const Options& o) { EXPECT_EQ(o.fault.burstBits, 2); }},
      {"RINGGUARD_FAULT_BURST_BITS", "32", [](const Options& o) { EXPECT_EQ(o.fault.burstBits, 32); }},
      {"RINGGUARD_FAULT_DELAY_MS", "0", [](const Options& o) { EXPECT_EQ(o.fault.delayMs, 0); }},
      {"RINGGUARD_FAULT_DELAY_MS", "600000", [](const Options& o) { EXPECT_EQ(o.fault.delayMs, 600000); }},
      {"RINGGUARD_FAULT_REPEAT", "1", [](const Options& o) { EXPECT_EQ(o.fault.repeat, 1); }},
      {"RINGGUARD_FAULT_REPEAT", "5", [](const Options& o) { EXPECT_EQ(o.fault.repeat, 5); }},
  };
  for (const GoodCase& c : cases) {
    SCOPED_TRACE(std::string(c.name) + "=" + c.value);
    set(c.name, c.value);
    Options o;
    const Status s = Options::fromEnv(&o);
    ASSERT_TRUE(s.isOk()) << s.toString();
    c.check(o);
    EXPECT_TRUE(o.validate().isOk());
    unsetenv(c.name);
  }
}

// The c10d backend layers pg_options over the environment through fromLookup: a name the lookup answers
// wins, the rest fall through to the environment, and bad values name the variable as fromEnv does.
TEST_F(EnvTest, FromLookupLayersOverTheEnvironment) {
  set("RINGGUARD_SLOTS", "5");
  set("RINGGUARD_SLICE_BYTES", "8192");
  const std::map<std::string, std::string> overrides{{"RINGGUARD_SLICE_BYTES", "4096"},
                                                     {"RINGGUARD_FAULT_MODE", "burst"}};
  auto lookup = [&](const char* name) -> const char* {
    auto it = overrides.find(name);
    return it != overrides.end() ? it->second.c_str() : envLookup(name);
  };
  Options o;
  ASSERT_TRUE(Options::fromLookup(lookup, &o).isOk());
  EXPECT_EQ(o.sliceBytes, 4096u);
  EXPECT_EQ(o.slots, 5);
  EXPECT_EQ(o.fault.mode, FaultMode::kBurst);

  const std::map<std::string, std::string> bad{{"RINGGUARD_FAULT_PROB", "1.5"}};
  Status st = Options::fromLookup(
      [&](const char* name) -> const char* {
        auto it = bad.find(name);
        return it != bad.end() ? it->second.c_str() : nullptr;
      },
      &o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("RINGGUARD_FAULT_PROB='1.5'"), std::string::npos) << st.message();
}

TEST_F(EnvTest, BadValuesNameTheVariableAndValue) {
  const std::vector<std::pair<const char*, std::vector<std::string>>> cases = {
      {"RINGGUARD_SLICE_BYTES",
       {"abc", "", "-1", "12abc", " 12", "12 ", "+5", "1e3", "0x10", "99999999999999999999999"}},
      {"RINGGUARD_SLOTS", {"1", "65", "2.5", "-2", "two"}},
      {"RINGGUARD_MAX_RETRIES", {"-1", "101", "3x"}},
      {"RINGGUARD_TIMEOUT_MS", {"0", "-5", "x", "1.5"}},
      {"RINGGUARD_LOG_LEVEL", {"verbose", "WARN", ""}},
      {"RINGGUARD_FAULT_MODE", {"flip", "", "BITFLIP"}},
      {"RINGGUARD_FAULT_PROB", {"-0.1", "1.5", "nan", "inf", "0.5x", "", " 0.5"}},
      {"RINGGUARD_FAULT_SCHEDULE",
       {"1:2:3", "1:2:3:4:5", "a:b:c:d", "1:2:3:-4", "1:2:3:4,", ",1:2:3:4", "1:2:3:4;5:6:7:8", "-1:0:0:0"}},
      {"RINGGUARD_FAULT_SEED", {"-1", "18446744073709551616", "seed"}},
      {"RINGGUARD_FAULT_BITS", {"0", "65"}},
      {"RINGGUARD_FAULT_BURST_BITS", {"1", "33"}},
      {"RINGGUARD_FAULT_DELAY_MS", {"-1", "600001"}},
      {"RINGGUARD_FAULT_REPEAT", {"0", "-1", "99999999999"}},
  };
  for (const auto& [name, values] : cases) {
    for (const std::string& value : values) {
      SCOPED_TRACE(std::string(name) + "='" + value + "'");
      set(name, value);
      Options o;
      o.slots = 17;  // a failed read must leave *out alone
      const Status s = Options::fromEnv(&o);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find(std::string(name) + "='" + value + "'"), std::string::npos) << s.message();
      EXPECT_EQ(o.slots, 17);
      unsetenv(name);
    }
  }
}

TEST_F(EnvTest, ErrorMessageStyle) {
  set("RINGGUARD_SLICE_BYTES", "abc");
  Options o;
  const Status s = Options::fromEnv(&o);
  EXPECT_EQ(s.message(),
            "RINGGUARD_SLICE_BYTES='abc': not a non-negative decimal integer: expected [0, 1073741824]");
  EXPECT_EQ(s.toString(),
            "InvalidArgument: RINGGUARD_SLICE_BYTES='abc': not a non-negative decimal integer: expected [0, "
            "1073741824]");
}

TEST_F(EnvTest, LookupReadsRegisteredVariables) {
  EXPECT_EQ(envLookup("RINGGUARD_SLOTS"), nullptr);
  set("RINGGUARD_SLOTS", "4");
  ASSERT_NE(envLookup("RINGGUARD_SLOTS"), nullptr);
  EXPECT_STREQ(envLookup("RINGGUARD_SLOTS"), "4");
}

TEST(EnvDeathTest, LookupOfUnregisteredVariableAborts) {
  EXPECT_DEATH((void)envLookup("RINGGUARD_NOT_A_VARIABLE"), "RINGGUARD_NOT_A_VARIABLE.*not in the registry");
}

TEST(FaultScheduleTest, ParsesEntries) {
  std::vector<FaultScheduleEntry> out = {{9, 9, 9, 9}};
  ASSERT_TRUE(parseFaultSchedule("", &out).isOk());
  EXPECT_TRUE(out.empty());

  ASSERT_TRUE(parseFaultSchedule("0:1:2:3", &out).isOk());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (FaultScheduleEntry{0, 1, 2, 3}));

  ASSERT_TRUE(parseFaultSchedule("18446744073709551615:0:0:7,3:4:5:6,3:4:5:6", &out).isOk());
  const std::vector<FaultScheduleEntry> want = {{UINT64_MAX, 0, 0, 7}, {3, 4, 5, 6}, {3, 4, 5, 6}};
  EXPECT_EQ(out, want);
}

TEST(FaultScheduleTest, RejectsMalformedEntries) {
  for (const std::string text :
       {"1", "1:2", "1:2:3", "1:2:3:4:5", "a:b:c:d", "1:2:3:-4", "1:2:3:4,", ",1:2:3:4", "1:2:3:4,,5:6:7:8",
        " 1:2:3:4", "1:2:3:4 ", "1::3:4", "1:2:3:2147483648"}) {
    SCOPED_TRACE(text);
    std::vector<FaultScheduleEntry> out = {{9, 9, 9, 9}};
    const Status s = parseFaultSchedule(text, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("'" + text + "'"), std::string::npos) << s.message();
    EXPECT_EQ(out.size(), 1u);  // untouched on error
  }
}

TEST(FaultModeTest, NamesRoundTrip) {
  const std::vector<std::pair<FaultMode, std::string>> modes = {
      {FaultMode::kBitFlip, "bitflip"}, {FaultMode::kMultiBit, "multibit"},
      {FaultMode::kBurst, "burst"},     {FaultMode::kGarbage, "garbage"},
      {FaultMode::kTrailer, "trailer"}, {FaultMode::kRetransmit, "retransmit"},
      {FaultMode::kDelay, "delay"}};
  for (const auto& [mode, name] : modes) {
    EXPECT_EQ(faultModeName(mode), name);
    FaultMode parsed = FaultMode::kDelay;
    ASSERT_TRUE(parseFaultMode(name, &parsed)) << name;
    EXPECT_EQ(parsed, mode);
  }
  FaultMode m = FaultMode::kBurst;
  EXPECT_FALSE(parseFaultMode("bit-flip", &m));
  EXPECT_FALSE(parseFaultMode("", &m));
  EXPECT_EQ(m, FaultMode::kBurst);
}

// Applies `mutate` to default options and checks whether validate() accepts the result; a rejection must
// name the field.
void expectValidate(const std::function<void(Options&)>& mutate, bool ok, const std::string& field) {
  Options o;
  mutate(o);
  const Status s = o.validate();
  EXPECT_EQ(s.isOk(), ok) << field << ": " << s.toString();
  if (!ok) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  }
}

TEST(OptionsValidateTest, Ranges) {
  EXPECT_TRUE(Options().validate().isOk());
  expectValidate([](Options& o) { o.sliceBytes = 0; }, true, "sliceBytes");  // the transport's default
  expectValidate([](Options& o) { o.sliceBytes = 1; }, true, "sliceBytes");
  expectValidate([](Options& o) { o.slots = 0; }, true, "slots");  // the transport's default
  expectValidate([](Options& o) { o.slots = 1; }, false, "slots");
  expectValidate([](Options& o) { o.slots = 2; }, true, "slots");
  expectValidate([](Options& o) { o.slots = 64; }, true, "slots");
  expectValidate([](Options& o) { o.slots = 65; }, false, "slots");
  expectValidate([](Options& o) { o.maxRetries = -1; }, false, "maxRetries");
  expectValidate([](Options& o) { o.maxRetries = 0; }, true, "maxRetries");
  expectValidate([](Options& o) { o.maxRetries = 100; }, true, "maxRetries");
  expectValidate([](Options& o) { o.maxRetries = 101; }, false, "maxRetries");
  expectValidate([](Options& o) { o.timeout = std::chrono::milliseconds(0); }, false, "timeout");
  expectValidate([](Options& o) { o.timeout = std::chrono::milliseconds(-1); }, false, "timeout");
  expectValidate([](Options& o) { o.timeout = std::chrono::milliseconds(1); }, true, "timeout");
  expectValidate([](Options& o) { o.logLevel = "info"; }, true, "logLevel");
  expectValidate([](Options& o) { o.logLevel = "off"; }, true, "logLevel");
  expectValidate([](Options& o) { o.logLevel = "loud"; }, false, "logLevel");
  expectValidate([](Options& o) { o.fault.probability = -0.01; }, false, "probability");
  expectValidate([](Options& o) { o.fault.probability = 0.0; }, true, "probability");
  expectValidate([](Options& o) { o.fault.probability = 1.0; }, true, "probability");
  expectValidate([](Options& o) { o.fault.probability = 1.01; }, false, "probability");
  expectValidate([](Options& o) { o.fault.probability = std::nan(""); }, false, "probability");
  expectValidate([](Options& o) { o.fault.bits = 0; }, false, "bits");
  expectValidate([](Options& o) { o.fault.bits = 1; }, true, "bits");
  expectValidate([](Options& o) { o.fault.bits = 64; }, true, "bits");
  expectValidate([](Options& o) { o.fault.bits = 65; }, false, "bits");
  expectValidate([](Options& o) { o.fault.burstBits = 1; }, false, "burstBits");
  expectValidate([](Options& o) { o.fault.burstBits = 2; }, true, "burstBits");
  expectValidate([](Options& o) { o.fault.burstBits = 32; }, true, "burstBits");
  expectValidate([](Options& o) { o.fault.burstBits = 33; }, false, "burstBits");
  expectValidate([](Options& o) { o.fault.delayMs = -1; }, false, "delayMs");
  expectValidate([](Options& o) { o.fault.delayMs = 0; }, true, "delayMs");
  expectValidate([](Options& o) { o.fault.delayMs = 600000; }, true, "delayMs");
  expectValidate([](Options& o) { o.fault.delayMs = 600001; }, false, "delayMs");
  expectValidate([](Options& o) { o.fault.repeat = 0; }, false, "repeat");
  expectValidate([](Options& o) { o.fault.repeat = 1; }, true, "repeat");
  expectValidate([](Options& o) { o.fault.schedule = {{0, -1, 0, 0}}; }, false, "schedule");
  expectValidate([](Options& o) { o.fault.schedule = {{0, 1, 2, 3}}; }, true, "schedule");
}

TEST(KernelSmsTest, AnSmCountOrZero) {
  int sms = -1;
  ASSERT_TRUE(parseKernelSms("0", &sms).isOk());
  EXPECT_EQ(sms, 0);
  ASSERT_TRUE(parseKernelSms("66", &sms).isOk());
  EXPECT_EQ(sms, 66);
  ASSERT_TRUE(parseKernelSms("100000", &sms).isOk());
  EXPECT_EQ(sms, 100000);
  for (const char* bad : {"", "-1", "100001", "6.5", "half", "66 "}) {
    Status st = parseKernelSms(bad, &sms);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
    EXPECT_NE(st.message().find("RINGGUARD_KERNEL_SMS='" + std::string(bad) + "'"), std::string::npos)
        << st.message();
  }
  EXPECT_EQ(parseKernelSms(nullptr, &sms).code(), StatusCode::kInvalidArgument);
}

TEST(EnvRegistryTest, NamesAreUniqueAndDocumented) {
  const std::string md = envMarkdown();
  std::map<std::string, int> seen;
  for (const EnvVar& v : envRegistry()) {
    EXPECT_EQ(++seen[v.name], 1) << v.name;
    EXPECT_EQ(std::string(v.name).rfind("RINGGUARD_", 0), 0u) << v.name;
    EXPECT_GT(std::string(v.description).size(), 0u) << v.name;
    EXPECT_NE(md.find(std::string("| `") + v.name + "` |"), std::string::npos) << v.name;
  }
  EXPECT_EQ(envRegistry().size(), 28u);
  EXPECT_EQ(md.rfind("# ", 0), 0u);  // starts with a title
}

// docs/ENV.md is generated by ringguard_envdoc; this catches a registry change without regeneration.
TEST(EnvRegistryTest, CheckedInDocIsCurrent) {
#ifdef RINGGUARD_SOURCE_DIR
  const std::string path = std::string(RINGGUARD_SOURCE_DIR) + "/docs/ENV.md";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str(), envMarkdown())
      << path << " is stale: regenerate it with ringguard_envdoc " << path;
#else
  GTEST_SKIP() << "RINGGUARD_SOURCE_DIR is not defined";
#endif
}

TEST(LogTest, LevelNames) {
  for (const char* level : {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"}) {
    EXPECT_TRUE(isValidLogLevel(level)) << level;
  }
  for (const char* level : {"", "verbose", "WARN", "of"}) EXPECT_FALSE(isValidLogLevel(level)) << level;

  const auto log = logger();
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->name(), "ringguard");
  EXPECT_EQ(logger().get(), log.get());  // one process-wide logger
  const auto before = log->level();
  EXPECT_TRUE(setLogLevel("off"));
  EXPECT_EQ(log->level(), spdlog::level::off);
  EXPECT_TRUE(setLogLevel("debug"));
  EXPECT_EQ(log->level(), spdlog::level::debug);
  EXPECT_FALSE(setLogLevel("bogus"));
  EXPECT_EQ(log->level(), spdlog::level::debug);  // unchanged by a bad name
  log->set_level(before);
}

TEST(CoreStatusTest, ToStringAndNames) {
  EXPECT_EQ(Status().toString(), "OK");
  EXPECT_TRUE(Status::ok().isOk());
  EXPECT_EQ(Status(StatusCode::kCorruption, "slice 3").toString(), "Corruption: slice 3");
  EXPECT_STREQ(statusCodeName(StatusCode::kOk), "OK");
  EXPECT_STREQ(statusCodeName(StatusCode::kTimeout), "Timeout");
  for (StatusCode c : {StatusCode::kInvalidArgument, StatusCode::kFingerprintMismatch,
                       StatusCode::kCorruption, StatusCode::kTimeout, StatusCode::kPeerError,
                       StatusCode::kTransportError, StatusCode::kAborted, StatusCode::kInternal}) {
    EXPECT_FALSE(Status(c, "").isOk());
    EXPECT_STRNE(statusCodeName(c), "OK");
  }
}

TEST(CoreStatusDeathTest, EnforceLogsAndAborts) {
  EXPECT_DEATH(RINGGUARD_ENFORCE(1 + 1 == 3, "arithmetic is broken"),
               "test_options.cc:[0-9]+.*1 \\+ 1 == 3.*arithmetic is broken");
}

}  // namespace
}  // namespace ringguard
