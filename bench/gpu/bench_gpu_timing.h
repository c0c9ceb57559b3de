#pragma once
// What the single-process GPU benchmarks time and over what: the median of CUDA-event-timed runs of an
// operation on a stream, and the small GPT's parameter shapes (bench/torch/bench_ddp.py's Gpt with its
// defaults), the tensors the replica check fingerprints.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>

#include "bench_cuda_check.h"

namespace bench_gpu {

// Median milliseconds of `iters` runs of `op` on `stream`, after `warmup` untimed runs.
inline double medianMs(cudaStream_t stream, int warmup, int iters, const std::function<void()>& op) {
  for (int i = 0; i < warmup; ++i) op();
  std::vector<cudaEvent_t> events(2 * iters);
  for (auto& e : events) CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(events[2 * i], stream));
    op();
    CHECK_CUDA(cudaEventRecord(events[2 * i + 1], stream));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) {
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : events) CHECK_CUDA(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return iters % 2 == 1 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
}

// Element counts of the small GPT's parameters (d=512, 6 blocks, vocabulary 8192, 256 positions).
inline std::vector<size_t> gptParameterCounts() {
  const size_t d = 512, ff = 4 * d, vocab = 8192, seq = 256;
  std::vector<size_t> n{vocab * d, seq * d};
  for (int b = 0; b < 6; ++b) {
    for (size_t c : {3 * d * d, 3 * d, d * d, d, ff * d, ff, d * ff, d, d, d, d, d}) n.push_back(c);
  }
  for (size_t c : {d, d, vocab * d}) n.push_back(c);
  return n;
}

}  // namespace bench_gpu
