// Verdict records and the repair planner (docs/design/protocol.md, "Verdicts and repair"): every rank
// must derive the same plan from the same failures, whatever order the verdict lists arrived in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/repair.h"
#include "core/trailer.h"

namespace ringguard {
namespace {

SliceFailure failure(uint32_t column, uint32_t slice, uint32_t step, int32_t sender, int32_t receiver,
                     SliceCheck reason = SliceCheck::kCorrupt) {
  SliceFailure f;
  f.column = column;
  f.slice = slice;
  f.step = step;
  f.sender = sender;
  f.receiver = receiver;
  f.reason = static_cast<uint8_t>(reason);
  return f;
}

auto fields(const SliceFailure& f) {
  return std::make_tuple(f.column, f.slice, f.step, f.sender, f.receiver, f.reason, f.pad[0], f.pad[1],
                         f.pad[2]);
}

std::vector<SliceFailure> randomFailures(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<SliceFailure> v;
  for (size_t i = 0; i < n; ++i) {
    // Small ranges so that (column, slice) pairs and whole entries repeat.
    const uint32_t column = rng() % 4;
    const uint32_t step = rng() % 6;
    v.push_back(failure(column, rng() % 5, step, int32_t((column + step) % 4),
                        int32_t((column + step + 1) % 4), static_cast<SliceCheck>(1 + rng() % 4)));
  }
  return v;
}

std::set<decltype(fields(SliceFailure{}))> asSet(const std::vector<SliceFailure>& v) {
  std::set<decltype(fields(SliceFailure{}))> s;
  for (const SliceFailure& f : v) s.insert(fields(f));
  return s;
}

std::string planToString(const std::vector<ReplayEntry>& plan) {
  std::string s;
  for (const ReplayEntry& e : plan) {
    s += "(" + std::to_string(e.column) + "," + std::to_string(e.slice) + "@" + std::to_string(e.fromStep) +
         ")";
  }
  return s;
}

TEST(RepairTest, SliceFailureIsA24ByteWireRecord) {
  EXPECT_EQ(sizeof(SliceFailure), 24u);
  EXPECT_TRUE(std::is_trivially_copyable<SliceFailure>::value);
  const SliceFailure f;
  EXPECT_EQ(f.column, 0u);
  EXPECT_EQ(f.reason, 0u);
  EXPECT_EQ(f.pad[0] | f.pad[1] | f.pad[2], 0);
}

TEST(RepairTest, EmptyFailureListGivesEmptyPlan) {
  EXPECT_TRUE(planRepair({}).empty());
  EXPECT_TRUE(canonicalFailures({}).empty());
}

TEST(RepairTest, PlanPicksEarliestStepPerColumnSliceSortedByColumnThenSlice) {
  const std::vector<SliceFailure> failures = {
      failure(2, 1, 5, 3, 0),                      //
      failure(0, 3, 4, 0, 1),                      //
      failure(2, 1, 2, 0, 1),                      // earlier than step 5 for (2, 1)
      failure(0, 0, 7, 3, 0),                      //
      failure(2, 0, 9, 3, 0),                      //
      failure(0, 3, 4, 0, 1, SliceCheck::kStale),  // same step again, other reason
      failure(2, 1, 3, 1, 2),                      //
      failure(1, 10, 0, 1, 2),
  };
  const std::vector<ReplayEntry> expected = {{0, 0, 7}, {0, 3, 4}, {1, 10, 0}, {2, 0, 9}, {2, 1, 2}};
  EXPECT_EQ(planRepair(failures), expected) << planToString(planRepair(failures));
}

TEST(RepairTest, DuplicatesGiveOneEntry) {
  const SliceFailure f = failure(3, 2, 1, 0, 1);
  const std::vector<ReplayEntry> expected = {{3, 2, 1}};
  EXPECT_EQ(planRepair({f}), expected);
  EXPECT_EQ(planRepair({f, f, f}), expected);
  // The same (column, slice) failing on several links collapses to the earliest one.
  EXPECT_EQ(planRepair({failure(3, 2, 4, 2, 3), f, failure(3, 2, 1, 0, 1, SliceCheck::kMalformed)}),
            expected);
}

TEST(RepairTest, SliceIndexOrderIsNumericNotInsertion) {
  const std::vector<ReplayEntry> expected = {{0, 1, 0}, {0, 2, 0}, {0, 10, 0}, {1, 0, 3}, {7, 0, 0}};
  EXPECT_EQ(planRepair({failure(7, 0, 0, 0, 1), failure(0, 10, 0, 0, 1), failure(1, 0, 3, 0, 1),
                        failure(0, 2, 0, 0, 1), failure(0, 1, 0, 0, 1)}),
            expected);
}

// The plan against a brute-force reference, and independent of the order of its input.
TEST(RepairTest, PlanMatchesReferenceAndIgnoresOrder) {
  std::mt19937 rng(2024);
  for (uint32_t seed = 0; seed < 50; ++seed) {
    std::vector<SliceFailure> failures = randomFailures(1 + seed * 3, seed);
    std::map<std::pair<uint32_t, uint32_t>, uint32_t> earliest;
    for (const SliceFailure& f : failures) {
      auto key = std::make_pair(f.column, f.slice);
      auto it = earliest.find(key);
      earliest[key] = it == earliest.end() ? f.step : std::min(it->second, f.step);
    }
    std::vector<ReplayEntry> expected;
    for (const auto& [key, step] : earliest) expected.push_back({key.first, key.second, step});

    const std::vector<ReplayEntry> plan = planRepair(failures);
    EXPECT_EQ(plan, expected) << "seed " << seed;
    for (int shuffle = 0; shuffle < 5; ++shuffle) {
      std::shuffle(failures.begin(), failures.end(), rng);
      EXPECT_EQ(planRepair(failures), plan) << "seed " << seed << " shuffle " << shuffle;
    }
    EXPECT_EQ(planRepair(canonicalFailures(failures)), plan) << "seed " << seed;
  }
}

TEST(RepairTest, CanonicalFailuresIsOrderIndependentAndDeduplicates) {
  std::mt19937 rng(77);
  for (uint32_t seed = 0; seed < 30; ++seed) {
    std::vector<SliceFailure> failures = randomFailures(10 + seed * 5, 1000 + seed);
    // Add exact duplicates of some entries.
    const size_t n = failures.size();
    for (size_t i = 0; i < n; i += 3) failures.push_back(failures[i]);

    const std::vector<SliceFailure> canon = canonicalFailures(failures);
    // Exactly the distinct entries of the input ...
    EXPECT_EQ(asSet(canon), asSet(failures)) << "seed " << seed;
    EXPECT_EQ(canon.size(), asSet(failures).size()) << "duplicates left, seed " << seed;
    // ... and the same sequence whatever the order of the input.
    for (int shuffle = 0; shuffle < 5; ++shuffle) {
      std::shuffle(failures.begin(), failures.end(), rng);
      const std::vector<SliceFailure> again = canonicalFailures(failures);
      ASSERT_EQ(again.size(), canon.size());
      for (size_t i = 0; i < canon.size(); ++i) {
        EXPECT_EQ(fields(again[i]), fields(canon[i]))
            << "seed " << seed << " shuffle " << shuffle << " at " << i;
      }
    }
    // Idempotent.
    const std::vector<SliceFailure> twice = canonicalFailures(canon);
    ASSERT_EQ(twice.size(), canon.size());
    for (size_t i = 0; i < canon.size(); ++i) EXPECT_EQ(fields(twice[i]), fields(canon[i]));
  }
}

TEST(RepairTest, CanonicalFailuresKeepsEntriesThatDifferInAnyField) {
  const SliceFailure base = failure(1, 2, 3, 4, 5, SliceCheck::kCorrupt);
  std::vector<SliceFailure> v = {base, base};
  SliceFailure f = base;
  f.column = 9;
  v.push_back(f);
  f = base;
  f.slice = 9;
  v.push_back(f);
  f = base;
  f.step = 9;
  v.push_back(f);
  f = base;
  f.sender = 9;
  v.push_back(f);
  f = base;
  f.receiver = 9;
  v.push_back(f);
  f = base;
  f.reason = static_cast<uint8_t>(SliceCheck::kStale);
  v.push_back(f);
  const std::vector<SliceFailure> canon = canonicalFailures(v);
  EXPECT_EQ(canon.size(), 7u);
  EXPECT_EQ(asSet(canon), asSet(v));
  EXPECT_EQ(canonicalFailures({base, base, base}).size(), 1u);
}

TEST(RepairTest, DescribeFailureNamesLinkStepSliceColumnAndReason) {
  EXPECT_EQ(describeFailure(failure(0, 7, 3, 1, 2, SliceCheck::kCorrupt)),
            "link 1 -> 2, step 3, slice 7, column 0: payload CRC mismatch");
  const SliceCheck reasons[] = {SliceCheck::kMalformed, SliceCheck::kStale, SliceCheck::kSizeMismatch,
                                SliceCheck::kCorrupt, SliceCheck::kPoisoned};
  for (SliceCheck reason : reasons) {
    const std::string d = describeFailure(failure(11, 22, 33, 7, 0, reason));
    SCOPED_TRACE(d);
    EXPECT_NE(d.find("link 7 -> 0"), std::string::npos);
    EXPECT_NE(d.find("step 33"), std::string::npos);
    EXPECT_NE(d.find("slice 22"), std::string::npos);
    EXPECT_NE(d.find("column 11"), std::string::npos);
    EXPECT_NE(d.find(sliceCheckName(reason)), std::string::npos);
    EXPECT_EQ(d.substr(d.size() - std::string(sliceCheckName(reason)).size()), sliceCheckName(reason));
  }
  EXPECT_EQ(describeFailure(failure(4294967295u, 0, 1, 63, 0, SliceCheck::kStale)),
            "link 63 -> 0, step 1, slice 0, column 4294967295: stale or duplicated slice");
}

}  // namespace
}  // namespace ringguard
