#pragma once
// Private to the CUDA layer: one thread's share of the verify + apply data path (CUB's agent level), over
// the plan of cuda/apply_plan.h. A pure stream: V-byte vectors where dst, local and slot share their
// alignment modulo V, else single elements; the elements before dst's first vector boundary (head) and after
// the last whole vector (tail), fewer than one vector each, are done by the first threads of the grid.
// kUnroll vectors per operand are in flight per thread. Op is an apply operation of core/element_ops.h.
#include <cstdint>

#include "core/element_ops.h"
#include "cuda/apply_plan.h"
#include "cuda/vector_words.cuh"

namespace ringguard {
namespace cuda_detail {

constexpr int kUnroll = 4;  // vectors per operand in flight per thread

// `#pragma unroll` for the device pass only: the host compiler also sees the __host__ __device__ bodies.
#if defined(__CUDA_ARCH__)
#define RINGGUARD_UNROLL _Pragma("unroll")
#else
#define RINGGUARD_UNROLL
#endif

// One element: dst[i] = local[i] op slot[i] (or slot[i]).
template <typename Op>
__host__ __device__ inline void applyElement(const ApplyParams& p, uint64_t i) {
  using E = typename Op::Elem;
  E x{};
  if constexpr (Op::kReadsLocal) x = static_cast<const E*>(p.local)[i];
  static_cast<E*>(p.dst)[i] = Op::element(x, static_cast<const E*>(p.slot)[i], p.arg);
}

// Single elements, grid-stride, kUnroll in flight (vecBytes == element size).
template <typename Op>
__host__ __device__ inline void applyScalars(const ApplyParams& p, uint64_t tid, uint64_t nthreads) {
  using E = typename Op::Elem;
  const E* local = static_cast<const E*>(p.local);
  const E* slot = static_cast<const E*>(p.slot);
  E* dst = static_cast<E*>(p.dst);
  for (uint64_t i = tid; i < p.count; i += nthreads * kUnroll) {
    E x[kUnroll] = {};
    E y[kUnroll] = {};
    RINGGUARD_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t j = i + u * nthreads;
      if (j < p.count) {
        y[u] = slot[j];
        if constexpr (Op::kReadsLocal) x[u] = local[j];
      }
    }
    RINGGUARD_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t j = i + u * nthreads;
      if (j < p.count) dst[j] = Op::element(x[u], y[u], p.arg);
    }
  }
}

// One vector of the result: element-wise local op slot (the slot itself for a copy).
template <typename Op, int V>
__host__ __device__ inline Words<V> combineWords(const Words<V>& x, Words<V> y,
                                                 const element_ops::OpArg& arg) {
  using E = typename Op::Elem;
  if constexpr (Op::kWordwise) {
    RINGGUARD_UNROLL
    for (int k = 0; k < V / 4; ++k) y.w[k] = Op::word(x.w[k], y.w[k]);
  } else if constexpr (Op::kReadsLocal) {
    RINGGUARD_UNROLL
    for (int k = 0; k < V / int(sizeof(E)); ++k) {
      setElement<E, V>(y, k, Op::element(getElement<E, V>(x, k), getElement<E, V>(y, k), arg));
    }
  }
  return y;
}

// Elements [0, head) and the tail after the last whole vector, by global threads tid < head + tail.
template <typename Op>
__host__ __device__ inline void applyHeadTail(const ApplyParams& p, uint64_t tid) {
  const uint64_t tailBegin = p.head + p.vectors * (uint64_t(p.vecBytes) / sizeof(typename Op::Elem));
  if (tid < p.head) {
    applyElement<Op>(p, tid);
  } else if (tid - p.head < p.count - tailBegin) {
    applyElement<Op>(p, tailBegin + (tid - p.head));
  }
}

// V-byte vectors (V > element size), grid-stride, kUnroll per operand in flight; head and tail by the
// first threads of the grid.
template <typename Op, int V>
__host__ __device__ inline void applyVectors(const ApplyParams& p, uint64_t tid, uint64_t nthreads) {
  using E = typename Op::Elem;
  applyHeadTail<Op>(p, tid);

  void* d = static_cast<E*>(p.dst) + p.head;
  const void* l = Op::kReadsLocal ? static_cast<const E*>(p.local) + p.head : nullptr;
  const void* s = static_cast<const E*>(p.slot) + p.head;
  for (uint64_t i = tid; i < p.vectors; i += nthreads * kUnroll) {
    Words<V> x[kUnroll] = {};
    Words<V> y[kUnroll] = {};
    RINGGUARD_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t j = i + u * nthreads;
      if (j < p.vectors) {
        y[u] = loadWords<V>(s, j);
        if constexpr (Op::kReadsLocal) x[u] = loadWords<V>(l, j);
      }
    }
    RINGGUARD_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t j = i + u * nthreads;
      if (j < p.vectors) storeWords<V>(d, j, combineWords<Op, V>(x[u], y[u], p.arg));
    }
  }
}

// The share of global thread `tid` of `nthreads`: dispatches on the (grid-uniform) vector width.
template <typename Op>
__host__ __device__ inline void applyShare(const ApplyParams& p, uint64_t tid, uint64_t nthreads) {
  constexpr int E = int(sizeof(typename Op::Elem));
  if constexpr (E < 16) {
    if (p.vecBytes == 16) return applyVectors<Op, 16>(p, tid, nthreads);
  }
  if constexpr (E < 8) {
    if (p.vecBytes == 8) return applyVectors<Op, 8>(p, tid, nthreads);
  }
  if constexpr (E < 4) {
    if (p.vecBytes == 4) return applyVectors<Op, 4>(p, tid, nthreads);
  }
  applyScalars<Op>(p, tid, nthreads);
}

#undef RINGGUARD_UNROLL

}  // namespace cuda_detail
}  // namespace ringguard
