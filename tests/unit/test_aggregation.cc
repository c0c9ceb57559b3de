// The aggregation layer without a framework: bucket planning (reverse order, caps, keys, alignment) and the
// in-order launch of ready buckets (src/aggregation).
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "ringguard/aggregation/bucket_plan.h"
#include "ringguard/aggregation/launch_order.h"

namespace ringguard {
namespace {

GradientSpec f32(size_t n, int64_t device = 0) { return GradientSpec{n, 4, /*typeKey=*/6, device}; }

TEST(BucketPlan, ReverseOrderUnderTheCapAndOneGradientAloneMayExceedIt) {
  // 100 + 50 + 300 + 10 floats, cap 1000 bytes: [3, 2] = 40 + 1200 > 1000 -> [3], [2], [1, 0].
  std::vector<BucketLayout> b;
  ASSERT_TRUE(planBuckets({f32(100), f32(50), f32(300), f32(10)}, 1000, 1, &b).isOk());
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{3}));
  EXPECT_EQ(b[1].params, (std::vector<size_t>{2}));
  EXPECT_EQ(b[1].elements, 300u);  // larger than the cap, alone in its bucket
  EXPECT_EQ(b[2].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(b[2].offsets, (std::vector<size_t>{0, 50}));  // packed
  EXPECT_EQ(b[2].elements, 150u);
}

TEST(BucketPlan, TypesAndDevicesNeverShareABucket) {
  GradientSpec half{8, 2, /*typeKey=*/5, 0};
  std::vector<BucketLayout> b;
  ASSERT_TRUE(planBuckets({f32(4), f32(4), half, f32(4, /*device=*/1)}, 1 << 20, 1, &b).isOk());
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{3}));
  EXPECT_EQ(b[1].params, (std::vector<size_t>{2}));
  EXPECT_EQ(b[2].params, (std::vector<size_t>{1, 0}));
}

TEST(BucketPlan, AlignmentStartsEveryGradientOnTheBoundaryAndPaddingIsNotCountedAgainstTheCap) {
  // 256-byte alignment: 64 floats. Gradients of 3, 70 and 1 floats -> offsets 0, 64, 192; length 193.
  std::vector<BucketLayout> b;
  ASSERT_TRUE(planBuckets({f32(1), f32(70), f32(3)}, 300 * 4, 256, &b).isOk());
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(b[0].offsets, (std::vector<size_t>{0, 64, 192}));
  EXPECT_EQ(b[0].elements, 193u);
  // An alignment below the element size packs.
  ASSERT_TRUE(planBuckets({GradientSpec{3, 8, 7, 0}, GradientSpec{5, 8, 7, 0}}, 1 << 20, 4, &b).isOk());
  EXPECT_EQ(b[0].offsets, (std::vector<size_t>{0, 5}));
}

TEST(BucketPlan, NoGradientsNoBuckets) {
  std::vector<BucketLayout> b(2);
  ASSERT_TRUE(planBuckets({}, 100, 1, &b).isOk());
  EXPECT_TRUE(b.empty());
}

TEST(BucketPlan, BadInputNamesTheGradient) {
  std::vector<BucketLayout> b;
  Status st = planBuckets({f32(1), GradientSpec{1, 0, 6, 0}}, 100, 1, &b);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("gradient 1 has element size 0"), std::string::npos) << st.toString();
  st = planBuckets({f32(1)}, 100, 0, &b);
  EXPECT_NE(st.message().find("alignBytes is 0"), std::string::npos) << st.toString();
  st = planBuckets({f32(std::numeric_limits<size_t>::max() / 2)}, 100, 1, &b);
  EXPECT_NE(st.message().find("gradient 0 of"), std::string::npos) << st.toString();
  const size_t big = std::numeric_limits<size_t>::max() / 4 - 1;
  st = planBuckets({f32(big), f32(big)}, std::numeric_limits<size_t>::max(), 1, &b);  // 2 big: 1 bucket
  EXPECT_EQ(st.code(), StatusCode::kOk) << st.toString();
  st = planBuckets({GradientSpec{big, 1, 0, 0}, GradientSpec{big, 1, 0, 0}, GradientSpec{big, 1, 0, 0},
                    GradientSpec{big, 1, 0, 0}, GradientSpec{big, 1, 0, 0}},
                   std::numeric_limits<size_t>::max(), 1, &b);
  EXPECT_NE(st.message().find("overflows size_t at gradient"), std::string::npos) << st.toString();
}

TEST(LaunchOrder, ABucketLaunchesOnlyAfterEveryLowerOneWhateverOrderGradientsArriveIn) {
  // Gradients 0..4 in buckets 1, 1, 0, 2, 0.
  LaunchOrder order({1, 1, 0, 2, 0});
  EXPECT_EQ(order.numBuckets(), 3);
  EXPECT_TRUE(order.markReady(3));  // bucket 2 complete, but 0 and 1 are not launched
  EXPECT_EQ(order.nextLaunch(false), -1);
  EXPECT_TRUE(order.markReady(0));
  EXPECT_TRUE(order.markReady(1));  // bucket 1 complete
  EXPECT_EQ(order.nextLaunch(false), -1);
  EXPECT_TRUE(order.markReady(2));
  EXPECT_FALSE(order.markReady(2));        // counted once
  EXPECT_EQ(order.nextLaunch(false), -1);  // bucket 0 still waits for gradient 4
  EXPECT_TRUE(order.markReady(4));
  EXPECT_EQ(order.nextLaunch(false), 0);
  EXPECT_EQ(order.nextLaunch(false), 1);
  EXPECT_EQ(order.nextLaunch(false), 2);
  EXPECT_EQ(order.nextLaunch(false), -1);
  EXPECT_EQ(order.nextLaunch(true), -1);  // each bucket once per step
  EXPECT_EQ(order.launched(), 3);
}

TEST(LaunchOrder, AllLaunchesWhatIsLeftAndResetStartsANewStep) {
  LaunchOrder order({0, 1, 1});
  EXPECT_TRUE(order.markReady(0));
  EXPECT_EQ(order.nextLaunch(false), 0);
  EXPECT_EQ(order.nextLaunch(false), -1);  // bucket 1 has gradient 1 and 2 pending
  EXPECT_EQ(order.nextLaunch(true), 1);    // the end of backward: unused gradients go as they are
  order.reset();
  EXPECT_FALSE(order.isReady(0));
  EXPECT_EQ(order.launched(), 0);
  EXPECT_EQ(order.nextLaunch(false), -1);
  EXPECT_TRUE(order.markReady(0));  // counted again in the new step
  EXPECT_EQ(order.nextLaunch(false), 0);
}

TEST(LaunchOrder, NoGradients) {
  LaunchOrder order({});
  EXPECT_EQ(order.numBuckets(), 0);
  EXPECT_EQ(order.nextLaunch(true), -1);
}

}  // namespace
}  // namespace ringguard
