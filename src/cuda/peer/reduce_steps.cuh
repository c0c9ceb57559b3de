#pragma once
// The rank-order reduction of the one-sided protocol's reducing kernels (allreduce one-shot and two-shot,
// reduce-scatter). The element operations are core/element_ops.h's, the ones the host reduction and the
// ring's kernels run (one source for host and device). Rank p's step combines x = rank p's chunk with y = the
// partial result of ranks 0..p-1; the dispatch picks the final step's operation (Final), and the first and
// middle steps follow from it: avg sums and divides at the last step, premul_sum scales both operands at the
// first. So every kernel reduces every element the same way, and their results are equal bit for bit.
#include <cuda_runtime.h>

#include <type_traits>

#include "core/element_ops.h"
#include "core/peer_window_layout.h"

namespace ringguard {
namespace peer {
namespace {

template <typename Op>
struct MidStep {
  using type = Op;
};
template <typename Conv>
struct MidStep<element_ops::ReduceOpT<Conv, element_ops::AvgFinalFn>> {
  using type = element_ops::ReduceOpT<Conv, element_ops::SumFn>;
};
template <typename Op>
struct FirstStep {
  using type = typename MidStep<Op>::type;
};
template <typename Conv>
struct FirstStep<element_ops::ReduceOpT<Conv, element_ops::PremulFn<false>>> {
  using type = element_ops::ReduceOpT<Conv, element_ops::PremulFn<true>>;
};

template <typename Op>
__device__ __forceinline__ uint4 applyVector(uint4 x, uint4 y, const element_ops::OpArg& arg) {
  if constexpr (Op::kWordwise) {
    return make_uint4(Op::word(x.x, y.x), Op::word(x.y, y.y), Op::word(x.z, y.z), Op::word(x.w, y.w));
  } else {
    using Elem = typename Op::Elem;
    constexpr int n = 16 / int(sizeof(Elem));
    const Elem* xe = reinterpret_cast<const Elem*>(&x);
    const Elem* ye = reinterpret_cast<const Elem*>(&y);
    uint4 r;
    Elem* re = reinterpret_cast<Elem*>(&r);
#pragma unroll
    for (int i = 0; i < n; ++i) re[i] = Op::element(xe[i], ye[i], arg);
    return r;
  }
}

// Step p of the rank-order reduction (p >= 1) of `size` ranks.
template <typename Final>
__device__ __forceinline__ uint4 reduceStep(int p, int size, uint4 x, uint4 partial,
                                            const element_ops::OpArg& arg) {
  using First = typename FirstStep<Final>::type;
  using Mid = typename MidStep<Final>::type;
  if (p == size - 1 && !std::is_same<Final, Mid>::value) return applyVector<Final>(x, partial, arg);
  if (p == 1) return applyVector<First>(x, partial, arg);
  return applyVector<Mid>(x, partial, arg);
}

// acc = the lane's vectors of chunk c reduced over ranks 0..N-1 in order: this rank's own from `vecOf(p,
// vec)` too (the kernels take their own bytes from the input, not through the window). False when a read
// failed (the error is recorded).
template <typename Final, typename Read>
__device__ __forceinline__ bool reduceChunk(int size, const element_ops::OpArg& arg, Read read,
                                            uint4 (&acc)[kLaneVectors]) {
  for (int p = 0; p < size; ++p) {
    uint4 vec[kLaneVectors];
    if (!read(p, vec)) return false;
#pragma unroll
    for (int v = 0; v < kLaneVectors; ++v)
      acc[v] = p == 0 ? vec[v] : reduceStep<Final>(p, size, vec[v], acc[v], arg);
  }
  return true;
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
