// Element types and reduction operations: sizes and the names used in logs, fingerprints and CLIs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
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
  EXPECT_STREQ(reduceOpName(ReduceOp::kBand), "band");
  EXPECT_STREQ(reduceOpName(ReduceOp::kBor), "bor");
  EXPECT_STREQ(reduceOpName(ReduceOp::kBxor), "bxor");
  EXPECT_STREQ(reduceOpName(ReduceOp::kPremulSum), "premul_sum");
}

TEST(TypesTest, NewDataTypeNamesAndSizes) {
  const struct {
    DataType t;
    const char* name;
    size_t size;
  } cases[] = {{DataType::kInt8, "i8", 1},           {DataType::kInt16, "i16", 2},
               {DataType::kBool, "bool", 1},         {DataType::kFloat8E4M3, "f8e4m3", 1},
               {DataType::kFloat8E5M2, "f8e5m2", 1}, {DataType::kComplex64, "c64", 8},
               {DataType::kComplex128, "c128", 16}};
  for (const auto& c : cases) {
    EXPECT_STREQ(dataTypeName(c.t), c.name);
    EXPECT_EQ(dataTypeSize(c.t), c.size) << c.name;
  }
  EXPECT_FALSE(isValid(static_cast<DataType>(14)));
  EXPECT_EQ(dataTypeSize(static_cast<DataType>(14)), 0u);
}

TEST(TypesTest, PremulSumOpsCarryTheirFactor) {
  ReduceOp half = ReduceOp::kSum, quarter = ReduceOp::kSum, again = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &half).isOk());
  ASSERT_TRUE(makePremulSum(0.25, &quarter).isOk());
  ASSERT_TRUE(makePremulSum(0.5, &again).isOk());
  EXPECT_EQ(half, again);  // interned by value
  EXPECT_NE(half, quarter);
  EXPECT_TRUE(isPremulSum(half));
  EXPECT_TRUE(isValid(half));
  EXPECT_EQ(premulFactor(half), 0.5);
  EXPECT_EQ(premulFactor(quarter), 0.25);
  EXPECT_EQ(baseOp(half), ReduceOp::kPremulSum);
  EXPECT_STREQ(reduceOpName(quarter), "premul_sum");
  // Every other op: factor 1, its own kind.
  for (ReduceOp op : kAllReduceOps) {
    EXPECT_FALSE(isPremulSum(op));
    EXPECT_EQ(premulFactor(op), 1.0);
    EXPECT_EQ(baseOp(op), op);
  }
  // The bare kind has no factor; an unregistered handle is invalid.
  EXPECT_FALSE(isValid(ReduceOp::kPremulSum));
  EXPECT_FALSE(isValid(static_cast<ReduceOp>(255)));
  ReduceOp parsed = ReduceOp::kSum;
  EXPECT_FALSE(parseReduceOp("premul_sum", &parsed));
  // Not finite: refused, the output untouched.
  ReduceOp bad = ReduceOp::kMax;
  EXPECT_EQ(makePremulSum(std::numeric_limits<double>::infinity(), &bad).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(makePremulSum(std::nan(""), &bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad, ReduceOp::kMax);
}

TEST(TypesTest, WhichOpsReduceWhichDtypes) {
  ReduceOp premul = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(2.0, &premul).isOk());
  const ReduceOp bitwise[] = {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor};
  const ReduceOp arith[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : arith) EXPECT_TRUE(reduceSupported(t, op)) << dataTypeName(t) << reduceOpName(op);
    for (ReduceOp op : bitwise) EXPECT_FALSE(reduceSupported(t, op)) << dataTypeName(t) << reduceOpName(op);
    EXPECT_TRUE(reduceSupported(t, premul)) << dataTypeName(t);
  }
  for (DataType t :
       {DataType::kInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64, DataType::kUint8}) {
    for (ReduceOp op : arith) EXPECT_TRUE(reduceSupported(t, op)) << dataTypeName(t) << reduceOpName(op);
    for (ReduceOp op : bitwise) EXPECT_TRUE(reduceSupported(t, op)) << dataTypeName(t) << reduceOpName(op);
    EXPECT_FALSE(reduceSupported(t, premul)) << dataTypeName(t);
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kBand,
                      ReduceOp::kBor, ReduceOp::kBxor}) {
    EXPECT_TRUE(reduceSupported(DataType::kBool, op)) << reduceOpName(op);
  }
  EXPECT_FALSE(reduceSupported(DataType::kBool, ReduceOp::kAvg));
  EXPECT_FALSE(reduceSupported(DataType::kBool, premul));
  for (DataType t : {DataType::kComplex64, DataType::kComplex128}) {
    EXPECT_TRUE(reduceSupported(t, ReduceOp::kSum));
    EXPECT_TRUE(reduceSupported(t, ReduceOp::kAvg));
    EXPECT_TRUE(reduceSupported(t, premul));
    for (ReduceOp op : {ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kBand, ReduceOp::kBor,
                        ReduceOp::kBxor}) {
      EXPECT_FALSE(reduceSupported(t, op)) << dataTypeName(t) << reduceOpName(op);
    }
  }
  for (DataType t : {DataType::kFloat8E4M3, DataType::kFloat8E5M2}) {
    for (ReduceOp op : kAllReduceOps)
      EXPECT_FALSE(reduceSupported(t, op)) << dataTypeName(t) << reduceOpName(op);
    EXPECT_FALSE(reduceSupported(t, premul));
  }
  EXPECT_FALSE(reduceSupported(DataType::kFloat32, ReduceOp::kPremulSum));  // no factor
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
  EXPECT_EQ(names.size(), 14u);
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
  EXPECT_EQ(names.size(), 8u);
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
  const auto badOp = static_cast<ReduceOp>(100);  // neither an enumerator nor a premul_sum handle
  EXPECT_FALSE(isValid(badType));
  EXPECT_FALSE(isValid(badOp));
  EXPECT_EQ(dataTypeSize(badType), 0u);
  EXPECT_STREQ(dataTypeName(badType), "invalid");
  EXPECT_STREQ(reduceOpName(badOp), "invalid");
}

}  // namespace
}  // namespace ringguard
