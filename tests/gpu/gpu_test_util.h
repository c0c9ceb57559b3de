#pragma once
// Assertions shared by the GPU tests.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "ringguard/core/status.h"

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
