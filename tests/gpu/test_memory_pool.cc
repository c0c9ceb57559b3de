// DevicePool and PinnedHostPool: stats move as expected, trim releases, the release threshold is honoured,
// foreign pointers are rejected, and both are safe to use from several threads.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cuda/memory_pool.h"
#include "cuda/pool_registry.h"
#include "gpu_test_util.h"

namespace ringguard {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// Tests skip (from SetUp) when no CUDA device is usable.
class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_CUDA(cudaSetDevice(0));
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      EXPECT_EQ(cudaSuccess, cudaStreamDestroy(stream_));
    }
  }

  DevicePoolStats statsOf(const DevicePool& pool) {
    DevicePoolStats s;
    const Status st = pool.stats(&s);
    EXPECT_TRUE(st.isOk()) << st.toString();
    return s;
  }

  cudaStream_t stream_ = nullptr;
};

TEST(NoGpuPinnedHostPoolClasses, SizeClassesRoundUpByAtMostAQuarter) {
  EXPECT_EQ(4096u, PinnedHostPool::sizeClass(1));
  EXPECT_EQ(4096u, PinnedHostPool::sizeClass(4096));
  EXPECT_EQ(5120u, PinnedHostPool::sizeClass(4097));
  EXPECT_EQ(8192u, PinnedHostPool::sizeClass(8192));
  EXPECT_EQ(10240u, PinnedHostPool::sizeClass(8193));
  for (size_t bytes = 4097; bytes < (size_t(1) << 34); bytes = bytes * 5 / 3 + 7) {
    const size_t c = PinnedHostPool::sizeClass(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c - bytes, bytes / 4) << bytes;
    EXPECT_EQ(c, PinnedHostPool::sizeClass(c)) << "a class is its own class: " << bytes;
  }
}

TEST_F(PoolTest, DevicePoolIsNotTheDefaultPool) {
  std::unique_ptr<DevicePool> pool;
  ASSERT_STATUS_OK(DevicePool::create(0, &pool));
  cudaMemPool_t defaultPool = nullptr;
  ASSERT_CUDA(cudaDeviceGetDefaultMemPool(&defaultPool, 0));
  EXPECT_NE(defaultPool, pool->handle());
  EXPECT_EQ(0, pool->device());
  EXPECT_EQ(DevicePool::kDefaultReleaseThreshold, pool->releaseThreshold());
}

TEST_F(PoolTest, DevicePoolRejectsBadArguments) {
  std::unique_ptr<DevicePool> pool;
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  EXPECT_EQ(StatusCode::kInvalidArgument, DevicePool::create(count, &pool).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, DevicePool::create(-1, &pool).code());
  ASSERT_STATUS_OK(DevicePool::create(0, &pool));
  int local = 0;
  EXPECT_EQ(StatusCode::kInvalidArgument, pool->free(&local, stream_).code());
  EXPECT_TRUE(pool->free(nullptr, stream_).isOk());
  void* p = reinterpret_cast<void*>(1);
  ASSERT_STATUS_OK(pool->allocate(0, stream_, &p));
  EXPECT_EQ(nullptr, p);
}

TEST_F(PoolTest, DevicePoolStatsFollowAllocations) {
  std::unique_ptr<DevicePool> pool;
  ASSERT_STATUS_OK(DevicePool::create(0, 1024 * kMiB, &pool));
  DevicePoolStats s = statsOf(*pool);
  EXPECT_EQ(0u, s.usedBytes);
  EXPECT_EQ(0u, s.allocationCount);
  EXPECT_EQ(0u, s.totalAllocations);

  void* a = nullptr;
  void* b = nullptr;
  ASSERT_STATUS_OK(pool->allocate(8 * kMiB, stream_, &a));
  ASSERT_STATUS_OK(pool->allocate(3 * kMiB + 5, stream_, &b));
  ASSERT_NE(nullptr, a);
  ASSERT_NE(nullptr, b);
  // The memory is usable.
  ASSERT_CUDA(cudaMemsetAsync(a, 0x3c, 8 * kMiB, stream_));
  ASSERT_CUDA(cudaMemcpyAsync(b, a, 3 * kMiB, cudaMemcpyDeviceToDevice, stream_));
  unsigned char probe = 0;
  ASSERT_CUDA(
      cudaMemcpyAsync(&probe, static_cast<char*>(b) + 3 * kMiB - 1, 1, cudaMemcpyDeviceToHost, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_EQ(0x3c, probe);

  s = statsOf(*pool);
  EXPECT_GE(s.usedBytes, 11 * kMiB + 5);
  EXPECT_GE(s.reservedBytes, s.usedBytes);
  EXPECT_GE(s.highWaterBytes, s.usedBytes);
  EXPECT_EQ(2u, s.allocationCount);
  EXPECT_EQ(2u, s.totalAllocations);

  ASSERT_STATUS_OK(pool->free(a, stream_));
  ASSERT_STATUS_OK(pool->free(b, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  s = statsOf(*pool);
  EXPECT_EQ(0u, s.usedBytes);
  EXPECT_EQ(0u, s.allocationCount);
  EXPECT_EQ(2u, s.totalAllocations);
  EXPECT_GE(s.highWaterBytes, 11 * kMiB);
  // Below the 1 GiB threshold the freed memory stays cached.
  EXPECT_GE(s.reservedBytes, 11 * kMiB);

  ASSERT_STATUS_OK(pool->resetHighWater());
  EXPECT_EQ(0u, statsOf(*pool).highWaterBytes);
  // A double free is a foreign pointer by then.
  EXPECT_EQ(StatusCode::kInvalidArgument, pool->free(a, stream_).code());
}

// An allocation the driver refuses (more than the device has) is an error and counted, and the pool and
// the stream stay usable: the downgrade rules read the count (telemetry's device.allocation_failures).
TEST_F(PoolTest, DevicePoolCountsRefusedAllocations) {
  std::unique_ptr<DevicePool> pool;
  ASSERT_STATUS_OK(DevicePool::create(0, &pool));
  void* p = reinterpret_cast<void*>(uintptr_t(1));
  const Status refused = pool->allocate(size_t(1) << 50, stream_, &p);  // 1 PiB
  EXPECT_FALSE(refused.isOk());
  EXPECT_EQ(nullptr, p);
  DevicePoolStats s = statsOf(*pool);
  EXPECT_EQ(1u, s.allocationFailures);
  EXPECT_EQ(0u, s.totalAllocations);
  EXPECT_EQ(0u, s.allocationCount);
  void* q = nullptr;
  ASSERT_STATUS_OK(pool->allocate(kMiB, stream_, &q));
  ASSERT_CUDA(cudaMemsetAsync(q, 0, kMiB, stream_));
  ASSERT_STATUS_OK(pool->free(q, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  s = statsOf(*pool);
  EXPECT_EQ(1u, s.allocationFailures);
  EXPECT_EQ(1u, s.totalAllocations);
}

TEST_F(PoolTest, DevicePoolTrimReleasesCachedMemory) {
  std::unique_ptr<DevicePool> pool;
  ASSERT_STATUS_OK(DevicePool::create(0, 1024 * kMiB, &pool));
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_STATUS_OK(pool->allocate(64 * kMiB, stream_, &a));
  ASSERT_STATUS_OK(pool->allocate(64 * kMiB, stream_, &b));
  ASSERT_STATUS_OK(pool->free(a, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_GE(statsOf(*pool).reservedBytes, 128 * kMiB);

  // Trimming never touches memory in use (whether it can release the free half depends on how the driver
  // chunked the reservation, so only the lower bound is checked).
  ASSERT_STATUS_OK(pool->trim(0));
  EXPECT_GE(statsOf(*pool).reservedBytes, 64 * kMiB);

  ASSERT_STATUS_OK(pool->free(b, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_GE(statsOf(*pool).reservedBytes, 64 * kMiB);
  ASSERT_STATUS_OK(pool->trim(0));
  EXPECT_EQ(0u, statsOf(*pool).reservedBytes);
}

// The process's pools, as ringguard.memory_stats() / empty_cache() see them: every live pool is counted
// (and only those), per device, and one trim releases what they cache while memory in use stays.
TEST_F(PoolTest, ProcessRegistryCountsAndTrimsEveryPool) {
  ProcessPoolStats before;
  ASSERT_STATUS_OK(processPoolStats(0, &before));
  std::unique_ptr<DevicePool> pool;
  ASSERT_STATUS_OK(DevicePool::create(0, 1024 * kMiB, &pool));
  auto pinned = std::make_unique<PinnedHostPool>();
  void* kept = nullptr;
  void* cached = nullptr;
  void* host = nullptr;
  ASSERT_STATUS_OK(pool->allocate(64 * kMiB, stream_, &kept));
  ASSERT_STATUS_OK(pool->allocate(64 * kMiB, stream_, &cached));
  ASSERT_STATUS_OK(pool->free(cached, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  ASSERT_STATUS_OK(pinned->allocate(8 * kMiB, &host));
  ASSERT_STATUS_OK(pinned->free(host));  // cached by its pool

  ProcessPoolStats s;
  ASSERT_STATUS_OK(processPoolStats(0, &s));
  EXPECT_EQ(before.devicePools + 1, s.devicePools);
  EXPECT_EQ(before.pinnedPools + 1, s.pinnedPools);
  EXPECT_EQ(before.device.usedBytes + 64 * kMiB, s.device.usedBytes);
  EXPECT_GE(s.device.reservedBytes, before.device.reservedBytes + 128 * kMiB);
  EXPECT_EQ(before.pinned.cachedBytes + 8 * kMiB, s.pinned.cachedBytes);
  ProcessPoolStats other;
  int devices = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&devices));
  ASSERT_STATUS_OK(processPoolStats(devices, &other));  // no pool on a device that does not exist
  EXPECT_EQ(0, other.devicePools);
  EXPECT_EQ(s.pinnedPools, other.pinnedPools);  // pinned pools belong to no device

  ASSERT_STATUS_OK(trimProcessPools(0));
  EXPECT_EQ(0u, pinned->stats().cachedBytes);
  EXPECT_GE(statsOf(*pool).reservedBytes, 64 * kMiB);  // in use: kept
  ASSERT_STATUS_OK(pool->free(kept, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  ASSERT_STATUS_OK(trimProcessPools(-1));
  EXPECT_EQ(0u, statsOf(*pool).reservedBytes);

  pool.reset();
  pinned.reset();
  ProcessPoolStats after;
  ASSERT_STATUS_OK(processPoolStats(0, &after));
  EXPECT_EQ(before.devicePools, after.devicePools);  // destroyed pools leave
  EXPECT_EQ(before.pinnedPools, after.pinnedPools);
}

TEST_F(PoolTest, DevicePoolHonoursTheReleaseThreshold) {
  std::unique_ptr<DevicePool> pool;
  ASSERT_STATUS_OK(DevicePool::create(0, 0, &pool));
  void* a = nullptr;
  ASSERT_STATUS_OK(pool->allocate(32 * kMiB, stream_, &a));
  ASSERT_STATUS_OK(pool->free(a, stream_));
  // Threshold 0: a synchronisation gives everything back.
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_EQ(0u, statsOf(*pool).reservedBytes);

  ASSERT_STATUS_OK(pool->setReleaseThreshold(64 * kMiB));
  EXPECT_EQ(64 * kMiB, pool->releaseThreshold());
  ASSERT_STATUS_OK(pool->allocate(32 * kMiB, stream_, &a));
  ASSERT_STATUS_OK(pool->free(a, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  const uint64_t kept = statsOf(*pool).reservedBytes;
  EXPECT_GE(kept, 32 * kMiB);
  EXPECT_LE(kept,
            64 * kMiB + 32 * kMiB);  // nothing grossly above the threshold (allocation granularity aside)
}

TEST_F(PoolTest, DevicePoolIsThreadSafe) {
  std::unique_ptr<DevicePool> pool;
  ASSERT_STATUS_OK(DevicePool::create(0, &pool));
  constexpr int kThreads = 4;
  constexpr int kIterations = 200;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t s = nullptr;
      if (cudaSetDevice(0) != cudaSuccess ||
          cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        ++failures[t];
        return;
      }
      for (int i = 0; i < kIterations; ++i) {
        void* p = nullptr;
        if (!pool->allocate(4096 * static_cast<size_t>(1 + (i + t) % 7), s, &p).isOk() || p == nullptr)
          ++failures[t];
        if (!pool->free(p, s).isOk()) ++failures[t];
      }
      if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess) ++failures[t];
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(0, failures[t]) << "thread " << t;
  const DevicePoolStats s = statsOf(*pool);
  EXPECT_EQ(0u, s.allocationCount);
  EXPECT_EQ(static_cast<uint64_t>(kThreads * kIterations), s.totalAllocations);
  EXPECT_EQ(0u, s.usedBytes);
}

TEST_F(PoolTest, PinnedHostPoolCachesBySizeClass) {
  PinnedHostPool pool;
  void* a = nullptr;
  ASSERT_STATUS_OK(pool.allocate(5000, &a));
  ASSERT_NE(nullptr, a);
  cudaPointerAttributes attrs{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attrs, a));
  EXPECT_EQ(cudaMemoryTypeHost, attrs.type) << "pinned (page-locked) host memory";
  std::memset(a, 0x11, 5000);

  PinnedHostPoolStats s = pool.stats();
  EXPECT_EQ(5120u, s.usedBytes);
  EXPECT_EQ(5120u, s.reservedBytes);
  EXPECT_EQ(0u, s.cachedBytes);
  EXPECT_EQ(1u, s.allocationCount);

  ASSERT_STATUS_OK(pool.free(a));
  s = pool.stats();
  EXPECT_EQ(0u, s.usedBytes);
  EXPECT_EQ(5120u, s.cachedBytes);
  EXPECT_EQ(5120u, s.reservedBytes);

  // Same class: the cached block comes back.
  void* b = nullptr;
  ASSERT_STATUS_OK(pool.allocate(5100, &b));
  EXPECT_EQ(a, b);
  // A different class is a new block.
  void* c = nullptr;
  ASSERT_STATUS_OK(pool.allocate(64 * 1024, &c));
  EXPECT_NE(b, c);
  s = pool.stats();
  EXPECT_EQ(2u, s.allocationCount);
  EXPECT_EQ(3u, s.totalAllocations);
  EXPECT_EQ(5120u + 65536u, s.highWaterBytes);

  // Usable as a DMA source and destination.
  void* dev = nullptr;
  ASSERT_CUDA(cudaMallocAsync(&dev, 65536, stream_));  // test-only scratch; the library never does this
  std::memset(c, 0x5a, 65536);
  ASSERT_CUDA(cudaMemcpyAsync(dev, c, 65536, cudaMemcpyHostToDevice, stream_));
  ASSERT_CUDA(cudaMemcpyAsync(b, dev, 5100, cudaMemcpyDeviceToHost, stream_));
  ASSERT_CUDA(cudaFreeAsync(dev, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_EQ(0x5a, static_cast<unsigned char*>(b)[5099]);

  ASSERT_STATUS_OK(pool.free(b));
  ASSERT_STATUS_OK(pool.free(c));
  int local = 0;
  EXPECT_EQ(StatusCode::kInvalidArgument, pool.free(&local).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, pool.free(b).code()) << "double free";
  EXPECT_EQ(5120u + 65536u, pool.stats().cachedBytes);

  ASSERT_STATUS_OK(pool.trim());
  s = pool.stats();
  EXPECT_EQ(0u, s.cachedBytes);
  EXPECT_EQ(0u, s.reservedBytes);
  EXPECT_EQ(0u, s.allocationCount);
}

TEST_F(PoolTest, PinnedHostPoolReleasesBeyondTheCacheLimit) {
  PinnedHostPool pool(/*maxCachedBytes=*/8192);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_STATUS_OK(pool.allocate(8192, &a));
  ASSERT_STATUS_OK(pool.allocate(8192, &b));
  ASSERT_STATUS_OK(pool.free(a));
  ASSERT_STATUS_OK(pool.free(b));  // would exceed 8 KiB of cache: freed at once
  const PinnedHostPoolStats s = pool.stats();
  EXPECT_EQ(8192u, s.cachedBytes);
  EXPECT_EQ(8192u, s.reservedBytes);
}

// A block a failed MPI send may still read: forgotten by the pool, still mapped, never handed out again.
TEST_F(PoolTest, PinnedHostPoolAbandonedBlockStaysMappedAndIsNotReused) {
  void* a = nullptr;
  {
    PinnedHostPool pool;
    ASSERT_STATUS_OK(pool.allocate(8192, &a));
    ASSERT_STATUS_OK(pool.abandon(a));
    EXPECT_EQ(0u, pool.stats().usedBytes);
    EXPECT_EQ(0u, pool.stats().allocationCount);
    EXPECT_EQ(StatusCode::kInvalidArgument, pool.free(a).code())
        << "an abandoned block is no longer the pool's";
    EXPECT_EQ(StatusCode::kInvalidArgument, pool.abandon(a).code());
    void* b = nullptr;
    ASSERT_STATUS_OK(pool.allocate(8192, &b));
    EXPECT_NE(a, b) << "an abandoned block was handed out again";
    ASSERT_STATUS_OK(pool.free(b));
  }
  static_cast<volatile unsigned char*>(a)[8191] = 7;  // the pool is gone; the block is still writable
  EXPECT_EQ(cudaSuccess, cudaFreeHost(a));
}

TEST_F(PoolTest, PinnedHostPoolIsThreadSafe) {
  PinnedHostPool pool;
  constexpr int kThreads = 4;
  constexpr int kIterations = 100;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        void* p = nullptr;
        const size_t bytes = 1000 + 3000 * static_cast<size_t>((i * 7 + t) % 5);
        if (!pool.allocate(bytes, &p).isOk() || p == nullptr) {
          ++failures[t];
          continue;
        }
        std::memset(p, t, bytes);
        if (!pool.free(p).isOk()) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(0, failures[t]) << "thread " << t;
  const PinnedHostPoolStats s = pool.stats();
  EXPECT_EQ(0u, s.allocationCount);
  EXPECT_EQ(static_cast<uint64_t>(kThreads * kIterations), s.totalAllocations);
  ASSERT_STATUS_OK(pool.trim());
  EXPECT_EQ(0u, pool.stats().reservedBytes);
}

}  // namespace
}  // namespace ringguard
