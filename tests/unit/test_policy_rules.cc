// Rule files: the shipped default and the small test rules load; every kind of error names the key (a JSON
// pointer), the value where there is one, and the problem; RINGGUARD_POLICY_SET edits and their errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "ringguard/policy/rules.h"

namespace ringguard {
namespace {

const std::string kData = std::string(RINGGUARD_SOURCE_DIR) + "/tests/unit/data/policy/";

TEST(PolicyRules, DefaultRulesEncodeTheThreeRules) {
  PolicyRules r;
  Status st = parseRules(defaultRulesJson(), "built-in default", "", &r);
  ASSERT_TRUE(st.isOk()) << st.toString();
  ASSERT_EQ(r.families.size(), 3u);
  EXPECT_EQ(r.families[0].name, "all_gather");  // sorted by name
  EXPECT_EQ(r.families[1].name, "all_reduce");
  const PolicyFamily* att = r.family("attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(att->scope, PolicyScope::kLocal);
  ASSERT_EQ(att->variants.size(), 4u);
  EXPECT_EQ(att->variants[0].name, "cudnn");
  EXPECT_EQ(att->variants[0].priority, 20);  // outranks the fragmentation downgrade (measured leanest)
  EXPECT_EQ(att->variants[1].name, "flash");
  EXPECT_EQ(att->variants[2].name, "mem_efficient");
  EXPECT_EQ(att->variants[3].name, "math");
  EXPECT_FALSE(att->variants[2].matchAll);
  EXPECT_EQ(att->variants[2].when[0].signal, "torch.fragmentation");
  EXPECT_EQ(att->variants[2].minDwellSteps, 20);  // the family's default
  const PolicyFamily* ag = r.family("all_gather");
  EXPECT_EQ(ag->scope, PolicyScope::kCollective);
  EXPECT_EQ(ag->variants[1].name, "staged_chunked");
  EXPECT_EQ(ag->variants[1].when[0].signal, "pcie.util");
  EXPECT_EQ(ag->variants[1].when[0].enter, 0.85);
  EXPECT_EQ(ag->variants[1].when[0].exit, 0.60);
  EXPECT_EQ(r.signalsOf(*att),
            (std::vector<std::string>{"pool.device.fragmentation", "torch.fragmentation"}));
  // all_reduce: staged through host memory (no device memory) when device memory is fragmented.
  const PolicyFamily* ar = r.family("all_reduce");
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->scope, PolicyScope::kCollective);
  ASSERT_EQ(ar->variants.size(), 2u);
  EXPECT_EQ(ar->variants[0].name, "ring");
  EXPECT_TRUE(ar->variants[0].when.empty());  // the baseline
  EXPECT_EQ(ar->variants[1].name, "staged_chunked");
  EXPECT_EQ(ar->variants[1].priority, 10);
  EXPECT_FALSE(ar->variants[1].matchAll);
  EXPECT_EQ(ar->variants[1].minDwellSteps, 50);  // the family's default
  ASSERT_EQ(ar->variants[1].when.size(), 2u);
  for (const auto& c : ar->variants[1].when) {
    EXPECT_EQ(c.enter, 0.50) << c.signal;
    EXPECT_EQ(c.exit, 0.30) << c.signal;
  }
  EXPECT_EQ(r.signalsOf(*ar), (std::vector<std::string>{"pool.device.fragmentation", "torch.fragmentation"}));
  // The file in share/ is what is compiled in.
  PolicyRules fromFile;
  ASSERT_TRUE(
      loadRulesFile(std::string(RINGGUARD_SOURCE_DIR) + "/share/ringguard/rules/default.json", "", &fromFile)
          .isOk());
  EXPECT_EQ(fromFile.digest, r.digest);
}

TEST(PolicyRules, EditsFromTheEnvironment) {
  ::unsetenv("RINGGUARD_POLICY_RULES");
  ::setenv("RINGGUARD_POLICY_SET",
           "/families/all_gather/variants/1/when/0/above/enter=0.9; /families/attention/min_dwell_steps=5",
           1);
  PolicyRules r;
  Status st = loadRulesFromEnv(&r);
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(r.family("all_gather")->variants[1].when[0].enter, 0.9);
  EXPECT_EQ(r.family("attention")->variants[0].minDwellSteps, 5);
  PolicyRules plain;
  ASSERT_TRUE(parseRules(defaultRulesJson(), "x", "", &plain).isOk());
  EXPECT_NE(plain.digest, r.digest);  // edits change the digest ranks compare

  ::setenv("RINGGUARD_POLICY_RULES", (kData + "rules_small.json").c_str(), 1);
  ::unsetenv("RINGGUARD_POLICY_SET");
  ASSERT_TRUE(loadRulesFromEnv(&r).isOk());
  EXPECT_NE(r.family("gather"), nullptr);
  EXPECT_NE(r.origin.find("rules_small.json"), std::string::npos);
  ::unsetenv("RINGGUARD_POLICY_RULES");
}

struct BadCase {
  const char* what;
  std::string json;
  std::string edits;
  std::string expect;  // a substring of the error message
};

const char* kFamilyHead = R"({"version": 1, "families": {"f": )";

std::string fam(const std::string& body) { return std::string(kFamilyHead) + body + "}}"; }
std::string variants(const std::string& list) { return fam(R"({"variants": )" + list + "}"); }
std::string cond(const std::string& c) {
  return variants(R"([{"name": "base"}, {"name": "v", "when": [)" + c + "]}]");
}

class PolicyRulesBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(PolicyRulesBad, ErrorNamesKeyAndProblem) {
  const BadCase& c = GetParam();
  PolicyRules r;
  Status st = parseRules(c.json, "test.json", c.edits, &r);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << c.what;
  EXPECT_NE(st.message().find(c.expect), std::string::npos)
      << c.what << "\n  got: " << st.message() << "\n  want: " << c.expect;
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(AllKinds, PolicyRulesBad, ::testing::Values(
  BadCase{"not json", "{\"version\": 1,", "", "rules test.json: not valid JSON"},
  BadCase{"top not object", "[1]", "", "key '': value [1]: expected an object"},
  BadCase{"unknown top key", R"({"version": 1, "families": {}, "famlies": {}})", "", "key '/famlies': value {}: unknown key (allowed here: version, description, families)"},
  BadCase{"no version", R"({"families": {}})", "", "key '/version': missing"},
  BadCase{"bad version", R"({"version": 2, "families": {}})", "", "key '/version': value 2: unsupported version"},
  BadCase{"no families", R"({"version": 1})", "", "key '/families': missing (an object is required)"},
  BadCase{"families not object", R"({"version": 1, "families": []})", "", "key '/families': value []: expected an object"},
  BadCase{"family not object", fam("3"), "", "key '/families/f': value 3: expected an object"},
  BadCase{"bad family name", R"({"version": 1, "families": {"a b": {"variants": [{"name": "x"}]}}})", "", "key '/families/a b': family name must match"},
  BadCase{"unknown family key", fam(R"({"variants": [{"name": "x"}], "dwell": 3})"), "", "key '/families/f/dwell': value 3: unknown key"},
  BadCase{"bad scope", fam(R"({"scope": "global", "variants": [{"name": "x"}]})"), "", "key '/families/f/scope': value \"global\": expected \"local\" or \"collective\""},
  BadCase{"scope not string", fam(R"({"scope": 1, "variants": [{"name": "x"}]})"), "", "key '/families/f/scope': value 1: expected a string"},
  BadCase{"negative dwell", fam(R"({"min_dwell_steps": -1, "variants": [{"name": "x"}]})"), "", "key '/families/f/min_dwell_steps': value -1: out of range [0, 100000000]"},
  BadCase{"fractional dwell", fam(R"({"min_dwell_ms": 1.5, "variants": [{"name": "x"}]})"), "", "key '/families/f/min_dwell_ms': value 1.5: expected an integer"},
  BadCase{"no variants", fam("{}"), "", "key '/families/f/variants': missing"},
  BadCase{"empty variants", variants("[]"), "", "key '/families/f/variants': value []: expected a non-empty array"},
  BadCase{"variant not object", variants("[\"x\"]"), "", "key '/families/f/variants/0': value \"x\": expected an object"},
  BadCase{"variant without name", variants(R"([{"priority": 1}])"), "", "key '/families/f/variants/0/name': missing (a string is required)"},
  BadCase{"bad variant name", variants(R"([{"name": ""}])"), "", "key '/families/f/variants/0/name': value \"\": variant name must match"},
  BadCase{"duplicate variant", variants(R"([{"name": "x"}, {"name": "x"}])"), "", "key '/families/f/variants/1/name': value \"x\": duplicate variant name"},
  BadCase{"unknown variant key", variants(R"([{"name": "x", "prio": 1}])"), "", "key '/families/f/variants/0/prio': value 1: unknown key"},
  BadCase{"priority not integer", variants(R"([{"name": "x", "priority": "high"}])"), "", "key '/families/f/variants/0/priority': value \"high\": expected an integer"},
  BadCase{"bad match", variants(R"([{"name": "x"}, {"name": "y", "match": "some", "when": [{"signal": "s", "above": {"enter": 1}}]}])"), "", "key '/families/f/variants/1/match': value \"some\": expected \"all\" or \"any\""},
  BadCase{"match without when", variants(R"([{"name": "x", "match": "any"}])"), "", "key '/families/f/variants/0/match': value \"any\": given without \"when\" conditions"},
  BadCase{"empty when", variants(R"([{"name": "x"}, {"name": "y", "when": []}])"), "", "key '/families/f/variants/1/when': value []: expected a non-empty array"},
  BadCase{"no baseline", variants(R"([{"name": "y", "when": [{"signal": "s", "above": {"enter": 1}}]}])"), "", "key '/families/f/variants': no baseline variant"},
  BadCase{"condition not object", cond("1"), "", "key '/families/f/variants/1/when/0': value 1: expected an object"},
  BadCase{"condition without signal", cond(R"({"above": {"enter": 1}})"), "", "key '/families/f/variants/1/when/0/signal': missing"},
  BadCase{"bad signal name", cond(R"({"signal": "a b", "above": {"enter": 1}})"), "", "key '/families/f/variants/1/when/0/signal': value \"a b\": not a signal name"},
  BadCase{"above and below", cond(R"({"signal": "s", "above": {"enter": 1}, "below": {"enter": 0}})"), "", "key '/families/f/variants/1/when/0': value {\"above\":{\"enter\":1},\"below\":{\"enter\":0},\"signal\":\"s\"}: needs exactly one of \"above\" and \"below\""},
  BadCase{"neither above nor below", cond(R"({"signal": "s"})"), "", "needs exactly one of \"above\" and \"below\""},
  BadCase{"unknown condition key", cond(R"({"signal": "s", "above": {"enter": 1}, "for": 3})"), "", "key '/families/f/variants/1/when/0/for': value 3: unknown key"},
  BadCase{"threshold not object", cond(R"({"signal": "s", "above": 0.5})"), "", "key '/families/f/variants/1/when/0/above': value 0.5: expected an object"},
  BadCase{"no enter", cond(R"({"signal": "s", "above": {"exit": 1}})"), "", "key '/families/f/variants/1/when/0/above/enter': missing (a number is required)"},
  BadCase{"enter not number", cond(R"({"signal": "s", "above": {"enter": "0.5"}})"), "", "key '/families/f/variants/1/when/0/above/enter': value \"0.5\": expected a number"},
  BadCase{"unknown threshold key", cond(R"({"signal": "s", "above": {"enter": 1, "leave": 0}})"), "", "key '/families/f/variants/1/when/0/above/leave': value 0: unknown key (allowed here: enter, exit)"},
  BadCase{"above: exit over enter", cond(R"({"signal": "s", "above": {"enter": 0.5, "exit": 0.7}})"), "", "key '/families/f/variants/1/when/0/above/exit': value 0.7: is above enter 0.5"},
  BadCase{"below: exit under enter", cond(R"({"signal": "s", "below": {"enter": 0.5, "exit": 0.2}})"), "", "key '/families/f/variants/1/when/0/below/exit': value 0.2: is below enter 0.5"},
  BadCase{"edit: no '='", R"({"version": 1, "families": {}})", "/version", "RINGGUARD_POLICY_SET entry '/version': expected /json/pointer=value"},
  BadCase{"edit: value not JSON", R"({"version": 1, "families": {}})", "/version=one", "RINGGUARD_POLICY_SET entry '/version=one': value: not valid JSON at byte 0: "},
  BadCase{"edit: no such key", R"({"version": 1, "families": {}})", "/familes/x/scope=1", "RINGGUARD_POLICY_SET entry '/familes/x/scope=1': key '/familes/x' does not exist"},
  BadCase{"edit makes it invalid", variants(R"([{"name": "x"}])"), "/families/f/scope=\"everywhere\"", "key '/families/f/scope': value \"everywhere\": expected \"local\" or \"collective\""}
));
// clang-format on

TEST(PolicyRules, MissingFile) {
  PolicyRules r;
  Status st = loadRulesFile("/nonexistent/rules.json", "", &r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "rules file '/nonexistent/rules.json' cannot be read: No such file or directory");
}

// Hostile rules (issue 47): each was a crash, a hang, a RuntimeError or a message of 100 KB.
class HostileRules : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rg_hostile_rules_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const char* f : {"/r.json", "/fifo"}) std::remove((dir_ + f).c_str());
    rmdir(dir_.c_str());
  }
  std::string write(const std::string& text) {
    std::ofstream(dir_ + "/r.json", std::ios::binary) << text;
    return dir_ + "/r.json";
  }
  Status load(const std::string& text, const std::string& edits = "") {
    PolicyRules r;
    return loadRulesFile(write(text), edits, &r);
  }
  std::string dir_;
};

const std::string kOneFamily = R"({"version": 1, "families": {"a": {"variants": [{"name": "x"}]}}})";

TEST_F(HostileRules, DeepNestingNamesTheFileAndTheLimit) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(load(deep).message(),
            "rules '" + dir_ +
                "/r.json': at '/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0': "
                "nested deeper than the limit of 32 levels");
  const std::string inDescription = R"({"version": 1, "families": {"a": {"description": )" + deep + "}}}";
  Status st = load(inDescription);
  EXPECT_NE(st.message().find("at '/families/a/description/0/0/0"), std::string::npos) << st.message();
  // At 10000 levels the error echoed the value: 20 KB of brackets. Now every echo is an excerpt.
  PolicyRules r;
  const std::string mid = std::string(20, '[') + std::string(20, ']');
  st = parseRules(
      R"({"version": 1, "families": {"a": {"description": )" + mid + R"(, "variants": [{"name": "x"}]}}})",
      "python", "", &r);
  EXPECT_EQ(st.message(), "rules python: key '/families/a/description': value " + std::string(20, '[') +
                              std::string(20, ']') + ": expected a string");
  std::string wide = "[1";
  for (int i = 1; i < 15000; ++i) wide += ",1";
  wide += "]";
  st = parseRules(
      R"({"version": 1, "families": {"a": {"description": )" + wide + R"(, "variants": [{"name": "x"}]}}})",
      "python", "", &r);
  EXPECT_LT(st.message().size(), 200u) << st.message();
  EXPECT_NE(st.message().find("...(30001 bytes)..."), std::string::npos) << st.message();
}

TEST_F(HostileRules, NumberOverflowIsAnInvalidArgumentNamingFileAndKey) {
  const std::string over = R"({"version": 1, "families": {"a": {"variants": [{"name": "x"}, {"name": "y", )"
                           R"("when": [{"signal": "s", "above": {"enter": 1e400}}]}]}}})";
  EXPECT_EQ(load(over).message(), "rules '" + dir_ +
                                      "/r.json': key '/families/a/variants/1/when/0/above/enter': "
                                      "the number 1e400 is outside the range of a double");
  PolicyRules r;
  EXPECT_EQ(parseRules(over, "python", "", &r).message(),
            "rules python: key '/families/a/variants/1/when/0/above/enter': the number 1e400 is outside the "
            "range of a double");
  const Status st = parseRules(kOneFamily, "python", "/families/a/min_dwell_ms=1e400", &r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "RINGGUARD_POLICY_SET entry '/families/a/min_dwell_ms=1e400': value: key '': the number "
            "1e400 is outside the range of a double");
}

TEST_F(HostileRules, OnlyRegularFilesAreRead) {
  PolicyRules r;
  EXPECT_EQ(loadRulesFile(dir_, "", &r).message(),
            "rules file '" + dir_ + "' is a directory: expected a regular file");
  ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(loadRulesFile(dir_ + "/fifo", "", &r).message(),
            "rules file '" + dir_ + "/fifo' is a FIFO: expected a regular file");  // blocked for good
}

TEST_F(HostileRules, BytesThatAreNotUtf8NameFileAndOffset) {
  const std::string text = R"({"version": 1, "families": {"a": {"description": "caf)"
                           "\xe9"
                           R"(", "variants": [{"name": "x"}]}}})";
  const Status st = load(text);
  EXPECT_EQ(st.message().substr(0, st.message().find(" (near")),
            "rules '" + dir_ + "/r.json': byte " + std::to_string(text.find('\xe9')) + " is not UTF-8");
  for (char c : st.message()) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << st.message();  // a Python str
}

TEST_F(HostileRules, DuplicateKeysAndTextAfterANulAreRefused) {
  EXPECT_EQ(load(R"({"version": 1, "families": {"a": {"variants": [{"name": "x"}]}, "a": {"variants": []}}})")
                .message(),
            "rules '" + dir_ + "/r.json': key '/families/a' appears twice in its object");
  EXPECT_EQ(load(kOneFamily + std::string("\0garbage", 8)).message(),
            "rules '" + dir_ + "/r.json': byte " + std::to_string(kOneFamily.size()) +
                " is a NUL, which JSON text never holds (inside a string write \\u0000)");
  EXPECT_TRUE(load(kOneFamily + "\n").isOk());
}

}  // namespace
}  // namespace ringguard
