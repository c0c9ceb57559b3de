// Element types and reduction operations: sizes and the names used in logs, fingerprints and CLIs.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "ringguard/core/types.h"

namespace ringguard {
namespace {

TEST(TypesTest, DataTypeSizes) {
  EXPECT_EQ(dataTypeSize(DataType::kFloat32), 4u);
  EXPECT_EQ(dataTypeSize(DataType::kFloat64), 8u);
  EXPECT_EQ(dataTypeSize(DataType::kFloat16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::kInt32), 4u);
  EXPECT_EQ(dataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(dataTypeSize(DataType::kUint8), 1u);
  EXPECT_EQ(dataTypeSize(DataType::kFloat32), sizeof(float));
  EXPECT_EQ(dataTypeSize(DataType::kFloat64), sizeof(double));
  EXPECT_EQ(dataTypeSize(DataType::kInt64), sizeof(int64_t));
}

TEST(TypesTest, DataTypeNames) {
  EXPECT_STREQ(dataTypeName(DataType::kFloat32), "f32");
  EXPECT_STREQ(dataTypeName(DataType::kFloat64), "f64");
  EXPECT_STREQ(dataTypeName(DataType::kFloat16), "f16");
  EXPECT_STREQ(dataTypeName(DataType::kBFloat16), "bf16");
  EXPECT_STREQ(dataTypeName(DataType::kInt32), "i32");
  EXPECT_STREQ(dataTypeName(DataType::kInt64), "i64");
  EXPECT_STREQ(dataTypeName(DataType::kUint8), "u8");
}

TEST(TypesTest, ReduceOpNames) {
  EXPECT_STREQ(reduceOpName(ReduceOp::kSum), "sum");
  EXPECT_STREQ(reduceOpName(ReduceOp::kProd), "prod");
  EXPECT_STREQ(reduceOpName(ReduceOp::kMin), "min");
  EXPECT_STREQ(reduceOpName(ReduceOp::kMax), "max");
  EXPECT_STREQ(reduceOpName(ReduceOp::kAvg), "avg");
}

TEST(TypesTest, DataTypeRoundTrip) {
  std::set<std::string> names;
  for (DataType t : kAllDataTypes) {
    EXPECT_TRUE(isValid(t));
    EXPECT_GT(dataTypeSize(t), 0u);
    EXPECT_TRUE(names.insert(dataTypeName(t)).second) << "duplicate name " << dataTypeName(t);
    DataType parsed = t == DataType::kUint8 ? DataType::kFloat32 : DataType::kUint8;
    ASSERT_TRUE(parseDataType(dataTypeName(t), &parsed)) << dataTypeName(t);
    EXPECT_EQ(parsed, t);
  }
  EXPECT_EQ(names.size(), 7u);
}

TEST(TypesTest, ReduceOpRoundTrip) {
  std::set<std::string> names;
  for (ReduceOp op : kAllReduceOps) {
    EXPECT_TRUE(isValid(op));
    EXPECT_TRUE(names.insert(reduceOpName(op)).second) << "duplicate name " << reduceOpName(op);
    ReduceOp parsed = op == ReduceOp::kAvg ? ReduceOp::kSum : ReduceOp::kAvg;
    ASSERT_TRUE(parseReduceOp(reduceOpName(op), &parsed)) << reduceOpName(op);
    EXPECT_EQ(parsed, op);
  }
  EXPECT_EQ(names.size(), 5u);
}

TEST(TypesTest, InvalidNamesAreRejected) {
  DataType t = DataType::kInt32;
  for (const char* name : {"", "F32", "float", "float32", "f32 ", " f32", "bf", "u16", "int8"}) {
    EXPECT_FALSE(parseDataType(name, &t)) << "'" << name << "'";
  }
  EXPECT_EQ(t, DataType::kInt32);  // untouched on failure

  ReduceOp op = ReduceOp::kMax;
  for (const char* name : {"", "SUM", "add", "mean", "product", "sum ", "minimum"}) {
    EXPECT_FALSE(parseReduceOp(name, &op)) << "'" << name << "'";
  }
  EXPECT_EQ(op, ReduceOp::kMax);
}

TEST(TypesTest, OutOfRangeValuesAreInvalid) {
  // Values that arrive over the wire or through a C API are not guaranteed to be enumerators.
  const auto badType = static_cast<DataType>(200);
  const auto badOp = static_cast<ReduceOp>(5);
  EXPECT_FALSE(isValid(badType));
  EXPECT_FALSE(isValid(badOp));
  EXPECT_EQ(dataTypeSize(badType), 0u);
  EXPECT_STREQ(dataTypeName(badType), "invalid");
  EXPECT_STREQ(reduceOpName(badOp), "invalid");
}

}  // namespace
}  // namespace ringguard
