#include "core/reduce.h"

#include <string>

#include "core/element_ops.h"
#include "core/reduce_dispatch.h"
#include "ringguard/core/status.h"

namespace ringguard {

namespace {

using element_ops::BFloatConv;
using element_ops::HalfConv;
using element_ops::NativeConv;
using element_ops::OpArg;

// dst[i] = Op::element(x[i], y[i]) over the operation's elements (reduceLayout): the loop of the kernels'
// data path (src/cuda/apply_share.cuh) with one element per step.
template <typename Op>
void applyOp(void* dst, const void* a, const void* b, size_t n, const OpArg& arg) {
  using E = typename Op::Elem;
  E* d = static_cast<E*>(dst);
  const E* x = static_cast<const E*>(a);
  const E* y = static_cast<const E*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Op::element(x[i], y[i], arg);
}

template <typename Conv>
void divideTyped(void* data, size_t n, int divisor) {
  using T = typename Conv::Elem;
  T* d = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = Conv::store(element_ops::divideByInt(Conv::load(d[i]), divisor));
}

}  // namespace

double premulScalar(DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kComplex64:
      return double(float(factor));
    case DataType::kFloat16:
      return double(halfToFloat(floatToHalf(float(factor))));
    case DataType::kBFloat16:
      return double(bf16ToFloat(floatToBf16(float(factor))));
    default:
      return factor;
  }
}

void reduceHost(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                bool finalStep, int nranks, bool firstStep) {
  RINGGUARD_ENFORCE(reduceSupported(dtype, op),
                    std::string("reduceHost: op ") + reduceOpName(op) + " on dtype " + dataTypeName(dtype));
  const size_t n = count * element_ops::reduceLayout(dtype, op).perElement;
  const OpArg arg{nranks, premulScalar(dtype, premulFactor(op))};
  const Status s = element_ops::dispatchReduce(dtype, op, finalStep, firstStep, [&](auto tag) {
    applyOp<typename decltype(tag)::type>(dst, a, b, n, arg);
    return Status::ok();
  });
  RINGGUARD_ENFORCE(s.isOk(), "reduceHost: " + s.message());
}

void divideHost(DataType dtype, void* data, size_t count, int divisor) {
  switch (dtype) {
    case DataType::kFloat32:
      return divideTyped<NativeConv<float>>(data, count, divisor);
    case DataType::kFloat64:
      return divideTyped<NativeConv<double>>(data, count, divisor);
    case DataType::kFloat16:
      return divideTyped<HalfConv>(data, count, divisor);
    case DataType::kBFloat16:
      return divideTyped<BFloatConv>(data, count, divisor);
    case DataType::kInt32:
      return divideTyped<NativeConv<int32_t>>(data, count, divisor);
    case DataType::kInt64:
      return divideTyped<NativeConv<int64_t>>(data, count, divisor);
    case DataType::kUint8:
      return divideTyped<NativeConv<uint8_t>>(data, count, divisor);
    case DataType::kInt8:
      return divideTyped<NativeConv<int8_t>>(data, count, divisor);
    case DataType::kInt16:
      return divideTyped<NativeConv<int16_t>>(data, count, divisor);
    case DataType::kComplex64:
      return divideTyped<NativeConv<float>>(data, 2 * count, divisor);
    case DataType::kComplex128:
      return divideTyped<NativeConv<double>>(data, 2 * count, divisor);
    default:
      break;
  }
  RINGGUARD_ENFORCE(false, std::string("divideHost: dtype ") + dataTypeName(dtype) + " cannot be divided");
}

}  // namespace ringguard
