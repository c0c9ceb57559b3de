// How long the host waits in the replica check's device fingerprint when the stream is busy (issue 43;
// docs/PERFORMANCE.md, "The replica check", forty-second session): crc32ManyDevice copies its work tables
// from pageable memory, and CUDA's API synchronization behavior allows such a copy to "synchronize with the
// stream" to stage it. In a training step the CPU runs ahead of the GPU, so that would be a host wait at
// every check. Here each call is made behind a kernel that keeps the stream busy for --busy-us, and its host
// time is reported beside the same call on an idle stream, beside Crc32ManyPlan (the table kept: no copy at
// all), and beside plain cudaMemcpyAsync calls of the work table's size from pageable and from pinned
// memory. A host time near --busy-us means the call waited.
//
//   bench_upload_wait [--busy-us 2000] [--reps 20]
//
// The spans: the small GPT of bench/torch/bench_ddp.py (d=512, 6 blocks, vocabulary 8192, 256 positions),
// each parameter with AdamW's exp_avg and exp_avg_sq, fp32: 231 device tensors, as a check fingerprints them
// (the 78 `step` tensors are host memory). Rows: `<what> <stream> idle_us=<mean> busy_us=<mean>
// busy_max_us=`.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench_cuda_check.h"
#include "bench_gpu_timing.h"
#include "ringguard/cuda/crc32_many.h"

namespace {

__global__ void busyKernel(long long ns) {
  long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// Mean and max host time of `call` over `reps` calls, each after a busy kernel of `busyNs` (0: none) on `s`.
void timeCall(const char* what, const char* streamName, cudaStream_t s, int reps, long long busyNs,
              const std::function<void()>& call) {
  double idleSum = 0, busySum = 0, busyMax = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int r = 0; r < reps; ++r) {
      if (pass == 1) busyKernel<<<1, 1, 0, s>>>(busyNs);
      const auto t0 = std::chrono::steady_clock::now();
      call();
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      CHECK_CUDA(cudaStreamSynchronize(s));
      if (pass == 0) {
        idleSum += us;
      } else {
        busySum += us;
        busyMax = us > busyMax ? us : busyMax;
      }
    }
  }
  std::printf("%s %s idle_us=%.1f busy_us=%.1f busy_max_us=%.1f\n", what, streamName, idleSum / reps,
              busySum / reps, busyMax);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Host time of the replica check's device fingerprint behind a busy stream"};
  int busyUs = 2000, reps = 20;
  app.add_option("--busy-us", busyUs, "how long the kernel ahead of each call keeps the stream busy")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--reps", reps, "calls timed per row")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);

  std::vector<ringguard::Crc32Span> spans;
  std::vector<void*> buffers;
  for (size_t count : bench_gpu::gptParameterCounts()) {
    for (int copy = 0; copy < 3; ++copy) {  // the parameter, exp_avg, exp_avg_sq
      void* p = nullptr;
      CHECK_CUDA(cudaMalloc(&p, count * sizeof(float)));
      CHECK_CUDA(cudaMemset(p, copy + 1, count * sizeof(float)));
      buffers.push_back(p);
      spans.push_back(ringguard::Crc32Span{p, count * sizeof(float)});
    }
  }
  const size_t scratchBytes = ringguard::crc32ManyDeviceScratchBytes(spans.data(), spans.size());
  void *scratch = nullptr, *out = nullptr, *table = nullptr, *pinned = nullptr;
  CHECK_CUDA(cudaMalloc(&scratch, scratchBytes));
  CHECK_CUDA(cudaMalloc(&out, spans.size() * sizeof(uint32_t)));
  CHECK_CUDA(cudaMalloc(&table, scratchBytes));
  CHECK_CUDA(cudaMallocHost(&pinned, scratchBytes));
  std::vector<unsigned char> pageable(scratchBytes, 1);
  cudaStream_t own = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  std::printf("spans=%zu scratch_bytes=%zu busy_us=%d reps=%d\n", spans.size(), scratchBytes, busyUs, reps);
  const long long busyNs = 1000LL * busyUs;
  for (cudaStream_t s : {own, static_cast<cudaStream_t>(nullptr)}) {
    const char* name = s == own ? "non-blocking" : "legacy-default";
    timeCall("crc32ManyDevice", name, s, reps, busyNs, [&] {
      const ringguard::Status st = ringguard::crc32ManyDevice(
          spans.data(), spans.size(), static_cast<uint32_t*>(out), scratch, scratchBytes, s);
      if (!st.isOk()) {
        std::fprintf(stderr, "crc32ManyDevice: %s\n", st.toString().c_str());
        std::exit(1);
      }
    });
    ringguard::Crc32ManyPlan plan;  // its table built at the first (idle) call, then kept
    timeCall("crc32ManyPlan", name, s, reps, busyNs, [&] {
      const uint32_t* crcs = nullptr;
      const ringguard::Status st = plan.run(spans.data(), spans.size(), s, &crcs);
      if (!st.isOk()) {
        std::fprintf(stderr, "crc32ManyPlan: %s\n", st.toString().c_str());
        std::exit(1);
      }
    });
    timeCall("copy_pageable", name, s, reps, busyNs, [&] {
      CHECK_CUDA(cudaMemcpyAsync(table, pageable.data(), scratchBytes, cudaMemcpyHostToDevice, s));
    });
    timeCall("copy_pinned", name, s, reps, busyNs,
             [&] { CHECK_CUDA(cudaMemcpyAsync(table, pinned, scratchBytes, cudaMemcpyHostToDevice, s)); });
  }
  for (void* p : buffers) CHECK_CUDA(cudaFree(p));
  CHECK_CUDA(cudaFree(scratch));
  CHECK_CUDA(cudaFree(out));
  CHECK_CUDA(cudaFree(table));
  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaStreamDestroy(own));
  return 0;
}
