#pragma once
// Private to the CUDA layer: the vector loads and stores of the verify + apply data path (CUB's
// thread_load / thread_store). A vector of V bytes (16, 8 or 4) is held as 32-bit words, so that narrow
// elements do not each take a register: element k of width sizeof(E) is extracted and inserted with shifts.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/element_ops.h"

namespace ringguard {
namespace cuda_detail {

// Element <-> raw bits (the unsigned integer of the same width).
template <typename E>
__host__ __device__ inline E fromBits(uint64_t bits) {
  if constexpr (std::is_same_v<E, float>) {
    return element_ops::floatOfBits(uint32_t(bits));
  } else if constexpr (std::is_same_v<E, double>) {
    return element_ops::doubleOfBits(bits);
  } else {
    return static_cast<E>(bits);  // integers (and the 16-bit patterns of f16 / bf16): two's complement
  }
}

template <typename E>
__host__ __device__ inline uint64_t toBits(E v) {
  if constexpr (std::is_same_v<E, float>) {
    return element_ops::bitsOfFloat(v);
  } else if constexpr (std::is_same_v<E, double>) {
    return element_ops::bitsOfDouble(v);
  } else {
    using U = std::make_unsigned_t<E>;
    return static_cast<U>(v);
  }
}

template <int V>
struct Words {
  uint32_t w[V / 4];
};

// Vector j of `base` (aligned to V bytes).
template <int V>
__host__ __device__ inline Words<V> loadWords(const void* base, uint64_t j) {
  Words<V> r;
  if constexpr (V == 16) {
    const uint4 v = static_cast<const uint4*>(base)[j];
    r.w[0] = v.x;
    r.w[1] = v.y;
    r.w[2] = v.z;
    r.w[3] = v.w;
  } else if constexpr (V == 8) {
    const uint2 v = static_cast<const uint2*>(base)[j];
    r.w[0] = v.x;
    r.w[1] = v.y;
  } else {
    r.w[0] = static_cast<const uint32_t*>(base)[j];
  }
  return r;
}

template <int V>
__host__ __device__ inline void storeWords(void* base, uint64_t j, const Words<V>& r) {
  if constexpr (V == 16) {
    static_cast<uint4*>(base)[j] = make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]);
  } else if constexpr (V == 8) {
    static_cast<uint2*>(base)[j] = make_uint2(r.w[0], r.w[1]);
  } else {
    static_cast<uint32_t*>(base)[j] = r.w[0];
  }
}

template <typename E, int V>
__host__ __device__ inline E getElement(const Words<V>& v, int k) {
  if constexpr (sizeof(E) == 8) {
    return fromBits<E>((uint64_t(v.w[2 * k + 1]) << 32) | v.w[2 * k]);
  } else if constexpr (sizeof(E) == 4) {
    return fromBits<E>(v.w[k]);
  } else {
    constexpr int kPerWord = 4 / int(sizeof(E));
    constexpr int kBits = 8 * int(sizeof(E));
    constexpr uint32_t kMask = (1u << kBits) - 1;
    return fromBits<E>((v.w[k / kPerWord] >> ((k % kPerWord) * kBits)) & kMask);
  }
}

template <typename E, int V>
__host__ __device__ inline void setElement(Words<V>& v, int k, E e) {
  const uint64_t bits = toBits(e);
  if constexpr (sizeof(E) == 8) {
    v.w[2 * k] = uint32_t(bits);
    v.w[2 * k + 1] = uint32_t(bits >> 32);
  } else if constexpr (sizeof(E) == 4) {
    v.w[k] = uint32_t(bits);
  } else {
    constexpr int kPerWord = 4 / int(sizeof(E));
    constexpr int kBits = 8 * int(sizeof(E));
    constexpr uint32_t kMask = (1u << kBits) - 1;
    const int shift = (k % kPerWord) * kBits;
    v.w[k / kPerWord] = (v.w[k / kPerWord] & ~(kMask << shift)) | ((uint32_t(bits) & kMask) << shift);
  }
}

}  // namespace cuda_detail
}  // namespace ringguard
