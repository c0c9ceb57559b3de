// RINGGUARD_NAN_CHECK over the loopback transport: each mode on the collectives, exact indices in the
// messages, skip agreed by every rank with the outputs left as they were, and the mode checked by the
// handshake.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/float16.h"
#include "loopback_util.h"
#include "ringguard/core/non_finite.h"

namespace ringguard {
namespace {

using testing::LoopbackGroup;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Options withCheck(NanCheck mode) {
  Options o;
  o.nanCheck = mode;
  o.sliceBytes = 256;
  o.timeout = std::chrono::milliseconds(20000);
  o.logLevel = "off";
  return o;
}

// Rank r's allreduce input: r + 1 everywhere, with `bad` values at `at` on rank `badRank`.
std::vector<float> input(int r, size_t count, int badRank, const std::vector<size_t>& at, float bad) {
  std::vector<float> v(count, float(r + 1));
  if (r == badRank)
    for (size_t i : at) v[i] = bad;
  return v;
}

TEST(NonFiniteScan, CountsAndFirstIndexPerDtype) {
  std::vector<float> f = {1, kNaN, 2, -kInf, kInf};
  NonFiniteCount c = scanNonFinite(f.data(), f.size(), DataType::kFloat32);
  EXPECT_EQ(c.count, 3u);
  EXPECT_EQ(c.firstIndex, 1u);
  std::vector<double> d = {0, 0, -std::numeric_limits<double>::infinity()};
  c = scanNonFinite(d.data(), d.size(), DataType::kFloat64);
  EXPECT_EQ(c.count, 1u);
  EXPECT_EQ(c.firstIndex, 2u);
  std::vector<uint16_t> h = {floatToHalf(1.0f), 0x7e00, floatToHalf(3.0f)};  // fp16 NaN at 1
  c = scanNonFinite(h.data(), h.size(), DataType::kFloat16);
  EXPECT_EQ(c.count, 1u);
  EXPECT_EQ(c.firstIndex, 1u);
  std::vector<uint16_t> b = {0xff80, floatToBf16(2.0f)};  // bf16 -Inf at 0
  c = scanNonFinite(b.data(), b.size(), DataType::kBFloat16);
  EXPECT_EQ(c.count, 1u);
  EXPECT_EQ(c.firstIndex, 0u);
  std::vector<int32_t> ints = {0x7f800000, -1};  // an int whose bits look like +Inf is no Inf
  EXPECT_TRUE(scanNonFinite(ints.data(), ints.size(), DataType::kInt32).clean());
  EXPECT_TRUE(scanNonFinite(nullptr, 0, DataType::kFloat32).clean());
}

// Complex values are scanned as their real and imaginary parts: the count is of non-finite parts, the first
// index is the complex element's.
TEST(NonFiniteScan, ComplexCountsPartsAndNamesTheElement) {
  std::vector<float> c64(2 * 9, 1.5f);  // 9 complex64 values
  c64[2 * 3 + 1] = kNaN;                // imaginary part of element 3
  c64[2 * 5] = kInf;                    // both parts of element 5
  c64[2 * 5 + 1] = -kInf;
  NonFiniteCount c = scanNonFinite(c64.data(), 9, DataType::kComplex64);
  EXPECT_EQ(3u, c.count);
  EXPECT_EQ(3u, c.firstIndex);
  std::vector<double> c128(2 * 4, -2.0);
  c128[2 * 2] = std::nan("");  // real part of element 2
  c = scanNonFinite(c128.data(), 4, DataType::kComplex128);
  EXPECT_EQ(1u, c.count);
  EXPECT_EQ(2u, c.firstIndex);
  EXPECT_TRUE(scanNonFinite(c128.data(), 2, DataType::kComplex128).clean());  // elements 0 and 1 only
  EXPECT_TRUE(holdsNonFinite(DataType::kComplex64));
  EXPECT_TRUE(holdsNonFinite(DataType::kComplex128));
}

// float8: every one of the 256 bytes against the formats' definitions. e5m2 (IEEE-like) is non-finite
// exactly when its 5 exponent bits are all set (Inf 0x7c, NaN 0x7d-0x7f, and negated); e4m3fn has no Inf
// and its only non-finite bytes are the two NaNs, 0x7f and 0xff (0x78-0x7e are finite: 256 to 448).
TEST(NonFiniteScan, Float8EveryByte) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte = static_cast<uint8_t>(b);
    const bool e5m2Bad = (b & 0x7c) == 0x7c;
    const bool e4m3Bad = (b & 0x7f) == 0x7f;
    EXPECT_EQ(e5m2Bad ? 1u : 0u, scanNonFinite(&byte, 1, DataType::kFloat8E5M2).count) << b;
    EXPECT_EQ(e4m3Bad ? 1u : 0u, scanNonFinite(&byte, 1, DataType::kFloat8E4M3).count) << b;
  }
  std::vector<uint8_t> v(37, 0x7e);  // 448 in e4m3fn, NaN in e5m2
  v[29] = 0xff;
  NonFiniteCount c = scanNonFinite(v.data(), v.size(), DataType::kFloat8E4M3);
  EXPECT_EQ(1u, c.count);
  EXPECT_EQ(29u, c.firstIndex);
  EXPECT_EQ(37u, scanNonFinite(v.data(), v.size(), DataType::kFloat8E5M2).count);
  EXPECT_TRUE(holdsNonFinite(DataType::kFloat8E4M3));
  EXPECT_TRUE(holdsNonFinite(DataType::kFloat8E5M2));
}

// The float8 values an error message shows, against torch's tables: e4m3fn 0x7e = 448, 0x01 = 2^-9 (the
// smallest subnormal), 0x07 = 7 x 2^-9, 0x38 = 1, 0xc4 = -3; e5m2 0x7b = 57344, 0x7c = +Inf.
TEST(NonFiniteScan, Float8ValuesAsTheyAreShown) {
  const std::pair<uint8_t, double> e4m3[] = {
      {0x7e, 448.0}, {0x01, std::ldexp(1.0, -9)}, {0x07, 7 * std::ldexp(1.0, -9)}, {0x38, 1.0}, {0xc4, -3.0},
      {0x00, 0.0},   {0x08, std::ldexp(1.0, -6)}};
  for (const auto& [byte, want] : e4m3) EXPECT_EQ(want, double(float8e4m3ToFloat(byte))) << int(byte);
  EXPECT_TRUE(std::isnan(float8e4m3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(float8e4m3ToFloat(0xff)));
  EXPECT_EQ(57344.0f, halfToFloat(uint16_t(0x7b << 8)));
  EXPECT_TRUE(std::isinf(halfToFloat(uint16_t(0x7c << 8))));
}

// A float8 all-gather (copy-only dtypes) is checked like any floating input: the NaN is found and named.
TEST(NanCheck, Float8InputsAreScanned) {
  for (DataType t : {DataType::kFloat8E4M3, DataType::kFloat8E5M2}) {
    LoopbackGroup g(2, withCheck(NanCheck::kError));
    std::vector<Status> got(2);
    g.run([&](int r, Communicator& c) {
      std::vector<uint8_t> in(40, 0x38), out(80, 0);  // 1.0 in e4m3fn, 0.5 in e5m2
      if (r == 1) in[33] = 0xff;                      // NaN in both
      got[size_t(r)] = c.allgather(in.data(), out.data(), in.size(), t);
    });
    EXPECT_EQ(StatusCode::kInvalidArgument, got[1].code()) << dataTypeName(t) << ": " << got[1].toString();
    EXPECT_EQ(StatusCode::kPeerError, got[0].code()) << dataTypeName(t) << ": " << got[0].toString();
    EXPECT_NE(std::string::npos, got[1].message().find("on rank 1 holds 1 non-finite value (NaN or +-Inf; "
                                                       "first at element 33)"))
        << got[1].toString();
  }
}

// A complex collective input is checked like a real one: the NaN in an imaginary part is found and named by
// its element.
TEST(NanCheck, ComplexInputsAreScannedByPart) {
  LoopbackGroup g(2, withCheck(NanCheck::kError));
  std::vector<Status> got(2);
  g.run([&](int r, Communicator& c) {
    std::vector<float> in(2 * 10, 1.0f), out(2 * 10, 0.0f);
    if (r == 0) in[2 * 7 + 1] = kNaN;
    got[size_t(r)] = c.allreduce(in.data(), out.data(), 10, DataType::kComplex64, ReduceOp::kSum);
  });
  EXPECT_EQ(StatusCode::kInvalidArgument, got[0].code()) << got[0].toString();
  EXPECT_EQ(StatusCode::kPeerError, got[1].code()) << got[1].toString();
  EXPECT_NE(std::string::npos,
            got[0].message().find("on rank 0 holds 1 non-finite value (NaN or +-Inf; first at "
                                  "element 7)"))
      << got[0].toString();
}

TEST(NanCheck, ParsesEveryModeAndNothingElse) {
  for (NanCheck m : {NanCheck::kOff, NanCheck::kWarn, NanCheck::kSkip, NanCheck::kError}) {
    NanCheck got = NanCheck::kOff;
    ASSERT_TRUE(parseNanCheck(nanCheckName(m), &got));
    EXPECT_EQ(got, m);
  }
  NanCheck got;
  EXPECT_FALSE(parseNanCheck("Error", &got));
  EXPECT_FALSE(parseNanCheck("", &got));
  Options o;
  Status st = Options::fromLookup(
      [](const char* name) { return std::string(name) == "RINGGUARD_NAN_CHECK" ? "sometimes" : nullptr; },
      &o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("RINGGUARD_NAN_CHECK"), std::string::npos) << st.toString();
  EXPECT_NE(st.message().find("sometimes"), std::string::npos) << st.toString();
}

// off: nothing is scanned; the NaN reaches every rank's result.
TEST(NanCheck, OffRunsAndCountsNothing) {
  LoopbackGroup g(3, withCheck(NanCheck::kOff));
  g.run([&](int r, Communicator& c) {
    std::vector<float> in = input(r, 100, 1, {7}, kNaN), out(100, -1);
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), 100, DataType::kFloat32, ReduceOp::kSum).isOk());
    EXPECT_TRUE(std::isnan(out[7]));
    EXPECT_EQ(out[8], 6.0f);
  });
  EXPECT_EQ(g.totalCounters().nonFiniteInputs, 0u);
}

// warn: the collective runs as without the check; the rank with the bad input counts it.
TEST(NanCheck, WarnRunsAndCountsTheBadRank) {
  LoopbackGroup g(3, withCheck(NanCheck::kWarn));
  g.run([&](int r, Communicator& c) {
    std::vector<float> in = input(r, 100, 2, {3, 50}, kInf), out(100, -1);
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), 100, DataType::kFloat32, ReduceOp::kSum).isOk());
    EXPECT_EQ(out[3], kInf);
    EXPECT_EQ(out[4], 6.0f);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(g.comm(r).counters().nonFiniteInputs, r == 2 ? 1u : 0u);
}

// error: every rank fails, naming the rank, the collective and the first index; the bad rank with
// kInvalidArgument, the others with its announcement.
TEST(NanCheck, ErrorFailsEveryRankNamingRankAndIndex) {
  for (int n : {2, 4}) {
    LoopbackGroup g(n, withCheck(NanCheck::kError));
    std::vector<Status> got(static_cast<size_t>(n));
    g.run([&](int r, Communicator& c) {
      std::vector<float> in = input(r, 1000, 1, {700, 5}, kNaN), out(1000, -1);
      got[size_t(r)] = c.allreduce(in.data(), out.data(), 1000, DataType::kFloat32, ReduceOp::kSum);
    });
    const std::string says =
        "RINGGUARD_NAN_CHECK=error: the input of allreduce seq 0 on rank 1 holds 2 non-finite values (NaN or "
        "+-Inf; first at element 5)";
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(got[size_t(r)].code(), r == 1 ? StatusCode::kInvalidArgument : StatusCode::kPeerError)
          << got[size_t(r)].toString();
      EXPECT_NE(got[size_t(r)].message().find(says), std::string::npos) << got[size_t(r)].toString();
    }
  }
}

// skip: every rank skips the same collective and keeps its output as it was; the next collective runs.
TEST(NanCheck, SkipIsAgreedByEveryRankAndLeavesOutputsAsTheyWere) {
  for (int n : {1, 2, 3, 5}) {
    LoopbackGroup g(n, withCheck(NanCheck::kSkip));
    g.run([&](int r, Communicator& c) {
      std::vector<float> in = input(r, 100, n - 1, {42}, kNaN), out(100, -7);
      ASSERT_TRUE(c.allreduce(in.data(), out.data(), 100, DataType::kFloat32, ReduceOp::kSum).isOk());
      EXPECT_EQ(out, std::vector<float>(100, -7)) << "rank " << r << " of " << n;
      // In place too: the input stays as it was (its NaN included).
      std::vector<float> inplace = in;
      ASSERT_TRUE(
          c.allreduce(inplace.data(), inplace.data(), 100, DataType::kFloat32, ReduceOp::kSum).isOk());
      for (size_t i = 0; i < 100; ++i) {
        if (r == n - 1 && i == 42) {
          EXPECT_TRUE(std::isnan(inplace[i]));
        } else {
          EXPECT_EQ(inplace[i], in[i]);
        }
      }
      // Clean inputs run.
      std::vector<float> clean(100, float(r + 1)), sum(100, 0);
      ASSERT_TRUE(c.allreduce(clean.data(), sum.data(), 100, DataType::kFloat32, ReduceOp::kSum).isOk());
      EXPECT_EQ(sum, std::vector<float>(100, float(n * (n + 1) / 2)));
    });
    for (int r = 0; r < n; ++r) {
      const Counters c = g.comm(r).counters();
      EXPECT_EQ(c.skipped, 2u) << "rank " << r << " of " << n;
      EXPECT_EQ(c.nonFiniteInputs, r == n - 1 ? 2u : 0u);
      EXPECT_EQ(c.collectives, 3u);
    }
  }
}

// The agreement is one dissemination per collective: ceil(log2 N) frames per rank beyond the fingerprint
// and verdict rounds; warn and error need none.
TEST(NanCheck, SkipAddsOneDisseminationRoundOfControlFrames) {
  const int n = 4;  // 2 rounds
  auto framesPerRank = [&](NanCheck mode) {
    LoopbackGroup g(n, withCheck(mode));
    g.run([&](int r, Communicator& c) {
      std::vector<float> in(64, float(r)), out(64);
      ASSERT_TRUE(c.allreduce(in.data(), out.data(), 64, DataType::kFloat32, ReduceOp::kSum).isOk());
    });
    return g.comm(0).counters().controlFrames;
  };
  EXPECT_EQ(framesPerRank(NanCheck::kSkip), framesPerRank(NanCheck::kOff) + 2);
  EXPECT_EQ(framesPerRank(NanCheck::kError), framesPerRank(NanCheck::kOff));
}

// The input of each collective as it defines it: reduce_scatter's whole send buffer, the root's buffer of
// a broadcast only, all-to-all's blocks at their displacements (the index counts from the buffer's start).
TEST(NanCheck, EachCollectiveScansItsOwnInput) {
  const int n = 3;
  LoopbackGroup g(n, withCheck(NanCheck::kError));
  std::vector<Status> rs(static_cast<size_t>(n)), bc(rs), a2a(rs);
  g.run([&](int r, Communicator& c) {
    // reduce_scatter: rank 0's NaN sits in rank 2's block.
    std::vector<float> send(3 * 10, 1.0f), recv(10);
    if (r == 0) send[25] = kNaN;
    rs[size_t(r)] =
        c.reduceScatterAsync(send.data(), recv.data(), 10, DataType::kFloat32, ReduceOp::kSum)->wait();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(rs[size_t(r)].message().find("reduce_scatter seq 0 on rank 0 holds 1 non-finite value (NaN or "
                                           "+-Inf; first at element 25)"),
              std::string::npos)
        << rs[size_t(r)].toString();
  }

  LoopbackGroup g2(n, withCheck(NanCheck::kError));
  g2.run([&](int r, Communicator& c) {
    // broadcast from 1: rank 2's buffer is only an output, its NaN is not an input.
    std::vector<float> buf(16, r == 1 ? 5.0f : kNaN);
    bc[size_t(r)] = c.broadcastAsync(buf.data(), buf.data(), 16, DataType::kFloat32, 1)->wait();
    if (bc[size_t(r)].isOk()) EXPECT_EQ(buf, std::vector<float>(16, 5.0f));
  });
  // A group of its own: a rank that finished the broadcast and fails the all-to-all announces that error,
  // and a peer still in the broadcast's last verdict round would take it for the broadcast's (error frames
  // carry no collective number; docs/RELIABILITY.md).
  LoopbackGroup g3(n, withCheck(NanCheck::kError));
  g3.run([&](int r, Communicator& c) {
    // all-to-all with gaps between the blocks: a NaN in a gap is not input; one in block 2 is.
    std::vector<size_t> counts(n, 4), displs = {0, 6, 12};
    std::vector<float> s(16, float(r)), d(12);
    s[4] = kNaN;  // gap
    if (r == 2) s[13] = kNaN;
    std::vector<size_t> rdispls = {0, 4, 8};
    a2a[size_t(r)] =
        c.alltoallAsync(s.data(), counts, displs, d.data(), counts, rdispls, DataType::kFloat32)->wait();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(bc[size_t(r)].isOk()) << bc[size_t(r)].toString();
    EXPECT_NE(
        a2a[size_t(r)].message().find("alltoall seq 0 on rank 2 holds 1 non-finite value (NaN or +-Inf; "
                                      "first at element 13)"),
        std::string::npos)
        << a2a[size_t(r)].toString();
  }
}

TEST(NanCheck, IntegerInputsAreNotScanned) {
  LoopbackGroup g(2, withCheck(NanCheck::kError));
  g.run([&](int r, Communicator& c) {
    std::vector<int32_t> in(8, 0x7f800000), out(8);  // +Inf's bits, as integers
    ASSERT_TRUE(c.allreduce(in.data(), out.data(), 8, DataType::kInt32, ReduceOp::kMax).isOk());
  });
  EXPECT_EQ(g.totalCounters().nonFiniteInputs, 0u);
}

TEST(NanCheck, ModesThatDifferAreNamedByTheHandshake) {
  std::vector<Options> o(3, withCheck(NanCheck::kSkip));
  o[2].nanCheck = NanCheck::kWarn;
  LoopbackGroup g(o);
  g.run([&](int r, Communicator& c) {
    std::vector<float> in(4, 1.0f), out(4);
    Status st = c.allreduce(in.data(), out.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
    EXPECT_EQ(
        st.message(),
        "communicator settings disagree: RINGGUARD_NAN_CHECK differs: rank 0 has skip, rank 2 has warn");
  });
}

}  // namespace
}  // namespace ringguard
