// The op the GraphGuard tests capture: y = max(0, 2 x + acc) elementwise, then acc += 1 (state the op
// mutates in place, so a replay that did not restore it first would show).
#include <cuda_runtime.h>

#include "graph_guard_op.h"

namespace ringguard {
namespace {

__global__ void reluAxpyKernel(float* y, float* acc, const float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = fmaxf(0.0f, __fadd_rn(__fmul_rn(2.0f, x[i]), acc[i]));
    acc[i] = __fadd_rn(acc[i], 1.0f);
  }
}

}  // namespace

void launchReluAxpy(float* y, float* acc, const float* x, int n, void* stream) {
  reluAxpyKernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(y, acc, x, n);
}

}  // namespace ringguard
