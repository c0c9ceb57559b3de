#pragma once
// What the single-process GPU benchmarks share: a CUDA runtime call or a ringguard Status that fails ends the
// program, naming the call and where.
#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(expr)                                                                          \
  do {                                                                                            \
    const cudaError_t _e = (expr);                                                                \
    if (_e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

#define CHECK_OK(expr)                                                                           \
  do {                                                                                           \
    const ::ringguard::Status _s = (expr);                                                       \
    if (!_s.isOk()) {                                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, _s.toString().c_str()); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
