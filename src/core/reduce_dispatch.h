#pragma once
// The choice of element operation for a (dtype, op) pair, made once for host and device: reduceHost
// (core/reduce.cc) loops over the chosen operation, the device launchers (src/cuda/verify_apply.cu) launch
// the kernel instantiated for it. Host code; the operations themselves are core/element_ops.h.
#include <cstddef>
#include <string>
#include <type_traits>

#include "core/element_ops.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace element_ops {

// What a reduction of (dtype, op) runs on: bitwise ops on bytes, complex dtypes on their real parts, every
// other dtype on its elements.
struct ReduceLayout {
  size_t elemBytes;   // bytes of one element of the operation
  size_t perElement;  // operation elements per dtype element
};
inline ReduceLayout reduceLayout(DataType dtype, ReduceOp op) {
  const size_t size = dataTypeSize(dtype);
  const ReduceOp base = baseOp(op);
  if (base == ReduceOp::kBand || base == ReduceOp::kBor || base == ReduceOp::kBxor) return {1, size};
  if (isComplexType(dtype)) return {size / 2, 2};
  return {size, 1};
}

// The operation a dispatch chose, as a value: launch(OpTag<Op>{}) names it as decltype(tag)::type.
template <typename Op>
struct OpTag {
  using type = Op;
};

namespace detail {
template <typename Conv, typename Launch>
Status dispatchOp(ReduceOp op, bool finalStep, bool firstStep, Launch&& launch) {
  switch (baseOp(op)) {
    case ReduceOp::kSum:
      return launch(OpTag<ReduceOpT<Conv, SumFn>>{});
    case ReduceOp::kProd:
      return launch(OpTag<ReduceOpT<Conv, ProdFn>>{});
    case ReduceOp::kMin:
      return launch(OpTag<ReduceOpT<Conv, MinFn>>{});
    case ReduceOp::kMax:
      return launch(OpTag<ReduceOpT<Conv, MaxFn>>{});
    case ReduceOp::kAvg:
      if (finalStep) return launch(OpTag<ReduceOpT<Conv, AvgFinalFn>>{});
      return launch(OpTag<ReduceOpT<Conv, SumFn>>{});
    case ReduceOp::kPremulSum:
      if constexpr (std::is_floating_point_v<typename Conv::Compute>) {
        if (firstStep) return launch(OpTag<ReduceOpT<Conv, PremulFn<true>>>{});
        return launch(OpTag<ReduceOpT<Conv, PremulFn<false>>>{});
      }
      break;
    default:
      break;
  }
  return Status(StatusCode::kInvalidArgument,
                std::string("op ") + reduceOpName(op) + " has no element operation");
}
}  // namespace detail

// Calls launch(OpTag<Op>{}) with the operation of (dtype, op, finalStep, firstStep) and returns its Status;
// the operation runs on reduceLayout(dtype, op) elements. The caller checked reduceSupported(dtype, op).
// Every operation chosen here is in the kernels' instantiation list (src/cuda/verify_apply.cu).
template <typename Launch>
Status dispatchReduce(DataType dtype, ReduceOp op, bool finalStep, bool firstStep, Launch&& launch) {
  switch (baseOp(op)) {
    case ReduceOp::kBand:
      return launch(OpTag<BitwiseOpT<BandFn>>{});
    case ReduceOp::kBor:
      return launch(OpTag<BitwiseOpT<BorFn>>{});
    case ReduceOp::kBxor:
      return launch(OpTag<BitwiseOpT<BxorFn>>{});
    default:
      break;
  }
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kComplex64:
      return detail::dispatchOp<NativeConv<float>>(op, finalStep, firstStep, launch);
    case DataType::kFloat64:
    case DataType::kComplex128:
      return detail::dispatchOp<NativeConv<double>>(op, finalStep, firstStep, launch);
    case DataType::kFloat16:
      return detail::dispatchOp<HalfConv>(op, finalStep, firstStep, launch);
    case DataType::kBFloat16:
      return detail::dispatchOp<BFloatConv>(op, finalStep, firstStep, launch);
    case DataType::kInt32:
      return detail::dispatchOp<NativeConv<int32_t>>(op, finalStep, firstStep, launch);
    case DataType::kInt64:
      return detail::dispatchOp<NativeConv<int64_t>>(op, finalStep, firstStep, launch);
    case DataType::kUint8:
      return detail::dispatchOp<NativeConv<uint8_t>>(op, finalStep, firstStep, launch);
    case DataType::kInt16:
      return detail::dispatchOp<NativeConv<int16_t>>(op, finalStep, firstStep, launch);
    case DataType::kInt8:
      // i8 sums and products are the u8 ones (two's complement: the same bits), so only the ops that read
      // the sign have i8 operations.
      switch (baseOp(op)) {
        case ReduceOp::kMin:
          return launch(OpTag<ReduceOpT<NativeConv<int8_t>, MinFn>>{});
        case ReduceOp::kMax:
          return launch(OpTag<ReduceOpT<NativeConv<int8_t>, MaxFn>>{});
        case ReduceOp::kAvg:
          if (finalStep) return launch(OpTag<ReduceOpT<NativeConv<int8_t>, AvgFinalFn>>{});
          break;
        default:
          break;
      }
      return detail::dispatchOp<NativeConv<uint8_t>>(op, finalStep, firstStep, launch);
    case DataType::kBool: {
      // Bytes 0 and 1: sum is their max (or), product their min (and), as ProcessGroupNCCL maps SUM /
      // PRODUCT on bool.
      const ReduceOp base = baseOp(op);
      const ReduceOp u8op = base == ReduceOp::kSum    ? ReduceOp::kMax
                            : base == ReduceOp::kProd ? ReduceOp::kMin
                                                      : base;
      return detail::dispatchOp<NativeConv<uint8_t>>(u8op, finalStep, firstStep, launch);
    }
    default:
      break;
  }
  return Status(StatusCode::kInvalidArgument,
                std::string("dtype ") + dataTypeName(dtype) + " does not reduce");
}

}  // namespace element_ops
}  // namespace ringguard
