#pragma once
// Assertions shared by the GPU tests.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "ringguard/core/status.h"

// In a fixture's SetUp: skips the calling test when no CUDA device is usable, with the runtime's reason.
#define SKIP_WITHOUT_GPU()                                                                    \
  do {                                                                                        \
    int _count = 0;                                                                           \
    const cudaError_t _err = cudaGetDeviceCount(&_count);                                     \
    if (_err != cudaSuccess || _count == 0) {                                                 \
      GTEST_SKIP() << "no CUDA device: "                                                      \
                   << (_err != cudaSuccess ? cudaGetErrorString(_err) : "0 devices visible"); \
    }                                                                                         \
  } while (0)

#define ASSERT_CUDA(expr)                                                  \
  do {                                                                     \
    const cudaError_t _e = (expr);                                         \
    ASSERT_EQ(cudaSuccess, _e) << #expr << ": " << cudaGetErrorString(_e); \
  } while (0)
#define ASSERT_STATUS_OK(expr)                                \
  do {                                                        \
    const ::ringguard::Status _s = (expr);                    \
    ASSERT_TRUE(_s.isOk()) << #expr << ": " << _s.toString(); \
  } while (0)
