// The process's downgrade engine (ringguard/policy/process_engine.h): what the c10d backend reads when it
// issues an all-gather.
#include <gtest/gtest.h>

#include <memory>

#include "ringguard/policy/process_engine.h"

namespace ringguard {
namespace {

Sample pcie(int64_t ms, double util) {
  Sample s;
  s.timeNs = ms * 1000000;
  s.signals.push_back(Signal::present("pcie.util", util, "fraction", "test"));
  return s;
}

TEST(ProcessPolicyEngine, ReadsTheCurrentAllGatherVariantWhileTheEngineLives) {
  setProcessPolicyEngine({});
  EXPECT_EQ(processPolicyVariant("all_gather"), "");  // no engine
  PolicyRules rules;
  ASSERT_TRUE(parseRules(defaultRulesJson(), "built-in default", "", &rules).isOk());
  VariantRegistry reg;
  ASSERT_TRUE(reg.add("all_gather", "ring").isOk());
  ASSERT_TRUE(reg.add("all_gather", "staged_chunked").isOk());
  auto engine = std::make_shared<PolicyEngine>(rules, &reg);
  setProcessPolicyEngine(engine);
  EXPECT_EQ(processPolicyVariant("all_gather"), "");  // before the first step
  ASSERT_TRUE(engine->onStep(pcie(0, 0.1)).isOk());
  EXPECT_EQ(processPolicyVariant("all_gather"), "ring");
  // Saturated (the default rule enters at 0.85), held by the 50-step dwell, then switched.
  ASSERT_TRUE(engine->onStep(pcie(1, 0.95)).isOk());
  EXPECT_EQ(processPolicyVariant("all_gather"), "ring");
  for (int i = 2; i <= 60; ++i) ASSERT_TRUE(engine->onStep(pcie(i, 0.95)).isOk());
  EXPECT_EQ(processPolicyVariant("all_gather"), "staged_chunked");
  EXPECT_EQ(processPolicyVariant("attention"), "");  // no attention variant registered
  engine.reset();
  EXPECT_EQ(processPolicyVariant("all_gather"), "");  // a destroyed engine is no longer the process's
}

}  // namespace
}  // namespace ringguard
