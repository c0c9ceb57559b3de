// Options from RINGGUARD_* variables, the setting declarations and what is generated from them.
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

#include "core/env.h"
#include "core/logging.h"
#include "ringguard/core/non_finite.h"
#include "ringguard/core/options.h"
#include "ringguard/core/settings.h"
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

// Issue 47: a decimal number outside a double's range was "not a decimal number"; a NUL in a value given as
// a map (set_fault, a process group's options) cut it silently ("bitflip\0garbage" ran as bitflip).
TEST(Options, RealsOutOfADoublesRangeAndNulsInSettingMaps) {
  const std::map<std::string, std::string> tiny{{"RINGGUARD_FAULT_PROB", "1e-400"}};
  const std::map<std::string, std::string> huge{{"RINGGUARD_FAULT_PROB", "1e400"}};
  for (const auto* m : {&tiny, &huge}) {
    Options o;
    const Status st = Options::fromLookup(
        [&](const char* name) -> const char* {
          auto it = m->find(name);
          return it != m->end() ? it->second.c_str() : nullptr;
        },
        &o);
    const char* want = m == &tiny
                           ? "RINGGUARD_FAULT_PROB='1e-400': underflows a double (below 2.2e-308; write 0 "
                             "for none): expected [0, 1]"
                           : "RINGGUARD_FAULT_PROB='1e400': overflows a double: expected [0, 1]";
    EXPECT_EQ(st.message(), want);
  }
  const std::map<std::string, std::string> nul{{"RINGGUARD_FAULT_MODE", std::string("bitflip\0garbage", 15)}};
  EXPECT_EQ(
      checkSettingMap(nul).message(),
      "RINGGUARD_FAULT_MODE='bitflip\\0garbage': holds a NUL byte at offset 7 (nothing after it would be "
      "read)");
  EXPECT_TRUE(checkSettingMap({{"RINGGUARD_FAULT_MODE", "bitflip"}}).isOk());
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
  const std::string md = settingsMarkdown();
  std::map<std::string, int> seen;
  for (const EnvVar& v : envRegistry()) {
    EXPECT_EQ(++seen[v.name], 1) << v.name;
    EXPECT_EQ(std::string(v.name).rfind("RINGGUARD_", 0), 0u) << v.name;
    EXPECT_GT(std::string(v.summary).size(), 0u) << v.name;
    EXPECT_EQ(std::string(v.description).rfind(v.summary, 0), 0u) << v.name;
    EXPECT_NE(md.find(std::string("| `") + v.name + "` |"), std::string::npos) << v.name;
  }
  EXPECT_EQ(envRegistry().size(), 38u);
  EXPECT_EQ(md.rfind("# ", 0), 0u);  // starts with a title
}

// Each declaration is consistent: its default is valid under its kind, its range is not empty, per-group
// settings (and only they) have a Python field, and the description ends with the generated range.
TEST(SettingsTest, DeclarationsAreWellFormed) {
  std::map<std::string, int> fields;
  for (const Setting& s : settings()) {
    SCOPED_TRACE(s.name);
    EXPECT_TRUE(checkSetting(s, s.defaultValue).isOk()) << checkSetting(s, s.defaultValue).toString();
    EXPECT_EQ(s.scope == SettingScope::kGroup, s.pythonField != nullptr);
    if (s.pythonField != nullptr) EXPECT_EQ(++fields[s.pythonField], 1);
    switch (s.kind) {
      case SettingKind::kUnsigned:
        EXPECT_LE(s.lo, s.hi);
        EXPECT_TRUE(s.choices.empty());
        EXPECT_NE(s.description.find("n [" + std::to_string(s.lo) + ", " + std::to_string(s.hi) + "]."),
                  std::string::npos)
            << s.description;
        break;
      case SettingKind::kReal:
        EXPECT_LE(s.realLo, s.realHi);
        break;
      case SettingKind::kChoice:
      case SettingKind::kList:
        EXPECT_FALSE(s.choices.empty());
        for (const SettingChoice& c : s.choices) {
          EXPECT_NE(s.description.find(c.name), std::string::npos) << c.name;
          if (c.alias != nullptr) EXPECT_NE(s.description.find(c.alias), std::string::npos) << c.alias;
        }
        break;
      case SettingKind::kText:
      case SettingKind::kSchedule:
        EXPECT_TRUE(s.choices.empty());
        break;
    }
    EXPECT_FALSE(s.zeroMeansDefault && s.kind != SettingKind::kUnsigned);
  }
  EXPECT_EQ(fields.size(), 26u);  // python/ringguard's Options fields (tests/python/test_options.py)
  // The process-wide settings have no Options field.
  for (const char* name :
       {"RINGGUARD_KERNEL_SMS", "RINGGUARD_LOG_SUBSYS", "RINGGUARD_TIMELINE", "RINGGUARD_SUMMARY",
        "RINGGUARD_TIMELINE_EVENTS", "RINGGUARD_TELEMETRY_INTERVAL_MS", "RINGGUARD_POLICY"}) {
    EXPECT_EQ(declaredSetting(name).scope, SettingScope::kProcess) << name;
  }
}

// The enum-valued choices are the enums' own names, in enum order (a choice's index is the enum value), and
// every enum value is a choice.
TEST(SettingsTest, EnumChoicesAreTheEnumNames) {
  const Setting& nan = declaredSetting("RINGGUARD_NAN_CHECK");
  for (size_t i = 0; i < nan.choices.size(); ++i) {
    NanCheck m = NanCheck::kOff;
    ASSERT_TRUE(parseNanCheck(nan.choices[i].name, &m)) << nan.choices[i].name;
    EXPECT_EQ(size_t(m), i);
  }
  EXPECT_STREQ(nanCheckName(NanCheck(nan.choices.size())), "invalid");
  const Setting& mode = declaredSetting("RINGGUARD_FAULT_MODE");
  for (size_t i = 0; i < mode.choices.size(); ++i) {
    FaultMode m = FaultMode::kBitFlip;
    ASSERT_TRUE(parseFaultMode(mode.choices[i].name, &m)) << mode.choices[i].name;
    EXPECT_EQ(size_t(m), i);
  }
  EXPECT_STREQ(faultModeName(FaultMode(mode.choices.size())), "invalid");
  // The logger takes exactly the declared spellings.
  const Setting& level = declaredSetting("RINGGUARD_LOG_LEVEL");
  for (const SettingChoice& c : level.choices) {
    EXPECT_TRUE(isValidLogLevel(c.name)) << c.name;
    if (c.alias != nullptr) EXPECT_TRUE(isValidLogLevel(c.alias)) << c.alias;
  }
  for (const char* other : {"fatal", "crit", "notice", "verbose", "WARN", "0", "6", "none", "W"}) {
    EXPECT_EQ(isValidLogLevel(other), settingChoiceIndex(level, other) >= 0) << other;
  }
}

// The member initializers are the declared defaults (stated once, in the declaration).
TEST(SettingsTest, DefaultsComeFromTheDeclarations) {
  const Options o;
  EXPECT_EQ(o.sliceBytes, declaredUnsigned("RINGGUARD_SLICE_BYTES"));
  EXPECT_EQ(uint64_t(o.timeout.count()), declaredUnsigned("RINGGUARD_TIMEOUT_MS"));
  EXPECT_EQ(o.timeout.count(), 60000);
  EXPECT_EQ(o.maxRetries, 3);
  EXPECT_EQ(o.logLevel, "warn");
  EXPECT_EQ(o.nanCheck, NanCheck::kOff);
  EXPECT_EQ(o.fault.mode, FaultMode::kBitFlip);
  EXPECT_EQ(o.fault.seed, 1u);
  EXPECT_EQ(o.fault.burstBits, 32);
  const DeviceSettings d;
  EXPECT_EQ(d.transport, "auto");
  EXPECT_EQ(d.poolReleaseBytes, 256ull << 20);
  EXPECT_EQ(d.ncclLanes, 4);
  EXPECT_EQ(declaredChoice("RINGGUARD_POLICY"), 0);
  EXPECT_EQ(declaredText("RINGGUARD_LOG_SUBSYS"), "all");
  EXPECT_EQ(declaredReal("RINGGUARD_FAULT_PROB"), 0.0);
}

// validate() takes its bounds from the declarations: each integer field is accepted at both ends of its
// declared range and refused just outside, with a message naming the field, its variable and the range.
TEST(SettingsTest, ValidateUsesTheDeclaredRanges) {
  struct Field {
    const char* field;
    const char* setting;
    std::function<void(Options&, int64_t)> set;
  };
  const std::vector<Field> fields = {
      {"slots", "RINGGUARD_SLOTS", [](Options& o, int64_t v) { o.slots = int(v); }},
      {"maxRetries", "RINGGUARD_MAX_RETRIES", [](Options& o, int64_t v) { o.maxRetries = int(v); }},
      {"timeout", "RINGGUARD_TIMEOUT_MS",
       [](Options& o, int64_t v) { o.timeout = std::chrono::milliseconds(v); }},
      {"fault.bits", "RINGGUARD_FAULT_BITS", [](Options& o, int64_t v) { o.fault.bits = int(v); }},
      {"fault.burstBits", "RINGGUARD_FAULT_BURST_BITS",
       [](Options& o, int64_t v) { o.fault.burstBits = int(v); }},
      {"fault.delayMs", "RINGGUARD_FAULT_DELAY_MS", [](Options& o, int64_t v) { o.fault.delayMs = int(v); }},
      {"fault.repeat", "RINGGUARD_FAULT_REPEAT", [](Options& o, int64_t v) { o.fault.repeat = int(v); }},
  };
  for (const Field& f : fields) {
    SCOPED_TRACE(f.field);
    const Setting& s = declaredSetting(f.setting);
    for (int64_t ok : {int64_t(s.lo), int64_t(s.hi)}) {
      Options o;
      f.set(o, ok);
      EXPECT_TRUE(o.validate().isOk()) << o.validate().toString();
    }
    std::vector<int64_t> bad = {int64_t(s.lo) - 1};
    if (s.hi < uint64_t(INT32_MAX)) bad.push_back(int64_t(s.hi) + 1);
    for (int64_t v : bad) {
      if (v == 0 && s.zeroMeansDefault) continue;
      Options o;
      f.set(o, v);
      const Status st = o.validate();
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << v;
      EXPECT_NE(st.message().find(std::string("option ") + f.field + "="), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(std::string("(") + f.setting + "): expected " + settingRange(s)),
                std::string::npos)
          << st.message();
    }
  }
}

// The typed reads the observability code, the telemetry sampler and the policy engine use.
TEST(SettingsTest, TypedReads) {
  auto only = [](const char* name, const char* value) {
    return [=](const char* n) -> const char* { return std::string(n) == name ? value : nullptr; };
  };
  uint64_t n = 7;
  ASSERT_TRUE(parseSetting("RINGGUARD_TIMELINE_EVENTS", only("X", nullptr), &n).isOk());
  EXPECT_EQ(n, 262144u);  // unset: the declared default
  ASSERT_TRUE(
      parseSetting("RINGGUARD_TIMELINE_EVENTS", only("RINGGUARD_TIMELINE_EVENTS", "1024"), &n).isOk());
  EXPECT_EQ(n, 1024u);
  ASSERT_TRUE(
      parseSetting("RINGGUARD_TIMELINE_EVENTS", only("RINGGUARD_TIMELINE_EVENTS", "268435456"), &n).isOk());
  EXPECT_EQ(n, 268435456u);
  Status st = parseSetting("RINGGUARD_TIMELINE_EVENTS", only("RINGGUARD_TIMELINE_EVENTS", "1023"), &n);
  EXPECT_EQ(st.message(), "RINGGUARD_TIMELINE_EVENTS='1023': out of range: expected [1024, 268435456]");
  EXPECT_EQ(n, 268435456u);  // untouched on error

  std::string text = "x";
  ASSERT_TRUE(parseSetting("RINGGUARD_TIMELINE", only("X", nullptr), &text).isOk());
  EXPECT_EQ(text, "");
  ASSERT_TRUE(parseSetting("RINGGUARD_SUMMARY", only("RINGGUARD_SUMMARY", "/tmp/run"), &text).isOk());
  EXPECT_EQ(text, "/tmp/run");

  for (const char* good : {"all", "core", "ring,transport,torch", "^guard,policy", "^cuda"}) {
    ASSERT_TRUE(parseSetting("RINGGUARD_LOG_SUBSYS", only("RINGGUARD_LOG_SUBSYS", good), &text).isOk())
        << good;
    EXPECT_EQ(text, good);
  }
  for (const char* bad : {"", "nccl", "core,", ",core", "core,,ring", "^", "CORE", "core ring"}) {
    st = parseSetting("RINGGUARD_LOG_SUBSYS", only("RINGGUARD_LOG_SUBSYS", bad), &text);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.message().rfind(std::string("RINGGUARD_LOG_SUBSYS='") + bad + "': bad entry '", 0), 0u)
        << st.message();
  }

  int choice = -1;
  ASSERT_TRUE(parseChoiceSetting("RINGGUARD_POLICY", only("RINGGUARD_POLICY", "0"), &choice).isOk());
  EXPECT_EQ(choice, 1);  // 0 is off's alias
  ASSERT_TRUE(
      parseChoiceSetting("RINGGUARD_LOG_LEVEL", only("RINGGUARD_LOG_LEVEL", "warning"), &choice).isOk());
  EXPECT_STREQ(declaredSetting("RINGGUARD_LOG_LEVEL").choices[size_t(choice)].name, "warn");

  double p = -1;
  ASSERT_TRUE(parseSetting("RINGGUARD_FAULT_PROB", only("RINGGUARD_FAULT_PROB", "0.5"), &p).isOk());
  EXPECT_EQ(p, 0.5);
  st = parseSetting("RINGGUARD_FAULT_PROB", only("RINGGUARD_FAULT_PROB", "x"), &p);
  EXPECT_EQ(st.message(), "RINGGUARD_FAULT_PROB='x': not a decimal number: expected [0, 1]");
  st = parseSetting("RINGGUARD_FAULT_PROB", only("RINGGUARD_FAULT_PROB", "2"), &p);
  EXPECT_EQ(st.message(), "RINGGUARD_FAULT_PROB='2': out of range: expected [0, 1]");
  st = parseSetting("RINGGUARD_SLOTS", only("RINGGUARD_SLOTS", "1"), &n);
  EXPECT_EQ(st.message(), "RINGGUARD_SLOTS='1': out of range: expected 0 or [2, 64]");
  st = parseSetting("RINGGUARD_FAULT_SCHEDULE", only("RINGGUARD_FAULT_SCHEDULE", "1:2"), &text);
  EXPECT_EQ(
      st.message(),
      "RINGGUARD_FAULT_SCHEDULE='1:2': bad entry '1:2': expected collective:step:slice:rank (non-negative "
      "integers), entries separated by ','");
  st = parseSetting("RINGGUARD_NAN_CHECK", only("RINGGUARD_NAN_CHECK", "on"), &text);
  EXPECT_EQ(st.message(), "RINGGUARD_NAN_CHECK='on': expected one of off, warn, skip, error");
}

TEST(SettingsDeathTest, TypedReadOfTheWrongKindAborts) {
  uint64_t n = 0;
  EXPECT_DEATH((void)parseSetting("RINGGUARD_LOG_LEVEL", envLookup, &n),
               "RINGGUARD_LOG_LEVEL is of kind choice");
  EXPECT_DEATH((void)declaredUnsigned("RINGGUARD_NOT_A_SETTING"),
               "RINGGUARD_NOT_A_SETTING is not in the registry");
}

// Every declared setting is checked when options are read, Options field or not.
TEST(SettingsTest, OptionsCheckEveryDeclaredSetting) {
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"RINGGUARD_TIMELINE_EVENTS", "10"},
                                                        {"RINGGUARD_LOG_SUBSYS", "everything"},
                                                        {"RINGGUARD_TELEMETRY_INTERVAL_MS", "0"},
                                                        {"RINGGUARD_POLICY", "maybe"},
                                                        {"RINGGUARD_KERNEL_SMS", "-1"},
                                                        {"RINGGUARD_CPU_TRANSPORT", "tcp"},
                                                        {"RINGGUARD_DEVICE_TRANSPORT", "ipc"},
                                                        {"RINGGUARD_PEER_BYTES", "1000"},
                                                        {"RINGGUARD_PEER_BYTES", "32MiB"},
                                                        {"RINGGUARD_PEER_TWO_SHOT_BYTES", "-1"}}) {
    Options o;
    const Status st = Options::fromLookup(
        [&](const char* n) -> const char* { return n == name ? value.c_str() : nullptr; }, &o);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_EQ(st.message().rfind(name + "='" + value + "'", 0), 0u) << st.message();
  }
}

// The peer-window path's settings as the device factory reads them.
TEST(SettingsTest, DeviceSettingsTakeThePeerPath) {
  DeviceSettings d;
  const std::map<std::string, std::string> env{{"RINGGUARD_DEVICE_TRANSPORT", "peer"},
                                               {"RINGGUARD_PEER_BYTES", "4096"},
                                               {"RINGGUARD_PEER_TWO_SHOT_BYTES", "0"},
                                               {"RINGGUARD_PEER_ARRIVAL_BYTES", "65536"}};
  ASSERT_TRUE(DeviceSettings::fromLookup(
                  [&](const char* n) -> const char* {
                    auto it = env.find(n);
                    return it == env.end() ? nullptr : it->second.c_str();
                  },
                  &d)
                  .isOk());
  EXPECT_EQ(d.transport, "peer");
  EXPECT_EQ(d.peerBytes, 4096u);
  EXPECT_EQ(DeviceSettings().peerBytes, 32u << 20);  // the declared default
  EXPECT_EQ(d.peerTwoShotBytes, 0u);                 // 0: the two-shot from the first byte
  EXPECT_EQ(DeviceSettings().peerTwoShotBytes, 4u << 20);
  EXPECT_EQ(d.peerArrivalBytes, 65536u);
  EXPECT_EQ(DeviceSettings().peerArrivalBytes, 1u << 20);
}

// Tool names are documented (RINGGUARD_AUTOLOAD among them) and never warned about.
TEST(SettingsTest, ToolNamesAreDocumented) {
  const std::string md = settingsMarkdown();
  std::vector<std::string> env = {"RINGGUARD_AUTOLOAD=0", "RINGGUARD_TEST_SMOKE=1",
                                  "RINGGUARD_BENCH_ITERS=3"};
  for (const ToolEnvName& t : toolEnvNames()) {
    EXPECT_NE(md.find(std::string("| `") + t.name + "` |"), std::string::npos) << t.name;
    EXPECT_EQ(findSetting(t.name), nullptr) << t.name;
    const std::string n = t.name;
    env.push_back((n.back() == '*' ? n.substr(0, n.size() - 1) + "X" : n) + "=1");
  }
  std::vector<char*> ptrs;
  for (std::string& e : env) ptrs.push_back(e.data());
  ptrs.push_back(nullptr);
  EXPECT_TRUE(unknownEnvWarnings(ptrs.data()).empty());
}

#ifdef RINGGUARD_SOURCE_DIR
std::string readSourceFile(const std::string& relative) {
  const std::string path = std::string(RINGGUARD_SOURCE_DIR) + "/" + relative;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}
#endif

// docs/ENV.md and python/ringguard/_settings.py are generated by ringguard_envdoc; this catches a
// declaration change without regeneration.
TEST(EnvRegistryTest, CheckedInDocIsCurrent) {
#ifdef RINGGUARD_SOURCE_DIR
  EXPECT_EQ(readSourceFile("docs/ENV.md"), settingsMarkdown())
      << "docs/ENV.md is stale: regenerate it with ringguard_envdoc docs/ENV.md (from the source tree)";
#else
  GTEST_SKIP() << "RINGGUARD_SOURCE_DIR is not defined";
#endif
}

TEST(EnvRegistryTest, CheckedInPythonSettingsAreCurrent) {
#ifdef RINGGUARD_SOURCE_DIR
  const std::string py = settingsPython();
  EXPECT_EQ(readSourceFile("python/ringguard/_settings.py"), py)
      << "python/ringguard/_settings.py is stale: regenerate it with ringguard_envdoc --python "
         "python/ringguard/_settings.py (from the source tree)";
  for (const Setting& s : settings()) {
    EXPECT_NE(py.find(std::string("Setting(\"") + s.name + "\""), std::string::npos) << s.name;
    if (s.pythonField != nullptr) {
      EXPECT_NE(py.find(std::string("\n    ") + s.pythonField + ": Optional["), std::string::npos) << s.name;
    }
  }
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
