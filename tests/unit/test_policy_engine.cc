// The downgrade engine replayed on recorded traces (tests/unit/data/policy/*.jsonl) against their expected
// decision sequences (*.expected): thresholds, hysteresis, dwell, priorities, no flapping, missing signals.
// Plus the registry, forcing, rules off, disabled variants, dwell in milliseconds and the agreement checks.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "ringguard/policy/engine.h"
#include "ringguard/policy/registry.h"
#include "ringguard/policy/rules.h"
#include "ringguard/telemetry/trace.h"

namespace ringguard {
namespace {

const std::string kData = std::string(RINGGUARD_SOURCE_DIR) + "/tests/unit/data/policy/";

PolicyRules smallRules() {
  PolicyRules r;
  Status st = loadRulesFile(kData + "rules_small.json", "", &r);
  EXPECT_TRUE(st.isOk()) << st.toString();
  return r;
}

std::vector<std::string> expected(const std::string& file) {
  std::ifstream in(kData + file);
  EXPECT_TRUE(in.good()) << file;
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') out.push_back(line);
  }
  return out;
}

std::vector<std::string> replay(PolicyEngine* engine, const std::string& trace) {
  std::vector<TraceRecord> recs;
  Status st = readTrace(kData + trace, &recs);
  EXPECT_TRUE(st.isOk()) << st.toString();
  for (size_t i = 0; i < recs.size(); ++i) {
    if (recs[i].step >= 0)
      EXPECT_EQ(static_cast<size_t>(recs[i].step), i) << "trace steps must be 0, 1, 2, ...";
    Status s = engine->onStep(recs[i].sample);
    EXPECT_TRUE(s.isOk()) << s.toString();
  }
  std::vector<std::string> out;
  for (const PolicyDecision& d : engine->decisions()) {
    out.push_back(std::to_string(d.step) + " " + d.family + ": " + (d.from.empty() ? "(none)" : d.from) +
                  " -> " + d.to);
  }
  return out;
}

TEST(PolicyEngine, FragmentationTrace) {
  PolicyEngine engine(smallRules());
  EXPECT_EQ(engine.current("attention"), "");
  EXPECT_EQ(replay(&engine, "fragmentation.jsonl"), expected("fragmentation.expected"));
  EXPECT_EQ(engine.current("attention"), "lean");
  EXPECT_EQ(engine.current("gather"), "ring");
  const PolicyCounters c = engine.counters();
  EXPECT_EQ(c.steps, 23u);
  EXPECT_EQ(c.decisions, 8u);
  EXPECT_EQ(c.switches.at("attention"), 6u);
  EXPECT_EQ(c.switches.count("gather"), 0u);
  EXPECT_EQ(c.dwellHolds, 7u);     // steps 7, 8, 11, 13, 14, 16, 17
  EXPECT_EQ(c.missingReads, 29u);  // "pcie" on all 23 steps; "frag" twice on steps 13-15
  EXPECT_EQ(c.agreements, 0u);     // no agreement set: one process

  // Each decision carries the signals it was made on, and why.
  const std::vector<PolicyDecision> d = engine.decisions();
  const PolicyDecision& toLean = d[2];
  EXPECT_EQ(toLean.reason, "entered: frag above 0.5 (exit 0.3)");
  ASSERT_EQ(toLean.signals.size(), 1u);
  EXPECT_EQ(toLean.signals[0].name, "frag");
  EXPECT_EQ(toLean.signals[0].value, 0.55);
  EXPECT_EQ(toLean.timeNs, 30000000);
  EXPECT_FALSE(toLean.agreed);
  EXPECT_EQ(d[3].reason, "left: frag above 0.5 (exit 0.3) no longer holds");
  EXPECT_EQ(d[3].signals[0].value, 0.25);
  EXPECT_EQ(d[5].reason, "entered: frag above 0.9 (exit 0.8) and ooms above 1 (exit 1)");
  const PolicyDecision& onMissing = d[6];  // emergency -> fast at step 15: frag went missing
  EXPECT_EQ(onMissing.to, "fast");
  ASSERT_EQ(onMissing.signals.size(), 2u);
  EXPECT_EQ(onMissing.signals[0].name, "frag");
  EXPECT_TRUE(onMissing.signals[0].missing);
  EXPECT_EQ(onMissing.signals[0].why, "missing in the trace");
  EXPECT_EQ(onMissing.toString(),
            "#6 step 15 attention: emergency -> fast (left: frag above 0.9 (exit 0.8), ooms above 1 (exit 1) "
            "no longer "
            "holds); signals: frag=missing(missing in the trace), ooms=2");
}

TEST(PolicyEngine, PcieTraceOnACollectiveFamily) {
  PolicyEngine engine(smallRules());
  EXPECT_EQ(replay(&engine, "pcie.jsonl"), expected("pcie.expected"));
  const PolicyCounters c = engine.counters();
  EXPECT_EQ(c.dwellHolds, 2u);  // steps 1 and 5
  EXPECT_EQ(c.switches.at("gather"), 2u);
  EXPECT_EQ(c.missingReads, 31u);  // attention's three reads on 10 steps, "pcie" on the last
}

TEST(PolicyEngine, ReplayIsDeterministic) {
  PolicyEngine a(smallRules()), b(smallRules());
  EXPECT_EQ(replay(&a, "fragmentation.jsonl"), replay(&b, "fragmentation.jsonl"));
}

Sample at(int64_t ms, std::vector<std::pair<const char*, double>> values) {
  Sample s;
  s.timeNs = ms * 1000000;
  for (auto& kv : values) s.signals.push_back(Signal::present(kv.first, kv.second, "", "test"));
  return s;
}

TEST(PolicyEngine, RegistryFirstEnabledWins) {
  VariantRegistry reg;
  bool fastOk = false;
  ASSERT_TRUE(reg.add(
                     "attention", "fast", [&] { return fastOk; }, std::string("fast impl"))
                  .isOk());
  ASSERT_TRUE(reg.add("attention", "lean").isOk());
  EXPECT_EQ(reg.add("attention", "lean").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.add("", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.firstEnabled("attention"), "lean");
  fastOk = true;
  EXPECT_EQ(reg.firstEnabled("attention"), "fast");
  EXPECT_EQ(reg.firstEnabled("nothing"), "");
  ASSERT_NE(reg.implementation<std::string>("attention", "fast"), nullptr);
  EXPECT_EQ(*reg.implementation<std::string>("attention", "fast"), "fast impl");
  EXPECT_EQ(reg.implementation<int>("attention", "fast"), nullptr);  // another type
  EXPECT_EQ(reg.variants("attention"), (std::vector<std::string>{"fast", "lean"}));
}

TEST(PolicyEngine, DisabledAndUnregisteredVariantsAreSkipped) {
  VariantRegistry reg;
  bool fastOk = true;
  ASSERT_TRUE(reg.add("attention", "fast", [&] { return fastOk; }).isOk());
  ASSERT_TRUE(reg.add("attention", "lean").isOk());
  // "emergency" and the gather family are not registered: never chosen.
  PolicyEngine engine(smallRules(), &reg);
  ASSERT_TRUE(engine.onStep(at(0, {{"frag", 0.95}, {"ooms", 5}})).isOk());
  EXPECT_EQ(engine.current("attention"), "lean");  // emergency would win, but it is not registered
  EXPECT_EQ(engine.current("gather"), "");         // no enabled variant at all
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(engine.onStep(at(i, {{"frag", 0.1}, {"ooms", 5}})).isOk());
  EXPECT_EQ(engine.current("attention"), "fast");  // lean left after its dwell
  // The running variant gets disabled: switch at once, dwell or not.
  fastOk = false;
  ASSERT_TRUE(engine.onStep(at(4, {{"frag", 0.1}})).isOk());
  EXPECT_EQ(engine.current("attention"), "lean");
  EXPECT_EQ(engine.decisions().back().reason, "no enabled variant's conditions hold: first enabled variant");
  // And when the variant that held comes back and its conditions hold, it wins again after the dwell.
  fastOk = true;
  for (int i = 5; i < 8; ++i) ASSERT_TRUE(engine.onStep(at(i, {{"frag", 0.1}})).isOk());
  EXPECT_EQ(engine.current("attention"), "fast");
  EXPECT_EQ(engine.decisions().back().step, 7u);
}

// The default rules' attention family, as measured on the H200 (bench/torch/bench_downgrade.py): cuDNN is
// the fastest and the leanest kernel, so fragmentation never moves a rank off it; where cuDNN attention is
// not enabled, fragmentation moves flash to the memory-efficient kernel and back once it clears.
TEST(PolicyEngine, DefaultAttentionRuleKeepsCudnnAndDowngradesFlash) {
  PolicyRules rules;
  ASSERT_TRUE(parseRules(defaultRulesJson(), "built-in default", "", &rules).isOk());
  VariantRegistry reg;
  bool cudnnOk = true;
  ASSERT_TRUE(reg.add("attention", "cudnn", [&] { return cudnnOk; }).isOk());
  for (const char* v : {"flash", "mem_efficient", "math"}) ASSERT_TRUE(reg.add("attention", v).isOk());
  PolicyEngine engine(std::move(rules), &reg);
  auto run = [&](int from, int to, double frag) {
    for (int i = from; i < to; ++i) ASSERT_TRUE(engine.onStep(at(i, {{"torch.fragmentation", frag}})).isOk());
  };
  run(0, 30, 0.0);
  EXPECT_EQ(engine.current("attention"), "cudnn");
  run(30, 60, 0.7);  // fragmented: cuDNN outranks the downgrade
  EXPECT_EQ(engine.current("attention"), "cudnn");
  EXPECT_EQ(engine.decisions().size(), 1u);  // the initial choice only
  cudnnOk = false;                           // e.g. a GPU or build without cuDNN attention
  run(60, 61, 0.0);
  EXPECT_EQ(engine.current("attention"), "flash");
  run(61, 90, 0.0);
  run(90, 91, 0.7);
  EXPECT_EQ(engine.current("attention"), "mem_efficient");
  run(91, 111, 0.2);  // above exit 0.15: held
  EXPECT_EQ(engine.current("attention"), "mem_efficient");
  run(111, 112, 0.1);  // below exit, dwell (20 steps) passed
  EXPECT_EQ(engine.current("attention"), "flash");
}

// The default rules' all_reduce family: the ring until device memory is fragmented (either measure, MAX
// over ranks when agreed), then staged through host memory, which holds no device memory; back once the
// fragmentation has fallen below the exit threshold and the 50-step dwell has passed. A spike inside the
// dwell switches nothing; missing signals never enter the staged variant.
TEST(PolicyEngine, DefaultAllReduceRuleStagesUnderDeviceMemoryFragmentation) {
  PolicyRules rules;
  ASSERT_TRUE(parseRules(defaultRulesJson(), "built-in default", "", &rules).isOk());
  VariantRegistry reg;
  for (const char* v : {"ring", "staged_chunked"}) ASSERT_TRUE(reg.add("all_reduce", v).isOk());
  PolicyEngine engine(std::move(rules), &reg);
  auto run = [&](int from, int to, std::vector<std::pair<const char*, double>> values) {
    for (int i = from; i < to; ++i) ASSERT_TRUE(engine.onStep(at(i, values)).isOk()) << "step " << i;
  };
  run(0, 60, {{"torch.fragmentation", 0.10}});
  EXPECT_EQ(engine.current("all_reduce"), "ring");
  run(60, 61, {{"torch.fragmentation", 0.55}});
  EXPECT_EQ(engine.current("all_reduce"), "staged_chunked");
  const PolicyDecision in = engine.decisions().back();
  EXPECT_EQ(in.step, 60u);
  EXPECT_EQ(in.reason, "entered: torch.fragmentation above 0.5 (exit 0.3)");
  run(61, 110, {{"torch.fragmentation", 0.35}});  // above the exit threshold: held
  EXPECT_EQ(engine.current("all_reduce"), "staged_chunked");
  run(110, 111, {{"torch.fragmentation", 0.25}});  // below it, and 50 steps since step 60
  EXPECT_EQ(engine.current("all_reduce"), "ring");
  EXPECT_EQ(engine.decisions().back().step, 110u);
  run(111, 112, {{"torch.fragmentation", 0.90}});  // a one-step spike inside the dwell (since step 110)
  run(112, 161, {{"torch.fragmentation", 0.10}});
  EXPECT_EQ(engine.current("all_reduce"), "ring");
  EXPECT_EQ(engine.decisions().back().step, 110u);
  // ringguard's own device pools alone (torch's allocator not fed) move it too.
  run(161, 162, {{"pool.device.fragmentation", 0.60}});
  EXPECT_EQ(engine.current("all_reduce"), "staged_chunked");
  EXPECT_EQ(engine.decisions().back().reason, "entered: pool.device.fragmentation above 0.5 (exit 0.3)");
  run(162, 211, {{"pool.device.fragmentation", 0.20}});  // below exit, but inside the dwell
  EXPECT_EQ(engine.current("all_reduce"), "staged_chunked");
  run(211, 212, {{"pool.device.fragmentation", 0.20}});
  EXPECT_EQ(engine.current("all_reduce"), "ring");
  run(212, 300, {});  // nothing measured: never staged on data that is not there
  EXPECT_EQ(engine.current("all_reduce"), "ring");
  EXPECT_EQ(engine.counters().switches.at("all_reduce"), 4u);
}

TEST(PolicyEngine, DwellInMilliseconds) {
  PolicyRules r;
  ASSERT_TRUE(parseRules(R"({"version": 1, "families": {"f": {"min_dwell_ms": 100, "variants": [
      {"name": "a"}, {"name": "b", "priority": 1, "when": [{"signal": "x", "below": {"enter": 0.2, "exit": 0.4}}]}]}}})",
                         "inline", "", &r)
                  .isOk());
  PolicyEngine engine(r);
  ASSERT_TRUE(engine.onStep(at(0, {{"x", 0.5}})).isOk());
  EXPECT_EQ(engine.current("f"), "a");
  ASSERT_TRUE(engine.onStep(at(99, {{"x", 0.1}})).isOk());
  EXPECT_EQ(engine.current("f"), "a");  // 99 ms < 100
  ASSERT_TRUE(engine.onStep(at(100, {{"x", 0.3}})).isOk());
  EXPECT_EQ(engine.current("f"), "b");  // "below": latched at 0.1, held at 0.3 <= exit 0.4
  ASSERT_TRUE(engine.onStep(at(250, {{"x", 0.41}})).isOk());
  EXPECT_EQ(engine.current("f"), "a");
}

TEST(PolicyEngine, ForceAndRulesOff) {
  PolicyEngine engine(smallRules());
  EXPECT_EQ(engine.force("attention", "nope").code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.force("nope", "x").message().find("no family 'nope'"), std::string::npos);
  ASSERT_TRUE(engine.force("attention", "emergency").isOk());
  ASSERT_TRUE(engine.onStep(at(0, {{"frag", 0.0}})).isOk());
  EXPECT_EQ(engine.current("attention"), "emergency");
  EXPECT_EQ(engine.decisions()[0].reason, "forced (RINGGUARD_POLICY_FORCE)");
  ASSERT_TRUE(engine.force("attention", "").isOk());
  engine.setRulesEnabled(false);
  ASSERT_TRUE(engine.onStep(at(1, {{"frag", 0.99}, {"ooms", 9}})).isOk());
  EXPECT_EQ(engine.current("attention"), "fast");  // first enabled, conditions ignored, dwell too
}

TEST(PolicyEngine, ConfigureFromEnv) {
  ::setenv("RINGGUARD_POLICY_FORCE", "gather=staged,attention=lean", 1);
  ::setenv("RINGGUARD_POLICY", "on", 1);
  PolicyEngine engine(smallRules());
  ASSERT_TRUE(engine.configureFromEnv().isOk());
  ASSERT_TRUE(engine.onStep(at(0, {})).isOk());
  EXPECT_EQ(engine.current("gather"), "staged");
  EXPECT_EQ(engine.current("attention"), "lean");
  ::setenv("RINGGUARD_POLICY_FORCE", "gather", 1);
  EXPECT_EQ(engine.configureFromEnv().message(),
            "RINGGUARD_POLICY_FORCE entry 'gather': expected family=variant");
  // A family forced twice: which was meant is a guess (the later one silently won).
  ::setenv("RINGGUARD_POLICY_FORCE", "gather=staged,attention=lean,gather=ring", 1);
  EXPECT_EQ(
      engine.configureFromEnv().message(),
      "RINGGUARD_POLICY_FORCE: family 'gather' is forced twice ('staged', then 'ring'): name each family "
      "once");
  ::setenv("RINGGUARD_POLICY_FORCE", "gather=tree", 1);
  EXPECT_NE(engine.configureFromEnv().message().find(
                "RINGGUARD_POLICY_FORCE: policy force: family 'gather' has no variant 'tree'"),
            std::string::npos);
  ::unsetenv("RINGGUARD_POLICY_FORCE");
  ::setenv("RINGGUARD_POLICY", "maybe", 1);
  EXPECT_EQ(engine.configureFromEnv().message(),
            "RINGGUARD_POLICY='maybe': expected one of on (or 1), off (or 0)");
  ::unsetenv("RINGGUARD_POLICY");
}

// An agreement that plays the other ranks: it MAXes this rank's vector with another's.
TEST(PolicyEngine, AgreementUsesTheMaxAndChecksRulesAndSteps) {
  PolicyEngine engine(smallRules());
  std::vector<double> other;
  size_t calls = 0;
  engine.setAgreement([&](std::vector<double>* v) {
    ++calls;
    if (other.empty()) return Status::ok();
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] = std::max((*v)[i], other[i]);
    return Status::ok();
  });
  // Vector: digest, -digest, step, -step, gather: elapsed, 2 disabled flags, "pcie".
  const double digest = engine.rules().digest;
  other = {digest, -digest, 0, -0.0, 0, 0, 0, 0.1};
  ASSERT_TRUE(engine.onStep(at(0, {{"pcie", 0.1}})).isOk());
  EXPECT_EQ(engine.current("gather"), "ring");
  // From step 1 the other rank sees a saturated link.
  other = {digest, -digest, 1, -1, 0, 0, 0, 0.9};
  ASSERT_TRUE(engine.onStep(at(1, {{"pcie", 0.1}})).isOk());
  other = {digest, -digest, 2, -2, 0, 0, 0, 0.9};
  ASSERT_TRUE(engine.onStep(at(2, {{"pcie", 0.1}})).isOk());
  EXPECT_EQ(engine.current("gather"), "staged");  // from the other rank's signal, after the 2-step dwell
  EXPECT_TRUE(engine.decisions().back().agreed);
  EXPECT_EQ(engine.decisions().back().signals[0].value, 0.9);
  EXPECT_EQ(engine.current("attention"), "fast");  // local: not agreed
  EXPECT_EQ(calls, 3u);
  // A rank whose "staged" is disabled makes every rank leave it.
  other = {digest, -digest, 3, -3, 0, 0, 1, 0.9};
  ASSERT_TRUE(engine.onStep(at(3, {{"pcie", 0.1}})).isOk());
  EXPECT_EQ(engine.current("gather"), "ring");
  // Different rules on another rank.
  other = {digest + 1, -(digest - 5), 4, -4, 0, 0, 0, 0};
  Status st = engine.onStep(at(4, {}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ranks loaded different rules"), std::string::npos) << st.message();
  // Another rank at another step.
  other = {digest, -digest, 7, -4, 0, 0, 0, 0};
  st = engine.onStep(at(5, {}));
  EXPECT_NE(st.message().find("ranks are at different step boundaries (this rank: step 4, ranks span 4..7)"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(engine.steps(), 4u);  // failed steps change nothing
  // An agreement that fails is returned as is.
  engine.setAgreement([](std::vector<double>*) { return Status(StatusCode::kTimeout, "peer 2 gone"); });
  EXPECT_EQ(engine.onStep(at(6, {})).toString(), "Timeout: peer 2 gone");
}

}  // namespace
}  // namespace ringguard
