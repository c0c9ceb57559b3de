// DeviceExecutor against HostExecutor, and reduceDevice against reduceHost: given the same slot contents,
// trailers and task, both executors must leave bit-identical dst buffers, the same verdicts and the same
// outgoing trailers, for every dtype x op, sizes from 0 to 1 Mi + 3 elements and element offsets that give
// every vector width (16, 8, 4 bytes, single elements). Damaged, stale and poisoned slices must get the
// host's verdict and leave dst untouched. verifyApplyCrcDevice (the fused apply + CRC of a forwarded slice)
// is also checked directly, at offsets the executor's 256-byte-aligned slots never give.
//
// Host and device run one implementation of the arithmetic and the trailer check (core/element_ops.h,
// core/trailer_check.h; tests/unit/test_element_ops.cc checks it on the host): what these tests check is the
// device compilation of it (intrinsics, the hardware f16 conversions, the vector data path, the constant
// memory tables) and the kernels' verdict and data movement.
//
// Without a CUDA device every test is skipped with the reason.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/corruption_plan.h"
#include "core/fault_injector.h"
#include "core/reduce.h"
#include "core/trailer.h"
#include "cuda/kernels.h"
#include "cuda/memory_pool.h"
#include "cuda/verify_reduce.h"
#include "executor/device/device_executor.h"
#include "executor/host_executor.h"
#include "gpu_test_util.h"
#include "ringguard/core/crc32.h"
#include "ringguard/core/options.h"
#include "ringguard/core/types.h"
#include "verifiable.h"  // randomBytes

namespace ringguard {
namespace {

using testing::randomBytes;
using testing::splitmix64;

constexpr size_t kLarge = (size_t(1) << 20) + 3;
const size_t kSizes[] = {0, 1, 7, 4099, kLarge};

// ---- Test data -------------------------------------------------------------------------------------------

// Elements of `dtype` whose single-hop reductions are NaN-free, so that results (and their CRCs) are
// bit-comparable with the host: floats in [-8, 8) with random mantissas, 1 in 16 tiny (subnormal for f16 /
// bf16 after the conversion), 1 in 64 an exact small integer (ties in the f16 / bf16 rounding); integers
// and u8 random over their full range (sums and products wrap).
std::vector<uint8_t> finiteElements(DataType dtype, size_t count, uint64_t seed) {
  const size_t e = dataTypeSize(dtype);
  std::vector<uint8_t> out(count * e);
  uint64_t state = seed;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = splitmix64(&state);
    double v = (double(r >> 11) / double(1ull << 53)) * 16.0 - 8.0;
    if ((r & 15) == 0) v *= 1e-7;
    if ((r & 63) == 1) v = double(int64_t(r >> 58) - 32);
    uint8_t* p = &out[i * e];
    switch (dtype) {
      case DataType::kFloat32: {
        const float f = float(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kFloat16: {
        const uint16_t h = floatToHalf(float(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t b = floatToBf16(float(v));
        std::memcpy(p, &b, 2);
        break;
      }
      case DataType::kComplex64: {  // pairs of the f32 values above (random bits could be NaNs)
        const float re = float(v), im = float(-v * 0.5);
        std::memcpy(p, &re, 4);
        std::memcpy(p + 4, &im, 4);
        break;
      }
      case DataType::kComplex128: {
        const double im = -v * 0.5;
        std::memcpy(p, &v, 8);
        std::memcpy(p + 8, &im, 8);
        break;
      }
      default:
        std::memcpy(p, &r, e);
        break;
    }
  }
  return out;
}

// Any bit pattern, plus the special values of the floating types at fixed positions.
std::vector<uint8_t> anyElements(DataType dtype, size_t count, uint64_t seed) {
  std::vector<uint8_t> out = randomBytes(count * dataTypeSize(dtype), seed);
  std::vector<uint64_t> specials;
  switch (dtype) {
    case DataType::kFloat32:
      specials = {0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0x80000000, 0x00000001, 0x7f7fffff, 0};
      break;
    case DataType::kFloat64:
      specials = {0x7ff0000000000000ull,
                  0xfff0000000000000ull,
                  0x7ff8000000000000ull,
                  0x8000000000000000ull,
                  0x1ull,
                  0x7fefffffffffffffull,
                  0};
      break;
    case DataType::kFloat16:
      specials = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x8000, 0x0001, 0x7bff, 0x03ff, 0};
      break;
    case DataType::kBFloat16:
      specials = {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x8000, 0x0001, 0x7f7f, 0};
      break;
    default:
      break;
  }
  const size_t e = dataTypeSize(dtype);
  uint64_t state = seed ^ 0x5555;
  for (size_t i = 0; i < count && !specials.empty(); ++i) {
    if (splitmix64(&state) % 8 == 0)
      std::memcpy(&out[i * e], &specials[splitmix64(&state) % specials.size()], e);
  }
  return out;
}

bool isNan(DataType dtype, const uint8_t* p) {
  // Complex: a NaN in either part (a NaN result's payload may differ between host and device).
  if (dtype == DataType::kComplex64) return isNan(DataType::kFloat32, p) || isNan(DataType::kFloat32, p + 4);
  if (dtype == DataType::kComplex128) return isNan(DataType::kFloat64, p) || isNan(DataType::kFloat64, p + 8);
  uint64_t v = 0;
  std::memcpy(&v, p, dataTypeSize(dtype));
  switch (dtype) {
    case DataType::kFloat32:
      return (v & 0x7fffffffull) > 0x7f800000ull;
    case DataType::kFloat64:
      return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    case DataType::kFloat16:
      return (v & 0x7fff) > 0x7c00;
    case DataType::kBFloat16:
      return (v & 0x7fff) > 0x7f80;
    default:
      return false;
  }
}

// Index of the first element that differs, or SIZE_MAX. With `nanEqual`, two NaNs of any payload match.
size_t firstDifference(DataType dtype, const uint8_t* a, const uint8_t* b, size_t count, bool nanEqual) {
  const size_t e = dataTypeSize(dtype);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(a + i * e, b + i * e, e) == 0) continue;
    if (nanEqual && isNan(dtype, a + i * e) && isNan(dtype, b + i * e)) continue;
    return i;
  }
  return SIZE_MAX;
}

std::string hexElement(DataType dtype, const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, dataTypeSize(dtype));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string describe(const Trailer& t) {
  char buf[256];
  std::snprintf(
      buf, sizeof(buf),
      "{magic %08x crc %08x seq %llu step %u slice %u column %u bytes %u attempt %u flags %u tcrc %08x}",
      t.magic, t.payloadCrc, static_cast<unsigned long long>(t.seq), t.step, t.slice, t.column,
      t.payloadBytes, t.attempt, t.flags, t.trailerCrc);
  return buf;
}

// ---- Fixture ---------------------------------------------------------------------------------------------

// Tests skip (from SetUp) when no CUDA device is usable.
class DeviceExecutorTest : public ::testing::Test {
 public:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_CUDA(cudaSetDevice(0));
    ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ASSERT_STATUS_OK(DevicePool::create(0, &pool_));
    pinned_ = std::make_unique<PinnedHostPool>();
    exec_ = std::make_unique<DeviceExecutor>(pool_.get(), pinned_.get(), stream_);
  }

  void TearDown() override {
    exec_.reset();
    if (stream_ != nullptr) {
      for (void* p : allocations_) EXPECT_TRUE(pool_->free(p, stream_).isOk());
      EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(stream_));
      EXPECT_EQ(cudaSuccess, cudaStreamDestroy(stream_));
    }
    pinned_.reset();
    pool_.reset();
  }

  // Device memory from the pool, freed in TearDown (nullptr for 0 bytes).
  uint8_t* deviceAlloc(size_t bytes) {
    void* p = nullptr;
    const Status s = pool_->allocate(bytes, stream_, &p);
    EXPECT_TRUE(s.isOk()) << s.toString();
    if (p != nullptr) allocations_.push_back(p);
    return static_cast<uint8_t*>(p);
  }
  // Frees (stream-ordered) everything deviceAlloc handed out so far.
  void releaseAllocations() {
    for (void* p : allocations_) EXPECT_TRUE(pool_->free(p, stream_).isOk());
    allocations_.clear();
  }

  void upload(void* dev, const void* host, size_t bytes) {
    if (bytes != 0) ASSERT_CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_));
  }
  // Synchronous.
  void download(void* host, const void* dev, size_t bytes) {
    if (bytes != 0) ASSERT_CUDA(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_));
    ASSERT_CUDA(cudaStreamSynchronize(stream_));
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DevicePool> pool_;
  std::unique_ptr<PinnedHostPool> pinned_;
  std::unique_ptr<DeviceExecutor> exec_;
  std::vector<void*> allocations_;
};

// ---- verifyAndApply: device vs host
// ------------------------------------------------------------------------

enum class Tamper {
  kNone,
  kCorruptPayload,  // a bit of the payload flipped after sealing
  kStaleStep,       // a valid trailer of another step
  kStaleSeq,        // ... of another collective
  kStaleAttempt,    // ... of another repair round
  kSizeMismatch,    // a valid trailer announcing another size
  kBadMagic,
  kBadTrailerCrc,
  kUnknownFlag,  // a sealed trailer with a flag bit the protocol does not define
  kPoisoned,     // intact, poisoned by the sender
  kVersionSkew,  // intact, of another trailer format version (a rank of another build)
};
const Tamper kTampers[] = {Tamper::kCorruptPayload, Tamper::kStaleStep,    Tamper::kStaleSeq,
                           Tamper::kStaleAttempt,   Tamper::kSizeMismatch, Tamper::kBadMagic,
                           Tamper::kBadTrailerCrc,  Tamper::kUnknownFlag,  Tamper::kPoisoned,
                           Tamper::kVersionSkew};

const char* tamperName(Tamper t) {
  switch (t) {
    case Tamper::kNone:
      return "none";
    case Tamper::kCorruptPayload:
      return "corrupt payload";
    case Tamper::kStaleStep:
      return "stale step";
    case Tamper::kStaleSeq:
      return "stale seq";
    case Tamper::kStaleAttempt:
      return "stale attempt";
    case Tamper::kSizeMismatch:
      return "size mismatch";
    case Tamper::kBadMagic:
      return "bad magic";
    case Tamper::kBadTrailerCrc:
      return "bad trailer crc";
    case Tamper::kUnknownFlag:
      return "unknown flag";
    case Tamper::kPoisoned:
      return "poisoned";
    case Tamper::kVersionSkew:
      return "version skew";
  }
  return "?";
}

SliceCheck expectedVerdict(Tamper t) {
  switch (t) {
    case Tamper::kNone:
      return SliceCheck::kOk;
    case Tamper::kCorruptPayload:
      return SliceCheck::kCorrupt;
    case Tamper::kStaleStep:
    case Tamper::kStaleSeq:
    case Tamper::kStaleAttempt:
      return SliceCheck::kStale;
    case Tamper::kSizeMismatch:
      return SliceCheck::kSizeMismatch;
    case Tamper::kBadMagic:
    case Tamper::kBadTrailerCrc:
    case Tamper::kUnknownFlag:
      return SliceCheck::kMalformed;
    case Tamper::kPoisoned:
      return SliceCheck::kPoisoned;
    case Tamper::kVersionSkew:
      return SliceCheck::kVersionSkew;
  }
  return SliceCheck::kOk;
}

struct ApplyCase {
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool reduce = true;
  bool finalStep = false;
  bool forwarded = true;
  bool inPlace = false;     // local aliases dst
  bool received = false;    // ApplyTask::inPlace: the payload arrived in dst, the slot holds only its trailer
  bool smallSlots = false;  // received: slots smaller than the payload (it never lies there)
  size_t count = 0;
  size_t dstOffset = 0;    // elements
  size_t localOffset = 0;  // elements
  int nranks = 3;
  Tamper tamper = Tamper::kNone;
  uint64_t seed = 1;

  std::string name() const {
    return std::string(dataTypeName(dtype)) + " " + (reduce ? reduceOpName(op) : "copy") +
           (finalStep ? " final" : "") + (forwarded ? " forwarded" : "") + (inPlace ? " in-place" : "") +
           (received ? " received-in-place" : "") + (smallSlots ? " small-slots" : "") + " count " +
           std::to_string(count) + " dst+" + std::to_string(dstOffset) + " local+" +
           std::to_string(localOffset) + " N=" + std::to_string(nranks) + " tamper " + tamperName(tamper);
  }
};

constexpr size_t kItems = 4;
constexpr int kSlots = 2;
constexpr int kSlotIndex = 1;
constexpr size_t kItem = 1;
constexpr size_t kNextItem = 3;

// Runs one case through both executors and compares everything they produce.
void runApplyCase(DeviceExecutorTest* t, DeviceExecutor* dev, const ApplyCase& c) {
  SCOPED_TRACE(c.name());
  t->releaseAllocations();
  const size_t e = dataTypeSize(c.dtype);
  const size_t bytes = c.count * e;
  const SliceId expected{17, 2, 5, 1, uint32_t(bytes), 0};
  const SliceId next{17, 3, 5, 1, uint32_t(bytes), 0};

  // What arrives: the payload, sealed by its sender, then tampered with.
  std::vector<uint8_t> payload = finiteElements(c.dtype, c.count, c.seed);
  SliceId sealedAs = expected;
  if (c.tamper == Tamper::kStaleStep) sealedAs.step += 2;
  if (c.tamper == Tamper::kStaleSeq) sealedAs.seq -= 1;
  if (c.tamper == Tamper::kStaleAttempt) sealedAs.attempt += 1;
  if (c.tamper == Tamper::kSizeMismatch) sealedAs.payloadBytes += uint32_t(e);
  Trailer trailer = makeTrailer(sealedAs, crc32(payload.data(), bytes),
                                c.tamper == Tamper::kPoisoned ? kTrailerPoisoned : uint16_t(0));
  if (c.tamper == Tamper::kUnknownFlag) {
    trailer.flags |= 4;
    sealTrailer(&trailer);
  }
  if (c.tamper == Tamper::kBadMagic) trailer.magic ^= 0x100;
  if (c.tamper == Tamper::kVersionSkew) {
    trailer.magic = kTrailerMagicFamily | (uint32_t('2') << 24);  // "RGT2", sealed by its sender
    sealTrailer(&trailer);
  }
  if (c.tamper == Tamper::kBadTrailerCrc) trailer.trailerCrc ^= 0x80000000u;
  if (c.tamper == Tamper::kCorruptPayload) {
    ASSERT_GT(bytes, 0u);
    payload[(c.seed * 7919) % bytes] ^= uint8_t(1u << (c.seed % 8));
  }

  // Buffers at the case's element offsets; dst starts as a recognisable pattern ("poisoned").
  const size_t span = bytes + 16 * e + 64;
  const std::vector<uint8_t> localInit = finiteElements(c.dtype, span / e, c.seed + 1);
  std::vector<uint8_t> dstInit = randomBytes(span, c.seed + 2);
  // Received in place: what arrived already lies in dst; the slot holds other bytes, which must not matter.
  std::vector<uint8_t> slotBytes = payload;
  if (c.received) {
    if (bytes) std::memcpy(dstInit.data() + c.dstOffset * e, payload.data(), bytes);
    slotBytes = randomBytes(bytes, c.seed + 3);
  }
  const size_t slotSize = c.smallSlots ? std::min<size_t>(bytes, 16) : bytes;
  std::vector<uint8_t> hostLocal = localInit, hostDst = dstInit;
  uint8_t* hDst = hostDst.data() + c.dstOffset * e;
  const uint8_t* hLocal = c.inPlace ? hDst : hostLocal.data() + c.localOffset * e;
  if (c.inPlace) std::memcpy(hDst, localInit.data() + c.localOffset * e, bytes);

  ApplyTask task;
  task.expected = expected;
  task.next = next;
  task.count = c.count;
  task.dtype = c.dtype;
  task.op = c.op;
  task.reduce = c.reduce;
  task.finalStep = c.finalStep;
  task.forwarded = c.forwarded;
  task.inPlace = c.received;
  task.nranks = c.nranks;

  // Host.
  HostExecutor host;
  ASSERT_STATUS_OK(host.prepare(kItems, kSlots, slotSize));
  if (slotSize) std::memcpy(host.slot(kSlotIndex), slotBytes.data(), slotSize);
  *host.slotTrailer(kSlotIndex) = trailer;
  ApplyTask hostTask = task;
  hostTask.dst = hDst;
  hostTask.local = hLocal;
  ASSERT_STATUS_OK(host.verifyAndApply(hostTask, kSlotIndex, kItem, kNextItem));

  // Device: the same initial contents at the same offsets.
  uint8_t* dDstBuf = t->deviceAlloc(span);
  uint8_t* dLocalBuf = t->deviceAlloc(span);
  t->upload(dDstBuf, dstInit.data(), span);
  t->upload(dLocalBuf, localInit.data(), span);
  uint8_t* dDst = dDstBuf + c.dstOffset * e;
  const uint8_t* dLocal = c.inPlace ? dDst : dLocalBuf + c.localOffset * e;
  if (c.inPlace && bytes) {
    ASSERT_CUDA(
        cudaMemcpyAsync(dDst, dLocalBuf + c.localOffset * e, bytes, cudaMemcpyDeviceToDevice, t->stream_));
  }
  ASSERT_STATUS_OK(dev->prepare(kItems, kSlots, slotSize));
  t->upload(dev->slot(kSlotIndex), slotBytes.data(), slotSize);
  t->upload(dev->slotTrailer(kSlotIndex), &trailer, sizeof(Trailer));
  ApplyTask devTask = task;
  devTask.dst = dDst;
  devTask.local = dLocal;
  ASSERT_STATUS_OK(dev->verifyAndApply(devTask, kSlotIndex, kItem, kNextItem));
  ASSERT_STATUS_OK(dev->sync());

  std::vector<uint8_t> gotDst(span);
  Trailer gotTrailers[kItems];
  t->download(gotDst.data(), dDstBuf, span);
  t->download(gotTrailers, dev->sendTrailer(0), sizeof(gotTrailers));

  // Verdicts.
  EXPECT_EQ(expectedVerdict(c.tamper), host.verdict(kItem)) << sliceCheckName(host.verdict(kItem));
  EXPECT_EQ(host.verdict(kItem), dev->verdict(kItem))
      << "host " << sliceCheckName(host.verdict(kItem)) << ", device " << sliceCheckName(dev->verdict(kItem));
  for (size_t i = 0; i < kItems; ++i) {
    if (i != kItem) {
      EXPECT_EQ(SliceCheck::kOk, dev->verdict(i)) << "item " << i;
    }
  }
  // dst, guard bytes included.
  const size_t diff = firstDifference(DataType::kUint8, hostDst.data(), gotDst.data(), span, false);
  if (diff != SIZE_MAX) {
    const size_t el = diff >= c.dstOffset * e ? (diff - c.dstOffset * e) / e : SIZE_MAX;
    const uint8_t* hp = hostDst.data() + (diff / e) * e;
    const uint8_t* dp = gotDst.data() + (diff / e) * e;
    ADD_FAILURE() << "dst differs at byte " << diff << " (element " << el << "): host "
                  << hexElement(c.dtype, hp) << ", device " << hexElement(c.dtype, dp);
  }
  if (c.tamper != Tamper::kNone) {
    EXPECT_EQ(0, std::memcmp(gotDst.data(), c.inPlace ? hostDst.data() : dstInit.data(), span))
        << "a rejected slice touched dst";
  }
  // Outgoing trailers (all of them: only nextItem may have been written).
  for (size_t i = 0; i < kItems; ++i) {
    const Trailer* h = host.sendTrailer(i);
    EXPECT_EQ(0, std::memcmp(h, &gotTrailers[i], sizeof(Trailer)))
        << "send trailer " << i << ": host " << describe(*h) << ", device " << describe(gotTrailers[i]);
  }
  if (c.forwarded) {
    const Trailer& out = gotTrailers[kNextItem];
    EXPECT_EQ(c.tamper == Tamper::kNone ? 0 : kTrailerPoisoned, out.flags);
    EXPECT_EQ(crc32(gotDst.data() + c.dstOffset * e, bytes), out.payloadCrc);
  }
}

// (dst, local) element offsets: equal alignment (16-byte vectors), and mixed ones (narrower vectors or
// single elements, depending on the element size).
const std::pair<size_t, size_t> kOffsets[] = {{0, 0}, {1, 1}, {1, 2}, {3, 0}, {2, 6}};

TEST_F(DeviceExecutorTest, ReduceMatchesHostForEveryDtypeOpSizeAndOffset) {
  uint64_t seed = 100;
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!reduceSupported(dtype, op)) continue;
      for (int finalStep = 0; finalStep < 2; ++finalStep) {
        if (finalStep && op != ReduceOp::kAvg && op != ReduceOp::kSum) continue;
        for (size_t count : kSizes) {
          for (const auto& [dstOffset, localOffset] : kOffsets) {
            for (int inPlace = 0; inPlace < 2; ++inPlace) {
              if (count == kLarge && (inPlace || dstOffset == 2)) continue;  // keep the large size quick
              ApplyCase c;
              c.dtype = dtype;
              c.op = op;
              c.finalStep = finalStep != 0;
              c.forwarded = !c.finalStep || count % 2 == 0;  // the final step is forwarded too (all-gather)
              c.inPlace = inPlace != 0;
              c.count = count;
              c.dstOffset = dstOffset;
              c.localOffset = localOffset;
              c.nranks = 3 + int(seed % 3);
              c.seed = ++seed;
              ASSERT_NO_FATAL_FAILURE(runApplyCase(this, exec_.get(), c));
              if (HasFailure()) return;  // one case's report is enough
            }
          }
        }
      }
    }
  }
}

TEST_F(DeviceExecutorTest, CopyMatchesHostForEveryDtypeSizeAndOffset) {
  uint64_t seed = 5000;
  for (DataType dtype : kAllDataTypes) {
    for (size_t count : kSizes) {
      for (const auto& [dstOffset, unused] : kOffsets) {
        for (int forwarded = 0; forwarded < 2; ++forwarded) {
          ApplyCase c;
          c.dtype = dtype;
          c.reduce = false;
          c.forwarded = forwarded != 0;
          c.count = count;
          c.dstOffset = dstOffset;
          c.seed = ++seed;
          ASSERT_NO_FATAL_FAILURE(runApplyCase(this, exec_.get(), c));
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_F(DeviceExecutorTest, RejectedSlicesGetTheHostVerdictAndLeaveDstUntouched) {
  uint64_t seed = 9000;
  for (DataType dtype : kAllDataTypes) {
    for (Tamper tamper : kTampers) {
      for (size_t count : {size_t(0), size_t(7), size_t(4099), kLarge}) {
        if (count == 0 && tamper == Tamper::kCorruptPayload) continue;  // nothing to corrupt
        if (count == kLarge && dtype != DataType::kFloat32 && dtype != DataType::kUint8) continue;
        for (int reduce = 0; reduce < 2; ++reduce) {
          if (reduce && !reduceSupported(dtype, ReduceOp::kSum)) continue;  // float8: copy-only
          ApplyCase c;
          c.dtype = dtype;
          c.op = ReduceOp::kSum;
          c.reduce = reduce != 0;
          c.forwarded = true;
          c.inPlace = reduce != 0 && count % 2 == 1;
          c.count = count;
          c.dstOffset = 1;
          c.localOffset = 1;
          c.tamper = tamper;
          c.seed = ++seed;
          ASSERT_NO_FATAL_FAILURE(runApplyCase(this, exec_.get(), c));
          if (HasFailure()) return;
        }
      }
    }
  }
}

// Received in place (ApplyTask::inPlace: all-gather, broadcast, send/recv, all-to-all): dst is verified where
// it lies and never written, the verdict and the outgoing trailer (verified CRC, or the CRC of dst poisoned)
// are the host's, for every dtype, sizes 0 to 1 Mi + 3 elements, heads of 0 to 15 bytes, slots smaller than
// the payload, and each kind of rejection.
TEST_F(DeviceExecutorTest, ReceivedInPlaceMatchesHostForEveryDtypeSizeOffsetAndVerdict) {
  const Tamper tampers[] = {Tamper::kNone,      Tamper::kCorruptPayload, Tamper::kPoisoned,
                            Tamper::kStaleStep, Tamper::kBadTrailerCrc,  Tamper::kSizeMismatch};
  uint64_t seed = 60000;
  for (DataType dtype : kAllDataTypes) {
    const size_t e = dataTypeSize(dtype);
    for (size_t count : kSizes) {
      for (size_t dstOffset : {size_t(0), size_t(1), 15 / e}) {
        for (Tamper tamper : tampers) {
          if (count == 0 && tamper == Tamper::kCorruptPayload) continue;  // nothing to corrupt
          if (count == kLarge &&
              (dstOffset != 1 || (tamper != Tamper::kNone && tamper != Tamper::kCorruptPayload)))
            continue;  // keep the large size quick
          for (int forwarded = 0; forwarded < 2; ++forwarded) {
            ApplyCase c;
            c.dtype = dtype;
            c.reduce = false;
            c.received = true;
            c.smallSlots = (seed % 2) == 0;
            c.forwarded = forwarded != 0;
            c.count = count;
            c.dstOffset = dstOffset;
            c.tamper = tamper;
            c.seed = ++seed;
            ASSERT_NO_FATAL_FAILURE(runApplyCase(this, exec_.get(), c));
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST_F(DeviceExecutorTest, ReceivedInPlaceRefusesAReduction) {
  ASSERT_STATUS_OK(exec_->prepare(4, 2, 64));
  uint8_t* dst = deviceAlloc(64);
  ApplyTask task;
  task.dst = dst;
  task.local = dst;
  task.count = 16;
  task.reduce = true;
  task.inPlace = true;
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->verifyAndApply(task, 0, 0, 1).code());
  task.reduce = false;
  task.count = 1000;  // larger than a slot: fine in place (the payload is not in the slot)
  uint8_t* big = deviceAlloc(4000);
  task.dst = big;
  ASSERT_STATUS_OK(exec_->verifyAndApply(task, 0, 0, 1));
  ASSERT_STATUS_OK(exec_->sync());
  EXPECT_EQ(SliceCheck::kMalformed, exec_->verdict(0)) << "the slot trailer is zeroed by prepare";
}

// ---- Trailers made on the device
// ---------------------------------------------------------------------------

TEST_F(DeviceExecutorTest, SealFirstAndRetagEqualTheHostTrailers) {
  const size_t sizes[] = {0, 1, 7, 15, 16, 17, 4099, kLarge};
  const size_t items = std::size(sizes) * 4;
  ASSERT_STATUS_OK(exec_->prepare(items, 2, 4096));  // sealFirst data may be larger than a slot
  const std::vector<uint8_t> host = randomBytes(kLarge + 8, 77);
  uint8_t* dev = deviceAlloc(host.size());
  upload(dev, host.data(), host.size());
  std::vector<Trailer> want(items);
  size_t item = 0;
  for (size_t size : sizes) {
    for (size_t off = 0; off < 4; ++off, ++item) {
      const SliceId id{0x123456789abcull + item, uint32_t(item), uint32_t(7 * item),
                       uint32_t(item % 5),       uint32_t(size), uint16_t(item % 3)};
      ASSERT_STATUS_OK(exec_->sealFirst(item, dev + off, id));
      want[item] = makeTrailer(id, crc32(host.data() + off, size), 0);
    }
  }
  std::vector<Trailer> got(items);
  ASSERT_STATUS_OK(exec_->sync());
  download(got.data(), exec_->sendTrailer(0), items * sizeof(Trailer));
  for (size_t i = 0; i < items; ++i) {
    EXPECT_EQ(0, std::memcmp(&want[i], &got[i], sizeof(Trailer)))
        << "item " << i << ": host " << describe(want[i]) << ", device " << describe(got[i]);
  }

  // A retransmission: new attempt, same payload CRC, resealed.
  for (size_t i = 0; i < items; ++i) {
    ASSERT_STATUS_OK(exec_->retag(i, uint16_t(i + 1)));
    want[i].attempt = uint16_t(i + 1);
    sealTrailer(&want[i]);
  }
  bool done = false;
  for (int polls = 0; !done; ++polls) {
    ASSERT_LT(polls, 100000000);
    ASSERT_STATUS_OK(exec_->syncTest(&done));
  }
  download(got.data(), exec_->sendTrailer(0), items * sizeof(Trailer));
  for (size_t i = 0; i < items; ++i) {
    EXPECT_EQ(0, std::memcmp(&want[i], &got[i], sizeof(Trailer)))
        << "retagged item " << i << ": host " << describe(want[i]) << ", device " << describe(got[i]);
    EXPECT_EQ(SliceCheck::kOk,
              checkTrailer(got[i], SliceId{want[i].seq, want[i].step, want[i].slice, want[i].column,
                                           want[i].payloadBytes, want[i].attempt}));
  }
}

// ---- copy, prepare, syncTest, fences ---------------------------------------------------------

TEST_F(DeviceExecutorTest, CopyMovesBytesOnTheStream) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(4099), size_t(3) << 20}) {
    const std::vector<uint8_t> host = randomBytes(bytes + 3, bytes);
    uint8_t* src = deviceAlloc(bytes + 3);
    uint8_t* dst = deviceAlloc(bytes + 3);
    upload(src, host.data(), bytes + 3);
    ASSERT_STATUS_OK(exec_->copy(dst + 1, src + 3, bytes));
    ASSERT_STATUS_OK(exec_->sync());
    std::vector<uint8_t> got(bytes);
    download(got.data(), dst + 1, bytes);
    EXPECT_EQ(std::vector<uint8_t>(host.begin() + 3, host.begin() + 3 + long(bytes)), got) << bytes;
  }
}

TEST_F(DeviceExecutorTest, PrepareGrowsKeepsSlotsAlignedAndResetsVerdicts) {
  // A failing collective, then a larger and a smaller one: verdicts start at kOk every time, slots stay
  // 256-byte aligned and the storage is reused.
  ApplyCase c;
  c.dtype = DataType::kFloat16;
  c.count = 4099;
  c.tamper = Tamper::kCorruptPayload;
  ASSERT_NO_FATAL_FAILURE(runApplyCase(this, exec_.get(), c));
  EXPECT_EQ(SliceCheck::kCorrupt, exec_->verdict(kItem));
  const std::vector<std::tuple<size_t, int, size_t>> shapes = {
      {64, 3, 100000}, {2, 2, 12}, {kItems, kSlots, 5000}};
  for (const auto& [items, slots, slotBytes] : shapes) {
    ASSERT_STATUS_OK(exec_->prepare(items, slots, slotBytes));
    ASSERT_STATUS_OK(exec_->sync());
    for (size_t i = 0; i < items; ++i) EXPECT_EQ(SliceCheck::kOk, exec_->verdict(i));
    for (int s = 0; s < slots; ++s) {
      EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(exec_->slot(s)) % 256);
      if (s > 0) {
        EXPECT_GE(static_cast<uint8_t*>(exec_->slot(s)) - static_cast<uint8_t*>(exec_->slot(s - 1)),
                  static_cast<ptrdiff_t>(slotBytes));
      }
    }
    std::vector<Trailer> trailers(items);
    download(trailers.data(), exec_->sendTrailer(0), items * sizeof(Trailer));
    for (const Trailer& t : trailers) EXPECT_EQ(0u, t.magic);
  }
  c.tamper = Tamper::kNone;
  c.seed = 2;
  ASSERT_NO_FATAL_FAILURE(runApplyCase(this, exec_.get(), c));
}

TEST_F(DeviceExecutorTest, RejectsOutOfRangeArguments) {
  ASSERT_STATUS_OK(exec_->prepare(4, 2, 64));
  ApplyTask task;
  task.count = 16;
  task.dtype = DataType::kFloat32;
  task.reduce = false;
  uint8_t* dst = deviceAlloc(64);
  task.dst = dst;
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->verifyAndApply(task, 2, 0, 0).code());  // slot
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->verifyAndApply(task, 0, 4, 0).code());  // item
  task.forwarded = true;
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->verifyAndApply(task, 0, 0, 4).code());  // next item
  task.count = 1000;                                                                     // > slot
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->verifyAndApply(task, 0, 0, 1).code());
  task.count = 3;
  task.dst = dst + 1;  // not element aligned
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->verifyAndApply(task, 0, 0, 1).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->sealFirst(4, dst, SliceId{}).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->retag(4, 1).code());
  ASSERT_STATUS_OK(exec_->sync());
}

TEST_F(DeviceExecutorTest, FencesOrderTheCollectiveAgainstTheCallersStream) {
  cudaStream_t caller = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking));
  // The caller writes the input on its stream; the collective (a copy on the communication stream) reads
  // it after beforeCollective; the caller reads the result on its stream after orderCaller.
  const size_t bytes = size_t(16) << 20;
  uint8_t* in = deviceAlloc(bytes);
  uint8_t* out = deviceAlloc(bytes);
  uint8_t* back = deviceAlloc(bytes);
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  for (int round = 0; round < 3; ++round) {
    ASSERT_CUDA(cudaMemsetAsync(in, 0x40 + round, bytes, caller));
    std::unique_ptr<Executor::Fence> fence;
    ASSERT_STATUS_OK(exec_->makeFence(caller, &fence));
    ASSERT_NE(nullptr, fence);
    ASSERT_STATUS_OK(fence->beforeCollective());
    ASSERT_STATUS_OK(exec_->copy(out, in, bytes));
    ASSERT_STATUS_OK(fence->afterCollective());
    ASSERT_STATUS_OK(fence->orderCaller());
    ASSERT_CUDA(cudaMemcpyAsync(back, out, bytes, cudaMemcpyDeviceToDevice, caller));
    std::vector<uint8_t> got(bytes);
    ASSERT_CUDA(cudaMemcpyAsync(got.data(), back, bytes, cudaMemcpyDeviceToHost, caller));
    ASSERT_CUDA(cudaStreamSynchronize(caller));
    EXPECT_EQ(size_t(std::count(got.begin(), got.end(), uint8_t(0x40 + round))), bytes) << "round " << round;
  }
  // A stream being captured into a graph is refused.
  cudaStream_t capturing = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeRelaxed));
  std::unique_ptr<Executor::Fence> fence;
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->makeFence(capturing, &fence).code());
  EXPECT_EQ(nullptr, fence);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamEndCapture(capturing, &graph));
  if (graph != nullptr) ASSERT_CUDA(cudaGraphDestroy(graph));
  ASSERT_CUDA(cudaStreamDestroy(capturing));
  ASSERT_CUDA(cudaStreamDestroy(caller));
}

// ---- Fault injection on the stream: corruptDevice / corruptReceived against the host ---------------------

FaultOptions faultMode(FaultMode mode, uint64_t seed) {
  FaultOptions o;
  o.mode = mode;
  o.probability = 1.0;
  o.seed = seed;
  o.bits = 64;       // the most edits a plan holds
  o.burstBits = 32;  // the longest burst
  return o;
}
const FaultMode kSliceFaultModes[] = {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst,
                                      FaultMode::kGarbage, FaultMode::kTrailer,  FaultMode::kRetransmit};

// corruptDevice on a payload at `offset` bytes into its buffer (guard bytes around it) and on a trailer,
// against applyCorruptionPlan on the same bytes.
void runCorruptCase(DeviceExecutorTest* t, const CorruptionPlan& plan, size_t bytes, size_t offset,
                    uint64_t seed) {
  SCOPED_TRACE("bytes " + std::to_string(bytes) + " offset " + std::to_string(offset) + " target " +
               std::to_string(int(plan.target)) + (plan.garbage ? " garbage" : "") + " edits " +
               std::to_string(plan.edits));
  t->releaseAllocations();
  const size_t span = bytes + 32;
  const std::vector<uint8_t> init = randomBytes(span, seed);
  const Trailer trailerInit = makeTrailer(SliceId{5, 1, 2, 0, uint32_t(bytes), 0}, 0x12345678u, 0);
  std::vector<uint8_t> want = init;
  Trailer wantTrailer = trailerInit;
  ASSERT_TRUE(applyCorruptionPlan(plan, want.data() + offset, &wantTrailer) == plan.damages());

  uint8_t* buf = t->deviceAlloc(span);
  auto* trailer = reinterpret_cast<Trailer*>(t->deviceAlloc(sizeof(Trailer)));
  t->upload(buf, init.data(), span);
  t->upload(trailer, &trailerInit, sizeof(Trailer));
  ASSERT_STATUS_OK(corruptDevice(plan, buf + offset, bytes, trailer, t->stream_));
  std::vector<uint8_t> got(span);
  Trailer gotTrailer;
  t->download(got.data(), buf, span);
  t->download(&gotTrailer, trailer, sizeof(Trailer));
  const size_t diff = firstDifference(DataType::kUint8, want.data(), got.data(), span, false);
  if (diff != SIZE_MAX) {
    ADD_FAILURE() << "byte " << diff << " (payload byte " << (long long)(diff) - (long long)(offset)
                  << "): host " << int(want[diff]) << ", device " << int(got[diff]);
  }
  EXPECT_EQ(0, std::memcmp(&wantTrailer, &gotTrailer, sizeof(Trailer)))
      << "host " << describe(wantTrailer) << ", device " << describe(gotTrailer);
}

TEST_F(DeviceExecutorTest, CorruptDeviceMatchesTheHostForEveryModeSizeAndOffset) {
  std::vector<size_t> sizes = {0, 1, 2, 7, 15, 16, 17, 31, 33, 4099, kLarge};
  const char* cap = std::getenv("RINGGUARD_TEST_MAX_BYTES");
  if (cap == nullptr || std::strtoull(cap, nullptr, 10) >= (size_t(64) << 20))
    sizes.push_back((size_t(64) << 20) + 3);
  uint64_t seed = 70000;
  for (FaultMode mode : kSliceFaultModes) {
    SCOPED_TRACE(faultModeName(mode));
    const FaultInjector inj(faultMode(mode, 3));
    for (size_t bytes : sizes) {
      const bool large = bytes >= kLarge;
      for (size_t offset = 0; offset < 16; offset += large ? 5 : 1) {
        for (int slice = 0; slice < (large ? 2 : 4); ++slice) {
          const CorruptionPlan plan = inj.plan(11, 2, slice, 1, int(offset % 3), bytes);
          ASSERT_NO_FATAL_FAILURE(runCorruptCase(this, plan, bytes, offset, ++seed));
          if (HasFailure()) return;
        }
      }
    }
  }
  // Garbage whose byte 0 already holds what the garbage would put there: still changed, as on the host.
  const FaultInjector garbage(faultMode(FaultMode::kGarbage, 9));
  for (size_t bytes : {size_t(1), size_t(16), size_t(100)}) {
    for (size_t offset : {size_t(0), size_t(3)}) {
      const CorruptionPlan plan = garbage.plan(1, 0, 0, 0, 0, bytes);
      releaseAllocations();
      uint8_t* p = deviceAlloc(bytes + 16);
      std::vector<uint8_t> init = randomBytes(bytes, bytes);
      init[0] = static_cast<uint8_t>(corruptionGarbageWord(plan.seed, 0));
      std::vector<uint8_t> want = init;
      applyCorruptionPlan(plan, want.data(), nullptr);
      ASSERT_NE(want[0], init[0]);
      upload(p + offset, init.data(), bytes);
      ASSERT_STATUS_OK(corruptDevice(plan, p + offset, bytes, nullptr, stream_));
      std::vector<uint8_t> got(bytes);
      download(got.data(), p + offset, bytes);
      EXPECT_EQ(want, got) << bytes << " bytes at offset " << offset;
    }
  }
}

// Through the executors: the slot's payload or an in-place receive's dst, and the slot's trailer, damaged
// exactly as HostExecutor::corruptReceived damages them.
TEST_F(DeviceExecutorTest, CorruptReceivedMatchesTheHostExecutor) {
  const size_t bytes = 4099;
  uint64_t seed = 80000;
  for (FaultMode mode : kSliceFaultModes) {
    SCOPED_TRACE(faultModeName(mode));
    const FaultInjector inj(faultMode(mode, 4));
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      releaseAllocations();
      const std::vector<uint8_t> payload = randomBytes(bytes, ++seed);
      const Trailer trailer =
          makeTrailer(SliceId{2, 3, 1, 0, uint32_t(bytes), 0}, crc32(payload.data(), bytes), 0);
      const CorruptionPlan plan = inj.plan(2, 3, 1, 0, 0, bytes);
      ASSERT_TRUE(plan.damages());

      HostExecutor host;
      ASSERT_STATUS_OK(host.prepare(kItems, kSlots, bytes));
      std::vector<uint8_t> hostDst = payload;
      std::memcpy(host.slot(kSlotIndex), payload.data(), bytes);
      *host.slotTrailer(kSlotIndex) = trailer;
      ASSERT_STATUS_OK(host.corruptReceived(kSlotIndex, inPlace ? hostDst.data() : nullptr, bytes, plan));

      ASSERT_STATUS_OK(exec_->prepare(kItems, kSlots, bytes));
      uint8_t* dDst = deviceAlloc(bytes + 1) + 1;  // an unaligned in-place payload
      upload(dDst, payload.data(), bytes);
      upload(exec_->slot(kSlotIndex), payload.data(), bytes);
      upload(exec_->slotTrailer(kSlotIndex), &trailer, sizeof(Trailer));
      ASSERT_STATUS_OK(exec_->corruptReceived(kSlotIndex, inPlace ? dDst : nullptr, bytes, plan));
      ASSERT_STATUS_OK(exec_->sync());
      std::vector<uint8_t> gotSlot(bytes), gotDst(bytes);
      Trailer gotTrailer;
      download(gotSlot.data(), exec_->slot(kSlotIndex), bytes);
      download(gotDst.data(), dDst, bytes);
      download(&gotTrailer, exec_->slotTrailer(kSlotIndex), sizeof(Trailer));
      EXPECT_EQ(0, std::memcmp(host.slot(kSlotIndex), gotSlot.data(), bytes)) << "slot payload";
      EXPECT_EQ(hostDst, gotDst) << "in-place payload";
      EXPECT_EQ(0, std::memcmp(host.slotTrailer(kSlotIndex), &gotTrailer, sizeof(Trailer)));
      // And the verify that follows rejects it, on both.
      ApplyTask task;
      task.expected = SliceId{2, 3, 1, 0, uint32_t(bytes), 0};
      task.count = bytes;
      task.dtype = DataType::kUint8;
      task.inPlace = inPlace != 0;
      std::vector<uint8_t> hostOut(bytes);
      task.dst = inPlace ? hostDst.data() : hostOut.data();
      ASSERT_STATUS_OK(host.verifyAndApply(task, kSlotIndex, kItem, kNextItem));
      uint8_t* dOut = deviceAlloc(bytes);
      task.dst = inPlace ? dDst : dOut;
      ASSERT_STATUS_OK(exec_->verifyAndApply(task, kSlotIndex, kItem, kNextItem));
      ASSERT_STATUS_OK(exec_->sync());
      EXPECT_NE(SliceCheck::kOk, host.verdict(kItem));
      EXPECT_EQ(host.verdict(kItem), exec_->verdict(kItem));
    }
  }
  // Out of range, or a plan for another size.
  const CorruptionPlan plan = FaultInjector(faultMode(FaultMode::kBitFlip, 1)).plan(0, 0, 0, 0, 0, 64);
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->corruptReceived(kSlots, nullptr, 64, plan).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, exec_->corruptReceived(0, nullptr, 65, plan).code());
  ASSERT_STATUS_OK(exec_->sync());
}

// corruptReceived enqueues and returns: with the stream held behind an event that a host callback on another
// stream gates, it returns at once (the old host round trip synchronised the stream and would wait forever),
// the stream is still busy, and once released the damage is there.
TEST_F(DeviceExecutorTest, CorruptReceivedIsStreamOrderedAndNeverWaits) {
  const size_t bytes = size_t(1) << 20;
  ASSERT_STATUS_OK(exec_->prepare(kItems, kSlots, bytes));
  const std::vector<uint8_t> payload = randomBytes(bytes, 5);
  upload(exec_->slot(0), payload.data(), bytes);
  const CorruptionPlan plan = FaultInjector(faultMode(FaultMode::kGarbage, 6)).plan(0, 0, 0, 0, 0, bytes);
  // Warm-up on another slot: loading a kernel lazily (CUDA_MODULE_LOADING=LAZY) may synchronise the context,
  // which the gated stream below would turn into a wait.
  ASSERT_STATUS_OK(exec_->corruptReceived(1, nullptr, bytes, plan));
  ASSERT_STATUS_OK(exec_->sync());

  cudaStream_t gate = nullptr;
  cudaEvent_t opened = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&gate, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaEventCreateWithFlags(&opened, cudaEventDisableTiming));
  static std::atomic<bool> release;
  release = false;
  ASSERT_CUDA(cudaLaunchHostFunc(
      gate,
      [](void*) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!release.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      },
      nullptr));
  ASSERT_CUDA(cudaEventRecord(opened, gate));
  ASSERT_STATUS_OK(exec_->waitFor(opened));

  const auto start = std::chrono::steady_clock::now();
  const Status st = exec_->corruptReceived(0, nullptr, bytes, plan);
  const auto took = std::chrono::steady_clock::now() - start;
  const cudaError_t busy = cudaStreamQuery(stream_);
  (void)cudaGetLastError();  // cudaErrorNotReady is no error: keep it from surfacing at a later launch check
  release = true;
  ASSERT_STATUS_OK(st);
  EXPECT_LT(took, std::chrono::seconds(5)) << "corruptReceived waited for the stream";
  EXPECT_EQ(cudaErrorNotReady, busy) << "the stream was not held behind the gate";
  ASSERT_STATUS_OK(exec_->sync());
  std::vector<uint8_t> want = payload, got(bytes);
  applyCorruptionPlan(plan, want.data(), nullptr);
  download(got.data(), exec_->slot(0), bytes);
  EXPECT_EQ(want, got);
  ASSERT_CUDA(cudaStreamSynchronize(gate));
  ASSERT_CUDA(cudaEventDestroy(opened));
  ASSERT_CUDA(cudaStreamDestroy(gate));
}

// ---- Argument checks that run without a GPU (ctest gpu_kernels_nogpu, on CI too) ------------------------

TEST(NoGpuDeviceLaunchers, CorruptDeviceRefusesPlansThatDoNotFit) {
  auto* fake = reinterpret_cast<uint8_t*>(uintptr_t(0x1000));
  auto* fakeTrailer = reinterpret_cast<Trailer*>(uintptr_t(0x2000));
  EXPECT_TRUE(corruptDevice(CorruptionPlan{}, nullptr, 0, nullptr, nullptr).isOk()) << "nothing to do";
  const CorruptionPlan flip = FaultInjector(faultMode(FaultMode::kBitFlip, 1)).plan(0, 0, 0, 0, 0, 64);
  EXPECT_EQ(StatusCode::kInvalidArgument, corruptDevice(flip, fake, 63, fakeTrailer, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, corruptDevice(flip, nullptr, 64, fakeTrailer, nullptr).code());
  CorruptionPlan outside = flip;
  outside.offset[0] = 64;
  EXPECT_EQ(StatusCode::kInvalidArgument, corruptDevice(outside, fake, 64, fakeTrailer, nullptr).code());
  const CorruptionPlan trailer = FaultInjector(faultMode(FaultMode::kTrailer, 1)).plan(0, 0, 0, 0, 0, 64);
  EXPECT_EQ(StatusCode::kInvalidArgument, corruptDevice(trailer, fake, 64, nullptr, nullptr).code());
  const CorruptionPlan garbage = FaultInjector(faultMode(FaultMode::kGarbage, 1)).plan(0, 0, 0, 0, 0, 64);
  EXPECT_EQ(StatusCode::kInvalidArgument, corruptDevice(garbage, nullptr, 64, fakeTrailer, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, corruptDevice(garbage, fake, 65, fakeTrailer, nullptr).code());
}

TEST(NoGpuDeviceLaunchers, VerifyCopyCrcAndInPlaceRefuseBadArguments) {
  auto* p = reinterpret_cast<uint8_t*>(uintptr_t(0x10000));
  auto* word = reinterpret_cast<uint32_t*>(uintptr_t(0x20000));
  DeviceApply a;
  a.slotTrailer = reinterpret_cast<const Trailer*>(uintptr_t(0x30000));
  a.payloadCrc = word;
  a.verdictWord = word + 1;
  a.dst = p;
  a.slot = p + 4096;
  a.count = 256;
  a.reduce = false;
  DeviceApply reduce = a;
  reduce.reduce = true;
  reduce.local = p;
  EXPECT_EQ(StatusCode::kInvalidArgument,
            verifyCopyCrcDevice(reduce, word + 2, word + 4, 64, nullptr).code());
  DeviceApply noVerdict = a;
  noVerdict.verdictWord = nullptr;
  EXPECT_EQ(StatusCode::kInvalidArgument,
            verifyCopyCrcDevice(noVerdict, word + 2, word + 4, 64, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, verifyCopyCrcDevice(a, nullptr, word + 4, 64, nullptr).code());
  DeviceApply noTrailer = a;
  noTrailer.slotTrailer = nullptr;
  EXPECT_EQ(StatusCode::kInvalidArgument,
            verifyCopyCrcDevice(noTrailer, word + 2, word + 4, 64, nullptr).code());
  DeviceVerify v;
  EXPECT_EQ(StatusCode::kInvalidArgument, verifyInPlaceDevice(v, nullptr).code());
  v.slotTrailer = a.slotTrailer;
  EXPECT_EQ(StatusCode::kInvalidArgument, verifyInPlaceDevice(v, nullptr).code()) << "no payload CRC";
  uint32_t out = 0;
  EXPECT_EQ(StatusCode::kInvalidArgument,
            crc32DeviceUnlessOk(p, 64, nullptr, word, &out, nullptr, 0, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            crc32DeviceUnlessOk(p, 64, word, nullptr, &out, nullptr, 0, nullptr).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            crc32DeviceUnlessOk(p, 1 << 20, word, word, &out, nullptr, 0, nullptr).code())
      << "no scratch";
}

// ---- scratch
// ------------------------------------------------------------------------------------------------

TEST_F(DeviceExecutorTest, ScratchIsDeviceMemoryThatOnlyGrows) {
  void* p = nullptr;
  ASSERT_STATUS_OK(exec_->scratch(0, &p));
  void* q = nullptr;
  ASSERT_STATUS_OK(exec_->scratch(4099, &q));
  ASSERT_NE(nullptr, q);
  ASSERT_CUDA(cudaMemsetAsync(q, 0x5a, 4099, stream_));
  void* r = nullptr;
  ASSERT_STATUS_OK(exec_->scratch(100, &r));
  EXPECT_EQ(q, r) << "a smaller request keeps the block";
  std::vector<uint8_t> got(4099);
  download(got.data(), r, 4099);
  EXPECT_EQ(size_t(std::count(got.begin(), got.end(), uint8_t(0x5a))), got.size());
  void* big = nullptr;
  ASSERT_STATUS_OK(exec_->scratch(size_t(3) << 20, &big));
  ASSERT_CUDA(cudaMemsetAsync(big, 1, size_t(3) << 20, stream_));  // all of it is ours
  void* again = nullptr;
  ASSERT_STATUS_OK(exec_->prepare(kItems, kSlots, 64));
  ASSERT_STATUS_OK(exec_->scratch(size_t(1) << 20, &again));
  EXPECT_EQ(big, again) << "never shrunk";
  ASSERT_STATUS_OK(exec_->sync());  // the stream-ordered allocation exists once the stream got there
  cudaPointerAttributes attr{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attr, again));
  EXPECT_EQ(cudaMemoryTypeDevice, attr.type);
  ASSERT_STATUS_OK(exec_->sync());
}

// ---- verifyApplyCrcDevice: apply and the CRC of dst in one pass -----------------------------------------

struct FusedCase {
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool reduce = true;
  bool finalStep = false;
  bool inPlace = false;
  bool corrupt = false;  // a payload bit flipped after sealing: kCorrupt, dst untouched
  size_t count = 0;
  size_t offset = 0;      // elements, of dst, local and slot alike
  size_t slotShift = 0;   // extra elements of the slot only: unequal alignment, the two-pass path
  bool copyPath = false;  // verifyCopyCrcDevice (the forwarded copy; reduce false) instead
  uint64_t seed = 1;

  std::string name() const {
    return std::string(dataTypeName(dtype)) + " " + (reduce ? reduceOpName(op) : "copy") +
           (copyPath ? " (copy path)" : "") + (finalStep ? " final" : "") + (inPlace ? " in-place" : "") +
           (corrupt ? " corrupt" : "") + " count " + std::to_string(count) + " offset " +
           std::to_string(offset) + " slot+" + std::to_string(slotShift);
  }
};

// Runs verifyApplyCrcDevice directly and checks dst (guard bytes included), the verdict and the CRC
// against the host; returns whether the case ran fused.
bool runFusedCase(DeviceExecutorTest* t, const FusedCase& c) {
  SCOPED_TRACE(c.name());
  t->releaseAllocations();
  const size_t e = dataTypeSize(c.dtype);
  const size_t bytes = c.count * e;
  const size_t span = bytes + 64;
  const int nranks = 3;
  const SliceId id{9, 1, 2, 0, uint32_t(bytes), 0};

  std::vector<uint8_t> payload = finiteElements(c.dtype, c.count, c.seed);
  const Trailer trailer = makeTrailer(id, crc32(payload.data(), bytes), 0);
  if (c.corrupt) payload[(c.seed * 7919) % bytes] ^= 0x10;   // after sealing: the CRCs no longer match
  const uint32_t payloadCrc = crc32(payload.data(), bytes);  // what crc32Device computes of the slot
  const std::vector<uint8_t> local = finiteElements(c.dtype, c.count, c.seed + 1);
  const std::vector<uint8_t> dstInit = randomBytes(span, c.seed + 2);

  // Host: what dst must hold afterwards.
  std::vector<uint8_t> want = dstInit;
  uint8_t* wDst = want.data() + c.offset * e;
  if (c.inPlace && bytes) std::memcpy(wDst, local.data(), bytes);
  if (!c.corrupt && bytes) {
    if (c.reduce) {
      reduceHost(c.dtype, c.op, wDst, local.data(), payload.data(), c.count, c.finalStep, nranks);
    } else {
      std::memcpy(wDst, payload.data(), bytes);
    }
  }

  // Device (the pool hands out blocks aligned to at least 256 bytes).
  uint8_t* dDstBuf = t->deviceAlloc(span);
  uint8_t* dLocalBuf = t->deviceAlloc(span);
  uint8_t* dSlotBuf = t->deviceAlloc(span + 16 * e);
  auto* words = reinterpret_cast<uint32_t*>(t->deviceAlloc(sizeof(Trailer) + 16 + 4096));
  auto* dTrailer = reinterpret_cast<Trailer*>(words);
  uint32_t* dPayloadCrc = words + sizeof(Trailer) / 4;
  uint32_t* dVerdict = dPayloadCrc + 1;
  uint32_t* dDstCrc = dPayloadCrc + 2;
  void* scratch = dPayloadCrc + 4;
  uint8_t* dDst = dDstBuf + c.offset * e;
  uint8_t* dSlot = dSlotBuf + (c.offset + c.slotShift) * e;
  const uint8_t* dLocal = c.inPlace ? dDst : dLocalBuf + c.offset * e;
  t->upload(dDstBuf, dstInit.data(), span);
  if (c.inPlace) {
    t->upload(dDst, local.data(), bytes);
  } else {
    t->upload(dLocalBuf + c.offset * e, local.data(), bytes);
  }
  t->upload(dSlot, payload.data(), bytes);
  t->upload(dTrailer, &trailer, sizeof(Trailer));
  t->upload(dPayloadCrc, &payloadCrc, 4);

  DeviceApply a;
  a.slotTrailer = dTrailer;
  a.payloadCrc = dPayloadCrc;
  a.expected = id;
  a.verdictWord = dVerdict;
  a.dst = dDst;
  a.local = c.reduce ? dLocal : nullptr;
  a.slot = dSlot;
  a.count = c.count;
  a.dtype = c.dtype;
  a.op = c.op;
  a.reduce = c.reduce;
  a.finalStep = c.finalStep;
  a.nranks = nranks;
  const size_t scratchBytes = crc32DeviceScratchBytes(bytes);
  EXPECT_LE(scratchBytes, 4096u);
  const bool fused = verifyApplyCrcFuses(a);
  // One pass when the slot is as aligned modulo 16 as dst (a shift of whole 16-byte complex128 elements
  // keeps it so).
  EXPECT_EQ((c.slotShift * e) % 16 == 0, fused);
  const Status st = c.copyPath ? verifyCopyCrcDevice(a, dDstCrc, scratch, scratchBytes, t->stream_)
                               : verifyApplyCrcDevice(a, dDstCrc, scratch, scratchBytes, t->stream_);
  EXPECT_TRUE(st.isOk()) << st.toString();

  std::vector<uint8_t> got(span);
  uint32_t verdict = 0, dstCrc = 0;
  t->download(got.data(), dDstBuf, span);
  t->download(&verdict, dVerdict, 4);
  t->download(&dstCrc, dDstCrc, 4);
  EXPECT_EQ(uint32_t(c.corrupt ? SliceCheck::kCorrupt : SliceCheck::kOk), verdict);
  const size_t diff = firstDifference(DataType::kUint8, want.data(), got.data(), span, false);
  if (diff != SIZE_MAX) {
    ADD_FAILURE() << "dst differs at byte " << diff << " (buffer offset " << c.offset * e << "): host "
                  << hexElement(c.dtype, want.data() + (diff / e) * e) << ", device "
                  << hexElement(c.dtype, got.data() + (diff / e) * e);
  }
  EXPECT_EQ(crc32(want.data() + c.offset * e, bytes), dstCrc) << "CRC of dst after the apply";
  return fused;
}

TEST_F(DeviceExecutorTest, VerifyApplyCrcIsOnePassWhenEquallyAlignedAndMatchesTheHost) {
  // Sizes around the 16-byte pieces, a multi-block one, and one that needs more segments than SMs.
  const size_t sizes[] = {0, 1, 7, 15, 16, 17, 4099, kLarge};
  uint64_t seed = 30000;
  int fused = 0, twoPass = 0;
  for (DataType dtype : kAllDataTypes) {
    const size_t e = dataTypeSize(dtype);
    for (ReduceOp op : kAllReduceOps) {
      for (int reduce = 0; reduce < 2; ++reduce) {
        if (!reduce && op != ReduceOp::kSum) continue;  // a copy has no op
        if (reduce && !reduceSupported(dtype, op)) continue;
        for (size_t count : sizes) {
          for (size_t offset : {size_t(0), size_t(1), 15 / e}) {  // heads of 0, e and up to 15 bytes
            for (size_t slotShift : {size_t(0), size_t(1)}) {
              if (slotShift && (count == kLarge || op != ReduceOp::kSum)) continue;
              FusedCase c;
              c.dtype = dtype;
              c.op = op;
              c.reduce = reduce != 0;
              c.finalStep = op == ReduceOp::kAvg;
              c.inPlace = reduce && count % 2 == 1;
              c.count = count;
              c.offset = offset;
              c.slotShift = slotShift;
              c.seed = ++seed;
              (runFusedCase(this, c) ? fused : twoPass)++;
              if (HasFailure()) return;
              if (!reduce) {  // the forwarded copy's own path, on the same data
                c.copyPath = true;
                runFusedCase(this, c);
                if (HasFailure()) return;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(fused, 0);
  EXPECT_GT(twoPass, 0);
  // A payload of more segments than the device has SMs (64 MiB + 3 floats), in place and not, unless the
  // sanitizer runs cap the buffers (RINGGUARD_TEST_MAX_BYTES).
  const char* cap = std::getenv("RINGGUARD_TEST_MAX_BYTES");
  if (cap != nullptr && std::strtoull(cap, nullptr, 10) < (size_t(64) << 20)) return;
  for (int inPlace = 0; inPlace < 2; ++inPlace) {
    FusedCase c;
    c.count = (size_t(16) << 20) + 3;
    c.offset = 1;
    c.inPlace = inPlace != 0;
    c.seed = ++seed;
    EXPECT_TRUE(runFusedCase(this, c));
  }
}

TEST_F(DeviceExecutorTest, VerifyApplyCrcOfARejectedSliceLeavesDstAndChecksumsIt) {
  uint64_t seed = 40000;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kUint8, DataType::kFloat64}) {
    for (size_t count : {size_t(1), size_t(17), size_t(4099), kLarge}) {
      for (int reduce = 0; reduce < 2; ++reduce) {
        for (size_t slotShift : {size_t(0), size_t(1)}) {
          FusedCase c;
          c.dtype = dtype;
          c.reduce = reduce != 0;
          c.inPlace = reduce != 0;
          c.corrupt = true;
          c.count = count;
          c.offset = 1;
          c.slotShift = slotShift;
          c.seed = ++seed;
          runFusedCase(this, c);
          if (HasFailure()) return;
          if (!reduce) {
            c.copyPath = true;
            runFusedCase(this, c);  // a bad verdict: the CRC of dst as it is, computed after all
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// After kOk the forwarded copy carries the verified payload CRC and dst is not checksummed again: with a
// trailer and a payload CRC word that agree on a value that is not the slot's real CRC, the verdict is kOk,
// the copy happens, and the outgoing CRC is that value (a re-read of dst would give the real one). The two
// CRC kernels still run (they cannot know the verdict at enqueue time) and return at once.
TEST_F(DeviceExecutorTest, ForwardedCopyAfterKOkCarriesTheVerifiedCrcWithoutReadingDst) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(4099), size_t(1) << 20, (size_t(8) << 20) + 5}) {
    SCOPED_TRACE(bytes);
    releaseAllocations();
    const std::vector<uint8_t> payload = randomBytes(bytes, bytes + 1);
    const uint32_t claimed = crc32(payload.data(), bytes) ^ 0x5a5a5a5au;
    const SliceId id{3, 1, 0, 0, uint32_t(bytes), 0};
    const Trailer trailer = makeTrailer(id, claimed, 0);
    uint8_t* dst = deviceAlloc(bytes + 16);
    uint8_t* slot = deviceAlloc(bytes + 16);
    auto* words = reinterpret_cast<uint32_t*>(deviceAlloc(sizeof(Trailer) + 16 + 4096));
    auto* dTrailer = reinterpret_cast<Trailer*>(words);
    uint32_t* dPayloadCrc = words + sizeof(Trailer) / 4;
    uint32_t* dVerdict = dPayloadCrc + 1;
    uint32_t* dOut = dPayloadCrc + 2;
    upload(slot, payload.data(), bytes);
    upload(dTrailer, &trailer, sizeof(Trailer));
    upload(dPayloadCrc, &claimed, 4);
    DeviceApply a;
    a.slotTrailer = dTrailer;
    a.payloadCrc = dPayloadCrc;
    a.expected = id;
    a.verdictWord = dVerdict;
    a.dst = dst;
    a.slot = slot;
    a.count = bytes;
    a.dtype = DataType::kUint8;
    a.reduce = false;
    ASSERT_STATUS_OK(verifyCopyCrcDevice(a, dOut, dPayloadCrc + 4, crc32DeviceScratchBytes(bytes), stream_));
    uint32_t verdict = 99, out = 0;
    std::vector<uint8_t> got(bytes);
    download(&verdict, dVerdict, 4);
    download(&out, dOut, 4);
    download(got.data(), dst, bytes);
    EXPECT_EQ(uint32_t(SliceCheck::kOk), verdict);
    EXPECT_EQ(payload, got);
    EXPECT_EQ(claimed, out);
  }
}

TEST_F(DeviceExecutorTest, VerifyApplyCrcRejectsBadArguments) {
  uint8_t* p = deviceAlloc(4096);
  auto* trailer = reinterpret_cast<const Trailer*>(p);
  auto* word = reinterpret_cast<uint32_t*>(p + 64);
  DeviceApply a;
  a.slotTrailer = trailer;
  a.payloadCrc = word;
  a.dst = p + 1024;
  a.local = p + 1024;
  a.slot = p + 2048;
  a.count = 256;
  EXPECT_TRUE(verifyApplyCrcFuses(a));
  EXPECT_EQ(StatusCode::kInvalidArgument, verifyApplyCrcDevice(a, nullptr, word + 4, 64, stream_).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, verifyApplyCrcDevice(a, word + 1, nullptr, 0, stream_).code());
  DeviceApply noTrailer = a;
  noTrailer.slotTrailer = nullptr;
  EXPECT_EQ(StatusCode::kInvalidArgument,
            verifyApplyCrcDevice(noTrailer, word + 1, word + 4, 64, stream_).code());
  DeviceApply misaligned = a;
  misaligned.dst = p + 1026;
  EXPECT_EQ(StatusCode::kInvalidArgument,
            verifyApplyCrcDevice(misaligned, word + 1, word + 4, 64, stream_).code());
}

// ---- reduceDevice vs reduceHost ---------------------------------------------------------------------------

// One reduceDevice call against reduceHost at element offsets (dst, a, b); `alias`: 0 none, 1 dst == a,
// 2 dst == b. NaN results may differ in payload for sum / prod / avg of f32 and f64 (canonical NaN on the
// device), and so for f16 / bf16 too; min / max never compute, so they must match bit for bit.
void runReduceCase(DeviceExecutorTest* t, DataType dtype, ReduceOp op, bool finalStep, int nranks,
                   size_t count, size_t offD, size_t offA, size_t offB, int alias, uint64_t seed) {
  SCOPED_TRACE(std::string(dataTypeName(dtype)) + " " + reduceOpName(op) + (finalStep ? " final" : "") +
               " N=" + std::to_string(nranks) + " count " + std::to_string(count) + " offsets " +
               std::to_string(offD) + "/" + std::to_string(offA) + "/" + std::to_string(offB) + " alias " +
               std::to_string(alias));
  t->releaseAllocations();
  const size_t e = dataTypeSize(dtype);
  const size_t span = (count + 16) * e;
  const std::vector<uint8_t> a = anyElements(dtype, span / e, seed);
  const std::vector<uint8_t> b = anyElements(dtype, span / e, seed + 1);
  const std::vector<uint8_t> d = randomBytes(span, seed + 2);
  std::vector<uint8_t> hA = a, hB = b, hD = d;
  uint8_t* hd = hD.data() + offD * e;
  const uint8_t* ha = hA.data() + offA * e;
  const uint8_t* hb = hB.data() + offB * e;
  if (alias == 1) {
    std::memcpy(hd, ha, count * e);
    ha = hd;
  } else if (alias == 2) {
    std::memcpy(hd, hb, count * e);
    hb = hd;
  }
  reduceHost(dtype, op, hd, ha, hb, count, finalStep, nranks);

  uint8_t* dA = t->deviceAlloc(span);
  uint8_t* dB = t->deviceAlloc(span);
  uint8_t* dD = t->deviceAlloc(span);
  t->upload(dA, a.data(), span);
  t->upload(dB, b.data(), span);
  t->upload(dD, d.data(), span);
  uint8_t* dd = dD + offD * e;
  const uint8_t* da = dA + offA * e;
  const uint8_t* db = dB + offB * e;
  if (alias == 1) {
    ASSERT_CUDA(cudaMemcpyAsync(dd, da, count * e, cudaMemcpyDeviceToDevice, t->stream_));
    da = dd;
  } else if (alias == 2) {
    ASSERT_CUDA(cudaMemcpyAsync(dd, db, count * e, cudaMemcpyDeviceToDevice, t->stream_));
    db = dd;
  }
  ASSERT_STATUS_OK(reduceDevice(dtype, op, dd, da, db, count, finalStep, nranks, t->stream_));
  std::vector<uint8_t> got(span);
  t->download(got.data(), dD, span);

  const bool nanEqual = op != ReduceOp::kMin && op != ReduceOp::kMax;
  // Elements: before, inside and after the range (the outside must be untouched).
  const size_t i = firstDifference(dtype, hD.data() + offD * e, got.data() + offD * e, count, nanEqual);
  if (i != SIZE_MAX) {
    ADD_FAILURE() << "element " << i << ": a " << hexElement(dtype, ha + i * e) << " b "
                  << hexElement(dtype, hb + i * e) << " -> host "
                  << hexElement(dtype, hD.data() + (offD + i) * e) << ", device "
                  << hexElement(dtype, got.data() + (offD + i) * e);
  }
  EXPECT_EQ(0, std::memcmp(hD.data(), got.data(), offD * e)) << "bytes before dst written";
  const size_t end = (offD + count) * e;
  EXPECT_EQ(0, std::memcmp(hD.data() + end, got.data() + end, span - end)) << "bytes after dst written";
}

TEST_F(DeviceExecutorTest, ReduceDeviceMatchesReduceHostBitForBit) {
  const size_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {1, 2, 3}, {0, 1, 0}, {7, 7, 7}, {3, 0, 5}};
  uint64_t seed = 20000;
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!reduceSupported(dtype, op)) continue;
      for (int finalStep = 0; finalStep < 2; ++finalStep) {
        for (size_t count : kSizes) {
          for (const auto& off : offsets) {
            for (int alias = 0; alias < 3; ++alias) {
              if (count == kLarge && (alias != 0 || off[0] > 1)) continue;
              const int nranks =
                  (seed % 4 == 0) ? 256 : 2 + int(seed % 7);  // 256: the u8 divisor stays an int
              ASSERT_NO_FATAL_FAILURE(runReduceCase(this, dtype, op, finalStep != 0, nranks, count, off[0],
                                                    off[1], off[2], alias, ++seed));
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST_F(DeviceExecutorTest, HalfAndBf16RoundingCoversEveryBitPattern) {
  // Every 16-bit pattern against several partners: all rounding paths (normal, subnormal, overflow, ties)
  // and every NaN payload.
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<uint16_t> a(65536);
    for (uint32_t i = 0; i < 65536; ++i) a[i] = uint16_t(i);
    for (uint64_t partner = 0; partner < 6; ++partner) {
      std::vector<uint16_t> b(65536);
      uint64_t state = partner;
      for (uint32_t i = 0; i < 65536; ++i) {
        // Partners: random, the same value, its neighbour, 1.0, a tiny value, the largest finite value.
        const uint16_t one = dtype == DataType::kFloat16 ? 0x3c00 : 0x3f80;
        const uint16_t big = dtype == DataType::kFloat16 ? 0x7bff : 0x7f7f;
        const uint16_t pick[] = {uint16_t(splitmix64(&state)), a[i], uint16_t(a[i] ^ 1), one, 0x0003, big};
        b[i] = pick[partner];
      }
      uint16_t* dA = reinterpret_cast<uint16_t*>(deviceAlloc(sizeof(uint16_t) * 65536));
      uint16_t* dB = reinterpret_cast<uint16_t*>(deviceAlloc(sizeof(uint16_t) * 65536));
      uint16_t* dD = reinterpret_cast<uint16_t*>(deviceAlloc(sizeof(uint16_t) * 65536));
      upload(dA, a.data(), sizeof(uint16_t) * 65536);
      upload(dB, b.data(), sizeof(uint16_t) * 65536);
      for (ReduceOp op : kAllReduceOps) {
        if (!reduceSupported(dtype, op)) continue;
        for (int nranks : {3, 8}) {
          std::vector<uint16_t> want(65536), got(65536);
          reduceHost(dtype, op, want.data(), a.data(), b.data(), 65536, true, nranks);
          ASSERT_STATUS_OK(reduceDevice(dtype, op, dD, dA, dB, 65536, true, nranks, stream_));
          download(got.data(), dD, sizeof(uint16_t) * 65536);
          const bool nanEqual = op != ReduceOp::kMin && op != ReduceOp::kMax;
          const size_t i = firstDifference(dtype, reinterpret_cast<const uint8_t*>(want.data()),
                                           reinterpret_cast<const uint8_t*>(got.data()), 65536, nanEqual);
          if (i != SIZE_MAX) {
            ADD_FAILURE() << dataTypeName(dtype) << " " << reduceOpName(op) << " N=" << nranks << ": "
                          << std::hex << a[i] << " op " << b[i] << " -> host " << want[i] << ", device "
                          << got[i];
            return;
          }
        }
      }
    }
  }
}

TEST_F(DeviceExecutorTest, ReduceDeviceRejectsBadArguments) {
  uint8_t* p = deviceAlloc(64);
  EXPECT_EQ(StatusCode::kInvalidArgument,
            reduceDevice(static_cast<DataType>(99), ReduceOp::kSum, p, p, p, 4, false, 2, stream_).code());
  EXPECT_EQ(
      StatusCode::kInvalidArgument,
      reduceDevice(DataType::kFloat32, static_cast<ReduceOp>(99), p, p, p, 4, false, 2, stream_).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            reduceDevice(DataType::kFloat32, ReduceOp::kSum, nullptr, p, p, 4, false, 2, stream_).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            reduceDevice(DataType::kFloat32, ReduceOp::kSum, p + 2, p, p, 4, false, 2, stream_).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            reduceDevice(DataType::kInt64, ReduceOp::kAvg, p, p, p + 4, 4, true, 2, stream_).code());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            reduceDevice(DataType::kFloat32, ReduceOp::kAvg, p, p, p, 4, true, 0, stream_).code());
  EXPECT_TRUE(
      reduceDevice(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0, false, 2, stream_)
          .isOk());
}

}  // namespace
}  // namespace ringguard
