// CRC-32 and NaN-scan kernels against host references (ringguard::crc32, boost::crc_32_type, an element-wise
// classification on the host), over sizes from 0 bytes to 256 MiB at every 16-byte misalignment.
//
// Without a CUDA device every test that needs one is skipped with the reason; the argument checks, which
// fail before any CUDA call, run everywhere. RINGGUARD_TEST_MAX_BYTES caps the largest buffer (sanitizer
// runs use 16 MiB).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <boost/crc.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/crc32_combine.h"
#include "cuda/kernels.h"
#include "cuda/memory_pool.h"
#include "gpu_test_util.h"
#include "ringguard/core/crc32.h"
#include "ringguard/core/non_finite.h"
#include "verifiable.h"  // randomBytes

namespace ringguard {
namespace {

using testing::randomBytes;
using testing::splitmix64;

constexpr size_t kDefaultMaxBytes = size_t(256) << 20;

size_t testMaxBytes() {
  const char* env = std::getenv("RINGGUARD_TEST_MAX_BYTES");
  if (env == nullptr || *env == '\0') return kDefaultMaxBytes;
  return static_cast<size_t>(std::strtoull(env, nullptr, 10));
}

// The size set of the issue, the largest capped by RINGGUARD_TEST_MAX_BYTES. `unit` converts bytes into the
// unit of the caller (1 for CRC bytes, the element size for the scan).
std::vector<size_t> testSizes(size_t unit) {
  const size_t maxCount = testMaxBytes() / unit;
  std::vector<size_t> sizes = {0, 1, 3, 4, 15, 16, 17, 255, 4095, 4096 + 7, (size_t(1) << 20) + 13, maxCount};
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](size_t s) { return s > maxCount; }),
              sizes.end());
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

// Tests skip (from SetUp) when no CUDA device is usable.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_CUDA(cudaSetDevice(0));
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ASSERT_STATUS_OK(DevicePool::create(0, &pool_));
  }

  void TearDown() override {
    if (stream_ != nullptr) {
      for (void* p : allocations_) EXPECT_TRUE(pool_->free(p, stream_).isOk());
      EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(stream_));
      EXPECT_EQ(cudaSuccess, cudaStreamDestroy(stream_));
    }
    pool_.reset();
  }

  // Device memory from the pool, freed in TearDown. Returns nullptr for 0 bytes.
  void* deviceAlloc(size_t bytes) {
    void* p = nullptr;
    const Status s = pool_->allocate(bytes, stream_, &p);
    EXPECT_TRUE(s.isOk()) << s.toString();
    if (p != nullptr) allocations_.push_back(p);
    return p;
  }

  // Spans of `sizes` (cycled `count` times) laid out from byte `first`, `gap` bytes apart, in a device buffer
  // of `total` random bytes (`seed`), uploaded on stream_; `host` keeps the bytes for the reference CRCs.
  struct SpanSet {
    std::vector<uint8_t> host;
    uint8_t* dev = nullptr;
    std::vector<Crc32Span> spans;
    std::vector<size_t> offsets;
  };
  SpanSet makeSpans(const std::vector<size_t>& sizes, size_t count, size_t total, uint32_t seed, size_t first,
                    size_t gap) {
    SpanSet set;
    set.host = randomBytes(total, seed);
    set.dev = static_cast<uint8_t*>(deviceAlloc(total));
    EXPECT_EQ(cudaSuccess, cudaMemcpyAsync(set.dev, set.host.data(), total, cudaMemcpyHostToDevice, stream_));
    for (size_t i = 0, at = first; i < count; ++i) {
      const size_t bytes = sizes[i % sizes.size()];
      EXPECT_LE(at + bytes, total) << "span " << i << " past the buffer";
      set.offsets.push_back(at);
      set.spans.push_back({set.dev + at, bytes});
      at += bytes + gap;
    }
    return set;
  }

  // `count` words of device memory at `words`, read back once `stream` has passed what is queued on it.
  std::vector<uint32_t> readBack(const uint32_t* words, size_t count, cudaStream_t stream) {
    std::vector<uint32_t> got(count);
    EXPECT_EQ(cudaSuccess, cudaMemcpyAsync(got.data(), words, count * 4, cudaMemcpyDeviceToHost, stream));
    EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
    return got;
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DevicePool> pool_;
  std::vector<void*> allocations_;
};

// ---- CRC-32 ----------------------------------------------------------------------------------------------

uint32_t boostCrc(const uint8_t* data, size_t n) {
  boost::crc_32_type crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

TEST(NoGpuCrc32DeviceArgs, RejectsBadArguments) {
  uint32_t out = 0;
  const uint8_t data[64] = {};
  EXPECT_EQ(StatusCode::kInvalidArgument, crc32Device(data, 64, nullptr, nullptr, 0, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, crc32Device(nullptr, 64, &out, nullptr, 0, nullptr).code());
  // 1 MiB needs scratch for its per-block CRCs.
  ASSERT_GT(crc32DeviceScratchBytes(1 << 20), 0u);
  EXPECT_EQ(StatusCode::kInvalidArgument, crc32Device(data, 1 << 20, &out, nullptr, 0, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            crc32Device(data, 1 << 20, &out, &out, crc32DeviceScratchBytes(1 << 20) - 4, nullptr).code());
}

TEST(NoGpuCrc32DeviceArgs, ScratchIsSmallAndMonotonic) {
  EXPECT_EQ(0u, crc32DeviceScratchBytes(0));
  EXPECT_EQ(0u, crc32DeviceScratchBytes(15));
  size_t prev = 0;
  for (size_t bytes = 1; bytes <= (size_t(1) << 40); bytes = bytes * 3 + 1) {
    const size_t s = crc32DeviceScratchBytes(bytes);
    EXPECT_GE(s, prev) << bytes;
    EXPECT_LE(s, 4096u) << bytes;
    EXPECT_EQ(0u, s % 4) << bytes;
    prev = s;
  }
}

class Crc32DeviceTest : public GpuTest {};

TEST_F(Crc32DeviceTest, TableMatchesBoost) {
  uint32_t table[256];
  ASSERT_STATUS_OK(crc32DeviceTableForTesting(table));
  for (uint32_t i = 0; i < 256; ++i) {
    // Boost's table entry i is the CRC register after byte i from 0, without conditioning.
    boost::crc_optimal<32, 0x04C11DB7, 0, 0, true, true> raw;
    const uint8_t byte = static_cast<uint8_t>(i);
    raw.process_byte(byte);
    EXPECT_EQ(raw.checksum(), table[i]) << "entry " << i;
    EXPECT_EQ(crc32TableEntry(i), table[i]) << "entry " << i;
  }
}

TEST_F(Crc32DeviceTest, CheckValue) {
  const char* text = "123456789";
  auto* dev = static_cast<char*>(deviceAlloc(16));
  auto* out = static_cast<uint32_t*>(deviceAlloc(sizeof(uint32_t)));
  ASSERT_CUDA(cudaMemcpyAsync(dev, text, 9, cudaMemcpyHostToDevice, stream_));
  ASSERT_STATUS_OK(crc32Device(dev, 9, out, nullptr, 0, stream_));
  uint32_t crc = 0;
  ASSERT_CUDA(cudaMemcpyAsync(&crc, out, sizeof(crc), cudaMemcpyDeviceToHost, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_EQ(0xCBF43926u, crc);
}

TEST_F(Crc32DeviceTest, MatchesHostAtEverySizeAndOffset) {
  const std::vector<size_t> sizes = testSizes(1);
  const size_t largest = sizes.back();
  const std::vector<uint8_t> host = randomBytes(largest + 16, 0xC0FFEE);
  auto* dev = static_cast<uint8_t*>(deviceAlloc(host.size()));
  auto* outs = static_cast<uint32_t*>(deviceAlloc(16 * sizeof(uint32_t)));
  ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream_));

  for (size_t size : sizes) {
    // Exactly the advertised scratch, so that memcheck sees any overrun.
    const size_t scratchBytes = crc32DeviceScratchBytes(size);
    void* scratch = deviceAlloc(scratchBytes);
    for (int off = 0; off < 16; ++off) {
      ASSERT_STATUS_OK(crc32Device(dev + off, size, outs + off, scratch, scratchBytes, stream_));
    }
    uint32_t got[16];
    ASSERT_CUDA(cudaMemcpyAsync(got, outs, sizeof(got), cudaMemcpyDeviceToHost, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    for (int off = 0; off < 16; ++off) {
      const uint32_t want = crc32(host.data() + off, size);
      EXPECT_EQ(want, got[off]) << "size " << size << " offset " << off;
      // boost is byte-at-a-time: keep it to the sizes where that is fast.
      if (size <= (size_t(2) << 20) || off == 0) {
        EXPECT_EQ(boostCrc(host.data() + off, size), got[off]) << "size " << size << " offset " << off;
      }
    }
  }
}

// crc32ManyDevice (the replica check's fingerprints, docs/REPLICAS.md): every span's CRC equals the host
// CRC, for spans of every size class (empty, below a piece, one block, many blocks), at odd offsets, in one
// call; the work table is larger than the persistent grid so blocks walk several items.
TEST_F(Crc32DeviceTest, ManySpansMatchTheHostCrcOfEach) {
  const std::vector<size_t> sizes = {
      0, 1, 15, 16, 17, 4095, 131072, 131073, size_t(3) << 20, (size_t(9) << 20) + 5};
  std::vector<size_t> offsets;
  size_t total = 0;
  for (size_t i = 0; i < sizes.size() * 8; ++i) {
    offsets.push_back(total + (i * 7) % 16);
    total = offsets.back() + sizes[i % sizes.size()] + 16;
  }
  const std::vector<uint8_t> host = randomBytes(total, 0x5EED);
  auto* dev = static_cast<uint8_t*>(deviceAlloc(host.size()));
  ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream_));
  std::vector<Crc32Span> spans;
  for (size_t i = 0; i < offsets.size(); ++i) spans.push_back({dev + offsets[i], sizes[i % sizes.size()]});
  const size_t scratchBytes = crc32ManyDeviceScratchBytes(spans.data(), spans.size());
  void* scratch = deviceAlloc(scratchBytes);
  auto* outs = static_cast<uint32_t*>(deviceAlloc(spans.size() * sizeof(uint32_t)));
  ASSERT_STATUS_OK(crc32ManyDevice(spans.data(), spans.size(), outs, scratch, scratchBytes, stream_));
  std::vector<uint32_t> got(spans.size());
  ASSERT_CUDA(cudaMemcpyAsync(got.data(), outs, got.size() * 4, cudaMemcpyDeviceToHost, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(crc32(host.data() + offsets[i], spans[i].bytes), got[i])
        << "span " << i << " size " << spans[i].bytes;
  }
  EXPECT_EQ(StatusCode::kInvalidArgument,
            crc32ManyDevice(spans.data(), spans.size(), outs, scratch, scratchBytes - 4, stream_).code());
}

// Crc32ManyPlan: its table built once and reused while the spans stay the same (builds() stays 1), so a run
// sees the bytes the buffers hold then (new contents at the same addresses); other spans (fewer, moved,
// resized) build it again; a run on another stream orders itself after what the last one's held (new
// contents written there behind a host-held gate must be what it reads). Every CRC against the host's.
TEST_F(Crc32DeviceTest, ManySpansPlanFollowsContentsAndSpans) {
  const std::vector<size_t> sizes = {0, 1, 17, 4095, 131073, size_t(3) << 20};
  const size_t total = size_t(12) << 20;  // the 18 spans below, 5 bytes apart, take ~9.4 MiB from offset 3
  std::vector<uint8_t> host = randomBytes(total, 0xBEEF);
  auto* dev = static_cast<uint8_t*>(deviceAlloc(total));
  ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), total, cudaMemcpyHostToDevice, stream_));
  std::vector<Crc32Span> spans;
  std::vector<size_t> offsets;
  for (size_t i = 0, at = 3; i < sizes.size() * 3; ++i) {
    offsets.push_back(at);
    spans.push_back({dev + at, sizes[i % sizes.size()]});
    at += sizes[i % sizes.size()] + 5;
  }
  ASSERT_LE(offsets.back() + sizes.back() + 9, total);
  cudaStream_t other = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  Crc32ManyPlan plan;
  const auto check = [&](const std::vector<Crc32Span>& sp, const std::vector<size_t>& off, cudaStream_t s,
                         const char* what) {
    const uint32_t* crcs = nullptr;
    ASSERT_STATUS_OK(plan.run(sp.data(), sp.size(), s, &crcs));
    std::vector<uint32_t> got(sp.size());
    ASSERT_CUDA(cudaMemcpyAsync(got.data(), crcs, got.size() * 4, cudaMemcpyDeviceToHost, s));
    ASSERT_CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < sp.size(); ++i) {
      EXPECT_EQ(crc32(host.data() + off[i], sp[i].bytes), got[i]) << what << ": span " << i;
    }
  };
  check(spans, offsets, stream_, "first run");
  for (int round = 1; round <= 2; ++round) {  // new contents, same spans: the kept table reads them
    host = randomBytes(total, 0xBEEF + round);
    ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), total, cudaMemcpyHostToDevice, stream_));
    check(spans, offsets, stream_, round == 1 ? "new contents" : "new contents again");
  }
  EXPECT_EQ(plan.builds(), 1u) << "the table was built again for the same spans";
  // The same spans on another stream, while the last one's new contents wait behind a held gate: the run must
  // wait for them on the device (the table is kept: no copy of its own orders anything).
  std::atomic<bool> open{false};
  const auto wait = [](void* p) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!static_cast<std::atomic<bool>*>(p)->load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  ASSERT_CUDA(cudaLaunchHostFunc(stream_, wait, &open));
  host = randomBytes(total, 0xF00D);
  void* pinned = nullptr;  // a pinned source: the copy returns at once and reads it once the gate opens
  ASSERT_CUDA(cudaMallocHost(&pinned, total));
  std::memcpy(pinned, host.data(), total);
  ASSERT_CUDA(cudaMemcpyAsync(dev, pinned, total, cudaMemcpyHostToDevice, stream_));
  const uint32_t* held = nullptr;
  ASSERT_STATUS_OK(plan.run(spans.data(), spans.size(), other, &held));
  uint32_t* heldGot = nullptr;  // pinned too: a copy into pageable memory would wait here for the gate
  ASSERT_CUDA(cudaMallocHost(reinterpret_cast<void**>(&heldGot), spans.size() * 4));
  ASSERT_CUDA(cudaMemcpyAsync(heldGot, held, spans.size() * 4, cudaMemcpyDeviceToHost, other));
  EXPECT_FALSE(open.load());
  open.store(true);
  ASSERT_CUDA(cudaStreamSynchronize(other));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  cudaFreeHost(pinned);
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(crc32(host.data() + offsets[i], spans[i].bytes), heldGot[i]) << "behind the gate: span " << i;
  }
  cudaFreeHost(heldGot);
  EXPECT_EQ(plan.builds(), 1u);
  std::vector<Crc32Span> moved(spans.begin(), spans.begin() + 7);
  std::vector<size_t> movedOff(offsets.begin(), offsets.begin() + 7);
  moved[4].data = dev + movedOff[4] + 1;  // one span moved by a byte, another resized
  movedOff[4] += 1;
  moved[5].bytes += 9;
  check(moved, movedOff, stream_, "fewer spans, one moved, one resized");
  EXPECT_EQ(plan.builds(), 2u);
  host = randomBytes(total, 0xCAFE);
  ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), total, cudaMemcpyHostToDevice, stream_));
  check(spans, offsets, other, "the first spans on another stream");
  EXPECT_EQ(plan.builds(), 3u);
  std::vector<Crc32Span> bad = spans;
  bad[2].data = nullptr;
  const uint32_t* crcs = nullptr;
  EXPECT_EQ(StatusCode::kInvalidArgument, plan.run(bad.data(), bad.size(), stream_, &crcs).code());
  check(spans, offsets, stream_, "after a refused run");
  EXPECT_EQ(plan.builds(), 3u) << "a refused run touched the table";
  ASSERT_CUDA(cudaStreamBeginCapture(other, cudaStreamCaptureModeGlobal));
  const Status captured = plan.run(spans.data(), spans.size(), other, &crcs);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamEndCapture(other, &graph));
  if (graph != nullptr) cudaGraphDestroy(graph);
  EXPECT_EQ(StatusCode::kInvalidArgument, captured.code()) << captured.toString();
  check(spans, offsets, stream_, "after a capture refused");
  EXPECT_EQ(plan.builds(), 3u);
  cudaStreamDestroy(other);
}

// A model's worth of spans (~100 MB, more than the device's blocks x 4 x 128 KiB, so segments grow past the
// 128 KiB minimum and blocks take items from the device counter): every CRC right at each of several runs
// (the counter set back by the last block of each launch) of plans cut into 1, the default (2) and 64 items
// per block, the bytes of every span rewritten before each run (an item a run skipped would leave last run's
// partial, right for last run's bytes only), then a byte changed; and of a plan over one span of all the
// bytes.
TEST_F(Crc32DeviceTest, ManySpansPlanOverAModelsWorthOfBytes) {
  const std::vector<size_t> sizes = {5, 3073, 12288, (size_t(1) << 20) + 7, size_t(3) << 20};
  SpanSet set = makeSpans(sizes, 120, size_t(102) << 20, 0xFACE, 3, 5);  // 5 bytes apart: every alignment
  std::vector<uint8_t>& host = set.host;
  uint8_t* dev = set.dev;
  const std::vector<Crc32Span>& spans = set.spans;
  const std::vector<size_t>& offsets = set.offsets;
  const size_t changed = offsets[9] + sizes[4] / 2;  // inside span 9, a 3 MiB one
  const auto change = [&] {
    host[changed] ^= 0x10;
    ASSERT_CUDA(cudaMemcpyAsync(dev + changed, host.data() + changed, 1, cudaMemcpyHostToDevice, stream_));
  };
  uint32_t seed = 0xB0B;
  const auto rewrite = [&] {
    ASSERT_CUDA(cudaStreamSynchronize(stream_));  // the last pageable copies out of `host` done
    host = randomBytes(host.size(), ++seed);
    ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream_));
  };
  for (uint32_t items : {1u, Crc32ManyPlan::kDefaultItemsPerBlock, 64u}) {
    Crc32ManyPlan plan(items);
    for (int run = 0; run < 3; ++run) {
      rewrite();
      for (int again = 0; again < 2; ++again) {
        const uint32_t* crcs = nullptr;
        ASSERT_STATUS_OK(plan.run(spans.data(), spans.size(), stream_, &crcs));
        const std::vector<uint32_t> got = readBack(crcs, spans.size(), stream_);
        for (size_t i = 0; i < spans.size(); ++i) {
          ASSERT_EQ(crc32(host.data() + offsets[i], spans[i].bytes), got[i])
              << items << " items a block, run " << run << (again ? " after a change" : "") << ", span " << i
              << " of " << spans[i].bytes << " bytes";
        }
        change();
      }
    }
    EXPECT_EQ(plan.builds(), 1u);
    // One span of all the bytes: as many items as blocks (the grid).
    Crc32ManyPlan whole(items);
    const Crc32Span all{dev, host.size()};
    for (int run = 0; run < 2; ++run) {
      rewrite();
      const uint32_t* crcs = nullptr;
      ASSERT_STATUS_OK(whole.run(&all, 1, stream_, &crcs));
      ASSERT_EQ(crc32(host.data(), host.size()), readBack(crcs, 1, stream_)[0])
          << items << " items a block, one span, run " << run;
    }
  }
  // The same spans through crc32ManyDevice, twice over one scratch (its counters zeroed with the table).
  const size_t scratchBytes = crc32ManyDeviceScratchBytes(spans.data(), spans.size());
  void* scratch = deviceAlloc(scratchBytes);
  auto* outs = static_cast<uint32_t*>(deviceAlloc(spans.size() * sizeof(uint32_t)));
  for (int run = 0; run < 2; ++run) {
    ASSERT_CUDA(cudaMemsetAsync(outs, 0, spans.size() * sizeof(uint32_t), stream_));
    ASSERT_STATUS_OK(crc32ManyDevice(spans.data(), spans.size(), outs, scratch, scratchBytes, stream_));
    const std::vector<uint32_t> got = readBack(outs, spans.size(), stream_);
    for (size_t i = 0; i < spans.size(); ++i) {
      ASSERT_EQ(crc32(host.data() + offsets[i], spans[i].bytes), got[i])
          << "crc32ManyDevice run " << run << ", span " << i;
    }
    change();
  }
}

// Crc32ManyPlan::runMessage: the replica check's message, the host words copied in and each span's CRC
// written over its word by the merge itself; new host words with the same table; bad positions refused
// before anything runs; a message without spans.
TEST_F(Crc32DeviceTest, ManySpansPlanWritesAMessage) {
  const std::vector<size_t> sizes = {5, 0, 70000, 1 << 20, 3};
  const SpanSet set = makeSpans(sizes, sizes.size(), size_t(2) << 20, 0xABC, 1, 3);
  const std::vector<uint8_t>& host = set.host;
  const std::vector<Crc32Span>& spans = set.spans;
  const std::vector<size_t>& offsets = set.offsets;
  const std::vector<uint32_t> positions = {9, 2, 4, 7, 3};  // out of order, between host words
  Crc32ManyPlan plan;
  const auto message = [&](const std::vector<uint32_t>& words, const char* what) {
    const uint32_t* msg = nullptr;
    ASSERT_STATUS_OK(plan.runMessage(spans.data(), positions.data(), spans.size(), words.data(), words.size(),
                                     stream_, &msg));
    std::vector<uint32_t> got(words.size());
    ASSERT_CUDA(cudaMemcpyAsync(got.data(), msg, got.size() * 4, cudaMemcpyDeviceToHost, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<uint32_t> want = words;
    for (size_t i = 0; i < spans.size(); ++i) want[positions[i]] = crc32(host.data() + offsets[i], sizes[i]);
    EXPECT_EQ(want, got) << what;
  };
  std::vector<uint32_t> words(11);
  for (size_t i = 0; i < words.size(); ++i) words[i] = 0x1000u + static_cast<uint32_t>(i);
  message(words, "first message");
  for (uint32_t& w : words) w ^= 0xFFFF0000u;
  message(words, "new host words, the same table");
  EXPECT_EQ(plan.builds(), 1u);
  const uint32_t* msg = nullptr;
  std::vector<uint32_t> twice = positions;
  twice[3] = twice[0];
  EXPECT_EQ(StatusCode::kInvalidArgument, plan.runMessage(spans.data(), twice.data(), spans.size(),
                                                          words.data(), words.size(), stream_, &msg)
                                              .code());
  std::vector<uint32_t> outside = positions;
  outside[1] = static_cast<uint32_t>(words.size());
  const Status st =
      plan.runMessage(spans.data(), outside.data(), spans.size(), words.data(), words.size(), stream_, &msg);
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_NE(st.message().find("outside the message of 11 words"), std::string::npos) << st.toString();
  EXPECT_EQ(plan.builds(), 1u) << "a refused message touched the table";
  EXPECT_EQ(msg, nullptr) << "a refused message gave a buffer";
  message(words, "after the refusals");
  // Another stream: the plan orders it after the last one's work (an event), the table kept.
  cudaStream_t other = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  ASSERT_STATUS_OK(
      plan.runMessage(spans.data(), positions.data(), spans.size(), words.data(), words.size(), other, &msg));
  std::vector<uint32_t> onOther(words.size());
  ASSERT_CUDA(cudaMemcpyAsync(onOther.data(), msg, onOther.size() * 4, cudaMemcpyDeviceToHost, other));
  ASSERT_CUDA(cudaStreamSynchronize(other));
  std::vector<uint32_t> want = words;
  for (size_t i = 0; i < spans.size(); ++i) want[positions[i]] = crc32(host.data() + offsets[i], sizes[i]);
  EXPECT_EQ(want, onOther) << "on another stream";
  EXPECT_EQ(plan.builds(), 1u);
  // Other positions with the same spans are another table (the merge writes where the table says).
  const std::vector<uint32_t> moved = {0, 1, 10, 5, 6};
  ASSERT_STATUS_OK(
      plan.runMessage(spans.data(), moved.data(), spans.size(), words.data(), words.size(), stream_, &msg));
  std::vector<uint32_t> gotMoved(words.size());
  ASSERT_CUDA(cudaMemcpyAsync(gotMoved.data(), msg, gotMoved.size() * 4, cudaMemcpyDeviceToHost, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  want = words;
  for (size_t i = 0; i < spans.size(); ++i) want[moved[i]] = crc32(host.data() + offsets[i], sizes[i]);
  EXPECT_EQ(want, gotMoved) << "other positions";
  EXPECT_EQ(plan.builds(), 2u);
  cudaStreamDestroy(other);
  Crc32ManyPlan bare;  // no device tensors: the host words only
  ASSERT_STATUS_OK(bare.runMessage(nullptr, nullptr, 0, words.data(), words.size(), stream_, &msg));
  std::vector<uint32_t> got(words.size());
  ASSERT_CUDA(cudaMemcpyAsync(got.data(), msg, got.size() * 4, cudaMemcpyDeviceToHost, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_EQ(words, got);
  // Messages at the edges of the three parameter blocks the segment launch carries (64, 384 and 960 words),
  // copied past the last: the same bytes either way, the CRCs at the message's ends.
  for (const size_t count :
       {size_t(64), size_t(65), size_t(384), size_t(385), size_t(960), size_t(961), size_t(1500)}) {
    std::vector<uint32_t> longWords(count);
    for (size_t i = 0; i < count; ++i) {
      longWords[i] =
          0xC0DE0000u ^ static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>(count << 20);
    }
    const std::vector<uint32_t> ends = {static_cast<uint32_t>(count - 1), 0, static_cast<uint32_t>(count / 3),
                                        1, static_cast<uint32_t>(count / 2)};
    Crc32ManyPlan longPlan;
    ASSERT_STATUS_OK(
        longPlan.runMessage(spans.data(), ends.data(), spans.size(), longWords.data(), count, stream_, &msg));
    std::vector<uint32_t> gotLong(count);
    ASSERT_CUDA(cudaMemcpyAsync(gotLong.data(), msg, count * 4, cudaMemcpyDeviceToHost, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<uint32_t> wantLong = longWords;
    for (size_t i = 0; i < spans.size(); ++i) wantLong[ends[i]] = crc32(host.data() + offsets[i], sizes[i]);
    EXPECT_EQ(wantLong, gotLong) << count << " words";
  }
}

// runMessage into the caller's buffer (the replica check's own block of its all-gather's output): the
// message there and nothing around it touched, short (inline) and long (copied) host words; the table kept
// while the buffer stays, built again for another buffer or for the plan's own.
TEST_F(Crc32DeviceTest, ManySpansPlanWritesAMessageIntoTheCallersBuffer) {
  const std::vector<size_t> sizes = {3, 1 << 16, 0, 777};
  const SpanSet set = makeSpans(sizes, sizes.size(), size_t(1) << 17, 0x5EED, 2, 1);
  const std::vector<uint8_t>& host = set.host;
  const std::vector<Crc32Span>& spans = set.spans;
  const std::vector<size_t>& offsets = set.offsets;
  const std::vector<uint32_t> positions = {6, 1, 3, 0};
  for (const size_t count : {size_t(8), size_t(1200)}) {
    // Three blocks of `count` words, filled with a sentinel; the message goes into the middle one.
    auto* blocks = static_cast<uint32_t*>(deviceAlloc(3 * count * 4));
    auto* others = static_cast<uint32_t*>(deviceAlloc(count * 4));
    const std::vector<uint32_t> sentinel(3 * count, 0x5A5A5A5Au);
    ASSERT_CUDA(cudaMemcpyAsync(blocks, sentinel.data(), 3 * count * 4, cudaMemcpyHostToDevice, stream_));
    std::vector<uint32_t> words(count);
    Crc32ManyPlan plan;
    const auto runInto = [&](uint32_t* into, uint32_t salt, const char* what) {
      for (size_t i = 0; i < count; ++i) words[i] = salt ^ static_cast<uint32_t>(i * 40503u);
      const uint32_t* msg = nullptr;
      ASSERT_STATUS_OK(plan.runMessage(spans.data(), positions.data(), spans.size(), words.data(), count,
                                       stream_, &msg, into));
      if (into != nullptr) {
        EXPECT_EQ(msg, into) << what;
      }
      const std::vector<uint32_t> got = readBack(msg, count, stream_);
      std::vector<uint32_t> want = words;
      for (size_t i = 0; i < spans.size(); ++i)
        want[positions[i]] = crc32(host.data() + offsets[i], sizes[i]);
      EXPECT_EQ(want, got) << what << ", " << count << " words";
    };
    runInto(blocks + count, 0x11110000u, "into the middle block");
    runInto(blocks + count, 0x22220000u, "the same buffer again");
    EXPECT_EQ(plan.builds(), 1u) << "the same buffer rebuilt the table";
    const std::vector<uint32_t> all = readBack(blocks, 3 * count, stream_);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(all[i], 0x5A5A5A5Au) << "word " << i << " before the message";
      ASSERT_EQ(all[2 * count + i], 0x5A5A5A5Au) << "word " << i << " after the message";
    }
    runInto(others, 0x33330000u, "another buffer");
    EXPECT_EQ(plan.builds(), 2u);
    runInto(nullptr, 0x44440000u, "the plan's own buffer");
    EXPECT_EQ(plan.builds(), 3u);
    const std::vector<uint32_t> first = readBack(blocks + count, count, stream_);
    std::vector<uint32_t> second(words.size());
    for (size_t i = 0; i < count; ++i) second[i] = 0x22220000u ^ static_cast<uint32_t>(i * 40503u);
    for (size_t i = 0; i < spans.size(); ++i)
      second[positions[i]] = crc32(host.data() + offsets[i], sizes[i]);
    EXPECT_EQ(second, first) << "a run into another buffer wrote the first one";
  }
  const uint32_t* msg = nullptr;
  Crc32ManyPlan odd;
  std::vector<uint32_t> words(4, 1);
  auto* base = static_cast<uint8_t*>(deviceAlloc(64));
  EXPECT_EQ(StatusCode::kInvalidArgument, odd.runMessage(nullptr, nullptr, 0, words.data(), words.size(),
                                                         stream_, &msg, reinterpret_cast<uint32_t*>(base + 2))
                                              .code());
  // No spans: the host words alone, into the caller's buffer.
  const std::vector<uint32_t> only = {7, 8, 9, 10};
  ASSERT_STATUS_OK(odd.runMessage(nullptr, nullptr, 0, only.data(), only.size(), stream_, &msg,
                                  reinterpret_cast<uint32_t*>(base + 16)));
  EXPECT_EQ(msg, reinterpret_cast<uint32_t*>(base + 16));
  EXPECT_EQ(only, readBack(reinterpret_cast<uint32_t*>(base + 16), only.size(), stream_));
}

TEST_F(Crc32DeviceTest, SingleBitFlipsChangeTheCrc) {
  // A flip anywhere must show: catches a thread or block whose contribution is dropped.
  const size_t size = std::min<size_t>(testMaxBytes(), size_t(8) << 20);
  const std::vector<uint8_t> host = randomBytes(size, 7);
  auto* dev = static_cast<uint8_t*>(deviceAlloc(size));
  auto* out = static_cast<uint32_t*>(deviceAlloc(sizeof(uint32_t)));
  const size_t scratchBytes = crc32DeviceScratchBytes(size);
  void* scratch = deviceAlloc(scratchBytes);
  ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), size, cudaMemcpyHostToDevice, stream_));
  const uint32_t clean = crc32(host.data(), size);
  uint64_t state = 99;
  for (int trial = 0; trial < 64; ++trial) {
    const size_t pos = trial == 0 ? 0 : trial == 1 ? size - 1 : splitmix64(&state) % size;
    const uint8_t flipped = host[pos] ^ static_cast<uint8_t>(1u << (trial % 8));
    ASSERT_CUDA(cudaMemcpyAsync(dev + pos, &flipped, 1, cudaMemcpyHostToDevice, stream_));
    ASSERT_STATUS_OK(crc32Device(dev, size, out, scratch, scratchBytes, stream_));
    uint32_t got = 0;
    ASSERT_CUDA(cudaMemcpyAsync(&got, out, sizeof(got), cudaMemcpyDeviceToHost, stream_));
    ASSERT_CUDA(cudaMemcpyAsync(dev + pos, &host[pos], 1, cudaMemcpyHostToDevice, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> mutated(host.begin() + static_cast<long>(pos),
                                 host.begin() + static_cast<long>(pos) + 1);
    mutated[0] = flipped;
    // Expected value from the host CRC of the mutated buffer, chained in three parts.
    uint32_t want = crc32(host.data(), pos);
    want = crc32(mutated.data(), 1, want);
    want = crc32(host.data() + pos + 1, size - pos - 1, want);
    EXPECT_EQ(want, got) << "flip at " << pos;
    EXPECT_NE(clean, got) << "flip at " << pos;
  }
}

// ---- NaN scan --------------------------------------------------------------------------------------------

struct ScanType {
  DataType dtype;
  size_t bytes;
  uint64_t exponentMask;              // exponent field, in place
  std::vector<uint64_t> nonFinite;    // +Inf, -Inf, quiet NaN, signalling NaN, all ones
  std::vector<uint64_t> finiteEdges;  // largest finite, its negative, smallest subnormal, -0
};

const std::vector<ScanType>& scanTypes() {
  static const std::vector<ScanType> types = {
      {DataType::kFloat32,
       4,
       0x7f800000ull,
       {0x7f800000ull, 0xff800000ull, 0x7fc00000ull, 0x7f800001ull, 0xffffffffull},
       {0x7f7fffffull, 0xff7fffffull, 0x00000001ull, 0x80000000ull}},
      {DataType::kFloat64,
       8,
       0x7ff0000000000000ull,
       {0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull, 0x7ff0000000000001ull,
        0xffffffffffffffffull},
       {0x7fefffffffffffffull, 0xffefffffffffffffull, 0x1ull, 0x8000000000000000ull}},
      {DataType::kFloat16,
       2,
       0x7c00ull,
       {0x7c00ull, 0xfc00ull, 0x7e00ull, 0x7c01ull, 0xffffull},
       {0x7bffull, 0xfbffull, 0x0001ull, 0x8000ull}},
      {DataType::kBFloat16,
       2,
       0x7f80ull,
       {0x7f80ull, 0xff80ull, 0x7fc0ull, 0x7f81ull, 0xffffull},
       {0x7f7full, 0xff7full, 0x0001ull, 0x8000ull}},
      {DataType::kFloat8E5M2,
       1,
       0x7cull,
       {0x7cull, 0xfcull, 0x7eull, 0x7dull, 0xffull},
       {0x7bull, 0xfbull, 0x01ull, 0x80ull}},
      // e4m3fn: no Inf, NaN only at S.1111.111, so its "exponent" mask covers the mantissa too (as in
      // element_bits.h); 0x78-0x7e are finite (256 to 448).
      {DataType::kFloat8E4M3, 1, 0x7full, {0x7full, 0xffull}, {0x7eull, 0xfeull, 0x01ull, 0x80ull, 0x78ull}},
  };
  return types;
}

// Random finite elements (a random pattern whose exponent is all ones loses its top exponent bit), with the
// finite edge cases at the first elements of every 16-byte head alignment.
std::vector<uint8_t> finiteElements(const ScanType& t, size_t count, uint64_t seed) {
  std::vector<uint8_t> out = randomBytes(count * t.bytes, seed);
  const uint64_t topExponentBit = t.exponentMask & ~(t.exponentMask >> 1);
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = 0;
    std::memcpy(&v, &out[i * t.bytes], t.bytes);
    if ((v & t.exponentMask) == t.exponentMask) v &= ~topExponentBit;
    if (i < 16 + t.finiteEdges.size()) v = t.finiteEdges[i % t.finiteEdges.size()];
    std::memcpy(&out[i * t.bytes], &v, t.bytes);
  }
  return out;
}

TEST(NoGpuNanScanDeviceArgs, RejectsUnsupportedDtypesAndBadPointers) {
  NanScanResult* fakeResult = reinterpret_cast<NanScanResult*>(uintptr_t(0x1000));
  const void* fakeData = reinterpret_cast<const void*>(uintptr_t(0x2000));
  for (DataType dt : {DataType::kInt32, DataType::kInt64, DataType::kUint8, static_cast<DataType>(99)}) {
    const Status s = nanScanDevice(fakeData, 16, dt, fakeResult, nullptr);
    EXPECT_EQ(StatusCode::kInvalidArgument, s.code()) << s.toString();
  }
  EXPECT_EQ(StatusCode::kInvalidArgument,
            nanScanDevice(fakeData, 16, DataType::kFloat32, nullptr, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            nanScanDevice(nullptr, 16, DataType::kFloat32, fakeResult, nullptr).code());
  // Not aligned to the element size.
  EXPECT_EQ(StatusCode::kInvalidArgument, nanScanDevice(reinterpret_cast<const void*>(uintptr_t(0x2001)), 16,
                                                        DataType::kFloat32, fakeResult, nullptr)
                                              .code());
  EXPECT_EQ(StatusCode::kInvalidArgument, nanScanDevice(reinterpret_cast<const void*>(uintptr_t(0x2004)), 16,
                                                        DataType::kFloat64, fakeResult, nullptr)
                                              .code());
}

class NanScanDeviceTest : public GpuTest, public ::testing::WithParamInterface<size_t> {};

// Which non-finite elements a case places.
enum class Pattern { kNone, kFirst, kLast, kMiddle, kAll, kScattered };
const Pattern kPatterns[] = {Pattern::kNone,   Pattern::kFirst,     Pattern::kLast,
                             Pattern::kMiddle, Pattern::kScattered, Pattern::kAll};
const char* patternName(Pattern p) {
  switch (p) {
    case Pattern::kNone:
      return "none";
    case Pattern::kFirst:
      return "first";
    case Pattern::kLast:
      return "last";
    case Pattern::kMiddle:
      return "middle";
    case Pattern::kAll:
      return "all";
    default:
      return "scattered";
  }
}

std::set<size_t> patternPositions(Pattern p, size_t n) {
  if (n == 0) return {};
  switch (p) {
    case Pattern::kNone:
      return {};
    case Pattern::kFirst:
      return {0};
    case Pattern::kLast:
      return {n - 1};
    case Pattern::kMiddle:
      return {n / 2};
    case Pattern::kAll:
      return {};  // handled as a range
    default: {
      std::set<size_t> s = {n - 1, n / 2, n / 3, n - n / 7 - 1, 1, 2, 7, 8, 9};
      for (auto it = s.begin(); it != s.end();) it = *it >= n ? s.erase(it) : std::next(it);
      return s;
    }
  }
}

TEST_P(NanScanDeviceTest, CountAndFirstIndexAreExact) {
  const ScanType& t = scanTypes()[GetParam()];
  SCOPED_TRACE(dataTypeName(t.dtype));
  const std::vector<size_t> sizes = testSizes(t.bytes);
  const size_t largest = sizes.back();
  const size_t offsets = 16 / t.bytes;  // every 16-byte head alignment of an element-aligned pointer
  const std::vector<uint8_t> host = finiteElements(t, largest + offsets, 1234 + GetParam());
  auto* dev = static_cast<uint8_t*>(deviceAlloc(host.size()));
  auto* result = static_cast<NanScanResult*>(deviceAlloc(sizeof(NanScanResult)));
  ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream_));

  for (size_t n : sizes) {
    for (size_t off = 0; off < offsets; ++off) {
      // The largest size only at a few alignments: restoring it after "all" is a full upload.
      if (n == largest && n > (size_t(2) << 20) && off != 0 && off != 1 && off != offsets - 1) continue;
      uint8_t* base = dev + off * t.bytes;
      const uint8_t* hostBase = host.data() + off * t.bytes;
      for (Pattern p : kPatterns) {
        SCOPED_TRACE(std::string("n=") + std::to_string(n) + " offset=" + std::to_string(off) +
                     " pattern=" + patternName(p));
        const std::set<size_t> positions = patternPositions(p, n);
        size_t k = 0;
        std::vector<uint64_t> values(positions.size());
        for (size_t pos : positions) {
          values[k] = t.nonFinite[k % t.nonFinite.size()];
          ASSERT_CUDA(
              cudaMemcpyAsync(base + pos * t.bytes, &values[k], t.bytes, cudaMemcpyHostToDevice, stream_));
          ++k;
        }
        if (p == Pattern::kAll && n != 0) ASSERT_CUDA(cudaMemsetAsync(base, 0xff, n * t.bytes, stream_));

        ASSERT_STATUS_OK(nanScanDevice(base, n, t.dtype, result, stream_));
        NanScanResult got{};
        ASSERT_CUDA(cudaMemcpyAsync(&got, result, sizeof(got), cudaMemcpyDeviceToHost, stream_));

        // Restore the finite data.
        if (p == Pattern::kAll && n != 0) {
          ASSERT_CUDA(cudaMemcpyAsync(base, hostBase, n * t.bytes, cudaMemcpyHostToDevice, stream_));
        }
        for (size_t pos : positions) {
          ASSERT_CUDA(cudaMemcpyAsync(base + pos * t.bytes, hostBase + pos * t.bytes, t.bytes,
                                      cudaMemcpyHostToDevice, stream_));
        }
        ASSERT_CUDA(cudaStreamSynchronize(stream_));

        const unsigned long long wantCount = p == Pattern::kAll ? n : positions.size();
        const unsigned long long wantFirst =
            wantCount == 0
                ? ~0ull
                : (p == Pattern::kAll ? 0ull : static_cast<unsigned long long>(*positions.begin()));
        EXPECT_EQ(wantCount, got.count);
        EXPECT_EQ(wantFirst, got.firstIndex);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFloatTypes, NanScanDeviceTest, ::testing::Values(0, 1, 2, 3, 4, 5),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(dataTypeName(scanTypes()[info.param].dtype));
                         });

class NanScanDeviceBasics : public GpuTest {};

TEST_F(NanScanDeviceBasics, ZeroCountReportsNone) {
  auto* result = static_cast<NanScanResult*>(deviceAlloc(sizeof(NanScanResult)));
  ASSERT_CUDA(cudaMemsetAsync(result, 0x5a, sizeof(NanScanResult), stream_));
  ASSERT_STATUS_OK(nanScanDevice(nullptr, 0, DataType::kBFloat16, result, stream_));
  NanScanResult got{};
  ASSERT_CUDA(cudaMemcpyAsync(&got, result, sizeof(got), cudaMemcpyDeviceToHost, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  EXPECT_EQ(0ull, got.count);
  EXPECT_EQ(~0ull, got.firstIndex);
}

TEST(NoGpuNanScanManyDeviceArgs, NamesTheBadSpanAndLaunchesNothing) {
  NanScanResult* fakeResult = reinterpret_cast<NanScanResult*>(uintptr_t(0x1000));
  const void* fakeData = reinterpret_cast<const void*>(uintptr_t(0x2000));
  std::vector<NanScanSpan> spans(5, NanScanSpan{fakeData, 16, DataType::kFloat32, fakeResult});
  spans[3].dtype = DataType::kInt32;
  const Status s = nanScanManyDevice(spans.data(), spans.size(), nullptr);
  EXPECT_EQ(StatusCode::kInvalidArgument, s.code());
  EXPECT_NE(std::string::npos, s.message().find("(span 3)")) << s.toString();
  spans[3] = NanScanSpan{fakeData, 16, DataType::kFloat16, nullptr};
  EXPECT_NE(std::string::npos,
            nanScanManyDevice(spans.data(), spans.size(), nullptr).message().find("span 3"));
  EXPECT_EQ(StatusCode::kInvalidArgument, nanScanManyDevice(nullptr, 2, nullptr).code());
  EXPECT_TRUE(nanScanManyDevice(nullptr, 0, nullptr).isOk());
}

// 400 spans of every dtype interleaved (more than one launch's 64 of each dtype), every size of the single
// scan's test and every head alignment, with each pattern of non-finite elements: one call, each result
// exactly what nanScanDevice reports for that span alone. The result slots start as garbage.
TEST_F(NanScanDeviceBasics, ManySpansMatchOneScanEach) {
  struct Case {
    size_t type, n, off;
    Pattern pattern;
    size_t at;  // byte offset in the device buffer
  };
  std::vector<Case> cases;
  size_t bytes = 0;
  for (size_t i = 0; cases.size() < 400; ++i) {
    const size_t type = i % scanTypes().size();
    const ScanType& t = scanTypes()[type];
    std::vector<size_t> sizes = testSizes(t.bytes);
    sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [](size_t n) { return n > (size_t(1) << 21); }),
                sizes.end());
    Case c{type, sizes[(i / 4) % sizes.size()], (i / 3) % (16 / t.bytes), kPatterns[(i / 2) % 6], 0};
    c.at = bytes + c.off * t.bytes;
    bytes += (c.n + 16 / t.bytes) * t.bytes + 256;
    bytes = (bytes + 255) / 256 * 256;
    cases.push_back(c);
  }
  std::vector<uint8_t> host(bytes, 0);
  std::vector<NanScanResult> want(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const ScanType& t = scanTypes()[c.type];
    const std::vector<uint8_t> finite = finiteElements(t, c.n, 99 + i);
    std::copy(finite.begin(), finite.end(), host.begin() + long(c.at));
    std::set<size_t> positions = patternPositions(c.pattern, c.n);
    if (c.pattern == Pattern::kAll) {
      for (size_t e = 0; e < c.n; ++e) positions.insert(e);
    }
    size_t k = 0;
    for (size_t pos : positions) {
      const uint64_t v = t.nonFinite[k++ % t.nonFinite.size()];
      std::memcpy(&host[c.at + pos * t.bytes], &v, t.bytes);
    }
    want[i] = NanScanResult{positions.size(), positions.empty() ? ~0ull : *positions.begin()};
  }
  auto* dev = static_cast<uint8_t*>(deviceAlloc(bytes));
  auto* results = static_cast<NanScanResult*>(deviceAlloc(2 * cases.size() * sizeof(NanScanResult)));
  ASSERT_CUDA(cudaMemcpyAsync(dev, host.data(), bytes, cudaMemcpyHostToDevice, stream_));
  ASSERT_CUDA(cudaMemsetAsync(results, 0x5a, 2 * cases.size() * sizeof(NanScanResult), stream_));
  std::vector<NanScanSpan> spans;
  for (size_t i = 0; i < cases.size(); ++i) {
    spans.push_back(
        NanScanSpan{dev + cases[i].at, cases[i].n, scanTypes()[cases[i].type].dtype, results + i});
  }
  ASSERT_STATUS_OK(nanScanManyDevice(spans.data(), spans.size(), stream_));
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_STATUS_OK(
        nanScanDevice(spans[i].data, spans[i].count, spans[i].dtype, results + cases.size() + i, stream_));
  }
  std::vector<NanScanResult> got(2 * cases.size());
  ASSERT_CUDA(cudaMemcpyAsync(got.data(), results, got.size() * sizeof(NanScanResult), cudaMemcpyDeviceToHost,
                              stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("span " + std::to_string(i) + " " + dataTypeName(spans[i].dtype) +
                 " n=" + std::to_string(cases[i].n) + " offset=" + std::to_string(cases[i].off) +
                 " pattern=" + patternName(cases[i].pattern));
    EXPECT_EQ(want[i].count, got[i].count);
    EXPECT_EQ(want[i].firstIndex, got[i].firstIndex);
    EXPECT_EQ(got[cases.size() + i].count, got[i].count);
    EXPECT_EQ(got[cases.size() + i].firstIndex, got[i].firstIndex);
  }
}

// Complex values as their real and imaginary parts: the count is of non-finite parts, the first index the
// complex element's, by the single scan and the batched one alike (on the host: scanNonFinite).
TEST_F(NanScanDeviceBasics, ComplexIsScannedByPart) {
  const size_t n = 4099;  // complex elements: an odd number, so c64 has a scalar tail
  std::vector<float> c64(2 * n + 2, 0.25f);
  std::vector<double> c128(2 * n, -0.5);
  c64[2 + 2 * 1000 + 1] = std::nanf("");  // element 1000 (after a one-element offset), imaginary part
  c64[2 + 2 * 3000] = INFINITY;           // element 3000, both parts
  c64[2 + 2 * 3000 + 1] = -INFINITY;
  c128[2 * 17] = std::nan("");  // element 17, real part
  auto* d64 = static_cast<float*>(deviceAlloc(c64.size() * sizeof(float)));
  auto* d128 = static_cast<double*>(deviceAlloc(c128.size() * sizeof(double)));
  auto* results = static_cast<NanScanResult*>(deviceAlloc(4 * sizeof(NanScanResult)));
  ASSERT_CUDA(cudaMemcpyAsync(d64, c64.data(), c64.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  ASSERT_CUDA(
      cudaMemcpyAsync(d128, c128.data(), c128.size() * sizeof(double), cudaMemcpyHostToDevice, stream_));
  ASSERT_STATUS_OK(nanScanDevice(d64 + 2, n, DataType::kComplex64, results, stream_));
  ASSERT_STATUS_OK(nanScanDevice(d128, n, DataType::kComplex128, results + 1, stream_));
  const NanScanSpan spans[] = {{d64 + 2, n, DataType::kComplex64, results + 2},
                               {d128, n, DataType::kComplex128, results + 3}};
  ASSERT_STATUS_OK(nanScanManyDevice(spans, 2, stream_));
  NanScanResult got[4];
  ASSERT_CUDA(cudaMemcpyAsync(got, results, sizeof(got), cudaMemcpyDeviceToHost, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  const NonFiniteCount host64 = scanNonFinite(c64.data() + 2, n, DataType::kComplex64);
  const NonFiniteCount host128 = scanNonFinite(c128.data(), n, DataType::kComplex128);
  EXPECT_EQ(3u, host64.count);
  EXPECT_EQ(1000u, host64.firstIndex);
  EXPECT_EQ(1u, host128.count);
  EXPECT_EQ(17u, host128.firstIndex);
  for (int k : {0, 2}) {
    EXPECT_EQ(host64.count, got[k].count) << k;
    EXPECT_EQ(host64.firstIndex, got[k].firstIndex) << k;
    EXPECT_EQ(host128.count, got[k + 1].count) << k;
    EXPECT_EQ(host128.firstIndex, got[k + 1].firstIndex) << k;
  }
}

}  // namespace
}  // namespace ringguard
