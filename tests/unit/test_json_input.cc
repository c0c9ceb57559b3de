// User input at the edges (issue 47): excerpts of echoed values, JSON parsed within limits, and files read
// only when they are regular files. Every refusal names the input, the place and the limit.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/excerpt.h"
#include "core/json_input.h"
#include "core/regular_file.h"

namespace ringguard {
namespace {

using nlohmann::json;

std::string nested(size_t depth, const std::string& inner = "") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

Status parse(const std::string& text, json* out = nullptr, JsonLimits limits = {}) {
  json scratch;
  return parseJsonInput(text, "input 'x.json'", limits, out ? out : &scratch);
}

TEST(Excerpt, ShortPrintableTextIsKept) {
  EXPECT_EQ(excerpt("bitflip"), "bitflip");
  EXPECT_EQ(excerpt(""), "");
}

TEST(Excerpt, OtherBytesAreEscapedSoTheMessageIsAscii) {
  EXPECT_EQ(excerpt(std::string("bitflip\0garbage", 15)), "bitflip\\0garbage");
  EXPECT_EQ(excerpt("a\xff\n\tb\\"), "a\\xff\\n\\tb\\\\");
}

TEST(Excerpt, LongTextKeepsHeadAndTailWithinTheBudget) {
  const std::string big = nested(50000);  // what the error echoed whole before (issue 47, item 2)
  const std::string e = excerpt(big);
  EXPECT_EQ(e, std::string(40, '[') + "...(100000 bytes)..." + std::string(40, ']'));
  const std::string binary(10000, '\xfe');
  const std::string b = excerpt(binary);
  EXPECT_LE(b.size(), kExcerptBytes + 20) << b;
  EXPECT_EQ(b.substr(0, 8), "\\xfe\\xfe");
  EXPECT_NE(b.find("...(10000 bytes)..."), std::string::npos);
}

TEST(JsonInput, DepthIsBoundedBeforeAnythingWalksTheDocument) {
  json j;
  ASSERT_TRUE(parse(nested(32), &j).isOk());
  EXPECT_EQ(j.dump().size(), 64u);
  Status st = parse(nested(33));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "input 'x.json': at '/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0': "
            "nested deeper than the limit of 32 levels");
  // 100000 levels ended the process with SIGSEGV (issue 47, item 1); refused at level 33, at once.
  const auto t0 = std::chrono::steady_clock::now();
  st = parse(nested(100000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_NE(st.message().find("nested deeper than the limit of 32 levels"), std::string::npos);
  st = parse(R"({"families": {"a": {"description": )" + nested(100000) + "}}}");
  EXPECT_NE(st.message().find("at '/families/a/description/0/0/"), std::string::npos) << st.message();
  EXPECT_LT(st.message().size(), 200u);
}

TEST(JsonInput, SizeIsBounded) {
  JsonLimits small;
  small.maxBytes = 10;
  EXPECT_EQ(parse("[1, 2, 3, 4, 5]", nullptr, small).message(),
            "input 'x.json': 15 bytes, above the limit of 10");
}

TEST(JsonInput, NumberOverflowNamesTheKey) {
  EXPECT_EQ(parse(R"({"a": [0, {"b": 1e400}]})").message(),
            "input 'x.json': key '/a/1/b': the number 1e400 is outside the range of a double");
  EXPECT_EQ(parse(R"([1, -1e400])").message(),
            "input 'x.json': key '/1': the number -1e400 is outside the range of a double");
  json j;
  ASSERT_TRUE(parse("[1e-400]", &j).isOk());  // underflow is a number: zero
  EXPECT_EQ(j[0].get<double>(), 0.0);
}

TEST(JsonInput, NulAndWhatFollowsItAreRefused) {
  // nlohmann's lexer ends the input at a NUL: "{}\0garbage" parsed as {}.
  EXPECT_EQ(parse(std::string("{}\0garbage", 10)).message(),
            "input 'x.json': byte 2 is a NUL, which JSON text never holds (inside a string write \\u0000)");
  json j;
  ASSERT_TRUE(parse(R"(["a\u0000b"])", &j).isOk());
  EXPECT_EQ(j[0].get<std::string>(), std::string("a\0b", 3));
}

TEST(JsonInput, BytesThatAreNotUtf8AreNamedByOffset) {
  EXPECT_EQ(parse("{\"description\": \"caf\xe9\"}").message(),
            "input 'x.json': byte 20 is not UTF-8 (near 'scription\": \"caf\\xe9\"}')");
  EXPECT_NE(parse("[\"\xc0\xaf\"]").message().find("byte 2 is not UTF-8"),
            std::string::npos);  // overlong '/'
  EXPECT_NE(parse("[\"\xed\xa0\x80\"]").message().find("byte 2 is not UTF-8"),
            std::string::npos);                                                                 // surrogate
  EXPECT_NE(parse("[\"\xe2\x82\"]").message().find("byte 2 is not UTF-8"), std::string::npos);  // truncated
  json j;
  ASSERT_TRUE(parse("[\"caf\xc3\xa9 \xf0\x9f\x98\x80\"]", &j).isOk());
}

TEST(JsonInput, DuplicateKeysAreRefused) {
  EXPECT_EQ(parse(R"({"a": {"b": 1, "c": 2, "b": 3}})").message(),
            "input 'x.json': key '/a/b' appears twice in its object");
  EXPECT_TRUE(parse(R"([{"b": 1}, {"b": 2}])").isOk());  // one per object
}

TEST(JsonInput, SyntaxErrorsNameTheByteAndStayShort) {
  Status st = parse("[1, 2,, 3]");
  EXPECT_NE(st.message().find("input 'x.json': not valid JSON at byte 6: "), std::string::npos)
      << st.message();
  st = parse("[\"" + std::string(100000, 'x'));  // the lexer's "last read" holds the whole string
  EXPECT_LT(st.message().size(), 300u) << st.message();
}

class RegularFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rg_regular_file_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::remove((dir_ + "/fifo").c_str());
    std::remove((dir_ + "/f.json").c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(RegularFile, DirectoriesAndFifosAreRefusedWithoutBlocking) {
  std::string text;
  EXPECT_EQ(readRegularFile(dir_, "rules file", 100, &text).message(),
            "rules file '" + dir_ + "' is a directory: expected a regular file");
  ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  // Opening a FIFO for reading waits for a writer: this returned only with a writer, or never.
  EXPECT_EQ(readRegularFile(dir_ + "/fifo", "rules file", 100, &text).message(),
            "rules file '" + dir_ + "/fifo' is a FIFO: expected a regular file");
  EXPECT_NE(readRegularFile(dir_ + "/none", "rules file", 100, &text)
                .message()
                .find("cannot be read: No such file"),
            std::string::npos);
}

TEST_F(RegularFile, SizeIsBoundedAndTheTextReadWhole) {
  std::ofstream(dir_ + "/f.json") << "[1, 2, 3]";
  std::string text;
  ASSERT_TRUE(readRegularFile(dir_ + "/f.json", "rules file", 9, &text).isOk());
  EXPECT_EQ(text, "[1, 2, 3]");
  EXPECT_EQ(readRegularFile(dir_ + "/f.json", "rules file", 8, &text).message(),
            "rules file '" + dir_ + "/f.json' is 9 bytes, above the limit of 8");
}

}  // namespace
}  // namespace ringguard
