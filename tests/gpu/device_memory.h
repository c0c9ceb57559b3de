#pragma once
// Device buffers for the mpirun GPU suites (test memory: not ringguard's pool), as collective_checks.h's
// Memory, on one non-blocking stream of their own.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "../mpi/collective_checks.h"

namespace ringguard {
namespace testing {

class DeviceMemory final : public testing::Memory {
 public:
  DeviceMemory() { EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess); }
  ~DeviceMemory() override {
    releaseAll();
    cudaStreamDestroy(stream_);
  }
  void* make(size_t bytes, const std::vector<uint8_t>& init) override {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes + 1), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0xAB, bytes + 1), cudaSuccess);
    if (!init.empty()) {
      EXPECT_EQ(cudaMemcpy(p, init.data(), std::min(bytes, init.size()), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    // cudaMemset (and a pageable cudaMemcpy) may still be in flight on the legacy stream, which the
    // non-blocking streams of the test and the collective do not wait for.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    bufs_.push_back(p);
    return p;
  }
  std::vector<uint8_t> read(const void* p, size_t bytes) override {
    // Work::wait ordered this stream after the collective: reading on it sees the results.
    std::vector<uint8_t> out(bytes);
    EXPECT_EQ(cudaMemcpyAsync(out.data(), p, bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return out;
  }
  void* stream() override { return stream_; }
  void releaseAll() override {
    cudaStreamSynchronize(stream_);
    for (void* p : bufs_) cudaFree(p);
    bufs_.clear();
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<void*> bufs_;
};

}  // namespace testing
}  // namespace ringguard
