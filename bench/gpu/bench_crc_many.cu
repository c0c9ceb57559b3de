// Device time of the replica check's fingerprint (issue 43; docs/PERFORMANCE.md, "The replica check"): the
// many-buffer CRC (Crc32ManyPlan, its table kept as in a training run) over the small GPT's 231 device
// tensors (each parameter with AdamW's exp_avg and exp_avg_sq, fp32, 329.2 MB, each its own cudaMalloc), in
// the same run as the floors it is held against: one CRC over a single buffer of the same bytes
// (crc32Device: no span boundaries), and a device-to-device copy of the same bytes (read + write).
//
//   bench_crc_many [--iters 50] [--warmup 5] [--sets 1] [--items 2,4,8,16]
//
// Rows `<what> us=<median> read_GBps=<bytes / t>`: `plan_run` (the CRCs alone), `plan_message` (the CRCs
// written into a message of n + 8 words, as the replica exchange runs it; with `items=K` for each --items
// value, the plan's work items per block), `plan_one_span` (the plan over one buffer of the same bytes: as
// many items as blocks), `one_span` (crc32Device over that buffer) and `copy` (copy_GBps counts bytes read
// plus written). The last line is `summary: items=<K> plan_message_us=<t> one_span_us=<t>
// message_vs_one_span=<t_one / t_message> message_vs_copy=<(B / t_message) / (2B / t_copy)>` for the
// default items per block (or the first --items value when the default is not among them). --sets N
// fingerprints N copies of the tensors (N x 329.2 MB) for a larger set of the same shapes. Every plan's CRCs
// are checked against crc32Device's of the same spans before and after timing.
//
// --sizes 1M,16M,... (bytes, K/M/G suffixes; prefixes of the one buffer, at most its size) adds one row per
// size, `size bytes=<B> crc_us=<t> read_block_us=<t> read_stride_us=<t>`: crc32Device over the prefix, and
// two kernels that only read it (XOR of every word), as floors that take the CRC's arithmetic out:
// `read_block` in crc32Device's geometry (its 1024-thread blocks, one per 128 KiB and at most one per SM,
// each with 128 KiB of shared memory and one equal segment, four 16-byte loads in flight per thread),
// `read_stride` as a copy kernel spreads its work (eight 256-thread blocks per SM striding over the whole
// prefix). Differences between the rows place the CRC's time that does not grow with the bytes
// (PERFORMANCE.md, "The replica check"). Each size also gets `variant bytes=<B> batch=<K> prefetch=<0|1>
// merge=<0|1> [pdl=1] us=<t>` rows: the segment machinery (crc32_segments.cuh) instantiated here in
// crc32Device's geometry with K loads in flight per thread, with or without the next batch's loads issued
// before the current one is checksummed, merged by the library's launchCrc32Finalize (`merge=1`; `pdl=1`: by
// a merge launched as a programmatic dependent launch), or the segment kernel alone (`merge=0`, not checked).
// Every merged variant is checked once after its timing against crc32Device, from partials and an output
// filled with junk first. Sizes are at least 16 bytes. At small sizes the event timings include the gap
// between a row's two launches.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_cuda_check.h"
#include "bench_gpu_timing.h"
#include "bench_sizes.h"
#include "cuda/crc32_segments.cuh"
#include "cuda/kernels.h"
#include "cuda/streaming_load.cuh"
#include "ringguard/cuda/crc32_many.h"

namespace {

__global__ void fillBytes(uint32_t* p, size_t words, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 0x9e3779b9u ^ seed;
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    p[i] = x ^ (x >> 12);
  }
}

// The read floors of --sizes: XOR of every 16-byte piece into *out (so the loads are not dropped).
__device__ __forceinline__ uint32_t foldPiece(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

__device__ __forceinline__ void foldBlock(uint32_t acc, uint32_t* out) {
  for (int d = 16; d > 0; d /= 2) acc ^= __shfl_xor_sync(0xffffffffu, acc, d);
  if ((threadIdx.x & 31u) == 0) atomicXor(out, acc);
}

constexpr int kFloorBatch = 4;

__global__ void __launch_bounds__(1024, 1)
    readSegments(const uint4* __restrict__ p, uint64_t numPieces, uint64_t segmentPieces, uint32_t* out) {
  const uint64_t begin = blockIdx.x * segmentPieces;
  const uint64_t end = begin + segmentPieces < numPieces ? begin + segmentPieces : numPieces;
  uint32_t acc = 0;
  for (uint64_t i = begin + threadIdx.x; i < end; i += kFloorBatch * 1024) {
    uint4 v[kFloorBatch];
#pragma unroll
    for (int u = 0; u < kFloorBatch; ++u) {
      v[u] = i + u * 1024 < end ? ringguard::cuda_detail::loadStreaming(p + i + u * 1024) : uint4{};
    }
#pragma unroll
    for (int u = 0; u < kFloorBatch; ++u) acc ^= foldPiece(v[u]);
  }
  foldBlock(acc, out);
}

__global__ void __launch_bounds__(256)
    readStride(const uint4* __restrict__ p, uint64_t numPieces, uint32_t* out) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < numPieces;
       i += kFloorBatch * stride) {
    uint4 v[kFloorBatch];
#pragma unroll
    for (int u = 0; u < kFloorBatch; ++u) {
      v[u] = i + u * stride < numPieces ? ringguard::cuda_detail::loadStreaming(p + i + u * stride) : uint4{};
    }
#pragma unroll
    for (int u = 0; u < kFloorBatch; ++u) acc ^= foldPiece(v[u]);
  }
  foldBlock(acc, out);
}

// The segment machinery's variants of the size rows, over the library's Source of the bytes themselves.
using ringguard::crc_segments::LoadSource;

template <int kBatch, bool kPrefetch>
__global__ void __launch_bounds__(1024, 1) crcVariant(const uint4* __restrict__ base, uint64_t numPieces,
                                                      uint64_t segmentPieces, uint32_t* partials) {
  LoadSource src{base};
  ringguard::crc_segments::crcSegments<kBatch, kPrefetch>(src, numPieces, segmentPieces, partials);
}

// The `pdl` variant: the library's geometry with its merge launched as a programmatic dependent launch, so
// the merge's launch overlaps the segment kernel (its blocks wait in griddepcontrol.wait for the segment grid
// to complete and its writes to be visible).
__global__ void __launch_bounds__(1024, 1)
    crcEarlyDependents(const uint4* __restrict__ base, uint64_t numPieces, uint64_t segmentPieces,
                       uint32_t* partials) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  LoadSource src{base};
  ringguard::crc_segments::crcSegments<4, false>(src, numPieces, segmentPieces, partials);
}

constexpr uint32_t kPdlFinalizeThreads = 512;

__global__ void __launch_bounds__(kPdlFinalizeThreads, 1)
    finalizeAfterGrid(const __grid_constant__ ringguard::crc_segments::FinalizeArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  __shared__ uint32_t tree[ringguard::crc_segments::kMaxBlocks];
  ringguard::crc_segments::finalizeCrc<kPdlFinalizeThreads>(a, tree);
}

struct Variant {
  int batch;
  bool prefetch;
  bool merge;
  void (*kernel)(const uint4*, uint64_t, uint64_t, uint32_t*);
};

const Variant kVariants[] = {{4, false, true, crcVariant<4, false>}, {4, false, false, crcVariant<4, false>},
                             {2, true, true, crcVariant<2, true>},   {4, true, true, crcVariant<4, true>},
                             {8, false, true, crcVariant<8, false>}, {2, false, true, crcVariant<2, false>},
                             {4, false, true, crcEarlyDependents}};
constexpr size_t kPdlVariant = 6;  // kVariants' entry whose merge is a programmatic dependent launch

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Device time of the replica check's many-buffer CRC against one span and a copy"};
  int iters = 50, warmup = 5, sets = 1;
  std::vector<uint32_t> itemChoices = {ringguard::Crc32ManyPlan::kDefaultItemsPerBlock};
  app.add_option("--iters", iters, "timed runs per row (median reported)")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "untimed runs before timing")->check(CLI::Range(0, 100000));
  app.add_option("--sets", sets, "copies of the small GPT's tensors fingerprinted")->check(CLI::Range(1, 64));
  app.add_option("--items", itemChoices, "work items per block of the plans timed (comma separated)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  std::vector<std::string> sizeArgs;
  app.add_option("--sizes", sizeArgs, "prefix sizes of the one buffer for the size rows (comma separated)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  std::vector<size_t> sizes;
  try {
    for (const std::string& arg : sizeArgs) {
      sizes.push_back(ringguard::bench::parseBytes("--sizes", arg));
      if (sizes.back() < 16) throw CLI::ValidationError("--sizes", "'" + arg + "' is under 16 bytes");
    }
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }

  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<ringguard::Crc32Span> spans;
  std::vector<void*> buffers;
  size_t total = 0;
  for (int set = 0; set < sets; ++set) {
    for (size_t count : bench_gpu::gptParameterCounts()) {
      for (int copy = 0; copy < 3; ++copy) {  // the parameter, exp_avg, exp_avg_sq
        void* p = nullptr;
        const size_t bytes = count * sizeof(float);
        CHECK_CUDA(cudaMalloc(&p, bytes));
        fillBytes<<<256, 256, 0, s>>>(static_cast<uint32_t*>(p), count, uint32_t(buffers.size()));
        buffers.push_back(p);
        spans.push_back(ringguard::Crc32Span{p, bytes});
        total += bytes;
      }
    }
  }
  void *one = nullptr, *dst = nullptr, *scratch = nullptr;
  uint32_t* crc = nullptr;
  CHECK_CUDA(cudaMalloc(&one, total));
  CHECK_CUDA(cudaMalloc(&dst, total));
  CHECK_CUDA(cudaMalloc(&crc, spans.size() * sizeof(uint32_t)));
  fillBytes<<<1024, 256, 0, s>>>(static_cast<uint32_t*>(one), total / 4, 7u);
  const size_t scratchBytes = ringguard::crc32DeviceScratchBytes(total);
  CHECK_CUDA(cudaMalloc(&scratch, scratchBytes));

  // The message: 8 header words, then span i's CRC at word 8 + i.
  const size_t n = spans.size(), numWords = n + 8;
  std::vector<uint32_t> positions(n), header(numWords, 0x5EEDu);
  for (size_t i = 0; i < n; ++i) positions[i] = uint32_t(8 + i);
  std::vector<uint32_t> want(n), got(n), words(numWords);
  for (size_t i = 0; i < n; ++i) {
    CHECK_OK(ringguard::crc32Device(spans[i].data, spans[i].bytes, crc + i, scratch, scratchBytes, s));
  }
  CHECK_CUDA(cudaMemcpyAsync(want.data(), crc, n * 4, cudaMemcpyDeviceToHost, s));
  using bench_gpu::medianMs;
  double runMs = 0, planOneMs = 0;
  std::vector<double> messageMs;
  {
    // Each plan's CRCs checked at its first run and again after its timed runs (the device counters set back
    // by each launch's last block).
    const uint32_t* crcs = nullptr;
    const uint32_t* message = nullptr;
    ringguard::Crc32ManyPlan plan;
    const auto checkRun = [&](const char* when) {
      CHECK_OK(plan.run(spans.data(), n, s, &crcs));
      CHECK_CUDA(cudaMemcpyAsync(got.data(), crcs, n * 4, cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      if (got != want) {
        std::fprintf(stderr, "plan.run's CRCs %s differ from crc32Device's\n", when);
        std::exit(1);
      }
    };
    checkRun("at the first run");
    runMs = medianMs(s, warmup, iters, [&] { CHECK_OK(plan.run(spans.data(), n, s, &crcs)); });
    checkRun("after the timed runs");
    for (uint32_t items : itemChoices) {
      ringguard::Crc32ManyPlan byItems(items);
      const auto checkMessage = [&](const char* when) {
        CHECK_OK(byItems.runMessage(spans.data(), positions.data(), n, header.data(), numWords, s, &message));
        CHECK_CUDA(cudaMemcpyAsync(words.data(), message, numWords * 4, cudaMemcpyDeviceToHost, s));
        CHECK_CUDA(cudaStreamSynchronize(s));
        for (size_t i = 0; i < n; ++i) {
          if (words[8 + i] != want[i] || words[0] != 0x5EEDu) {
            std::fprintf(stderr, "items=%u %s: span %zu's word %08x, crc32Device %08x\n", items, when, i,
                         words[8 + i], want[i]);
            std::exit(1);
          }
        }
      };
      checkMessage("at the first run");
      messageMs.push_back(medianMs(s, warmup, iters, [&] {
        CHECK_OK(byItems.runMessage(spans.data(), positions.data(), n, header.data(), numWords, s, &message));
      }));
      checkMessage("after the timed runs");
    }
    // The plan over the one buffer: as many items as blocks.
    ringguard::Crc32ManyPlan whole;
    const ringguard::Crc32Span all{one, total};
    planOneMs = medianMs(s, warmup, iters, [&] { CHECK_OK(whole.run(&all, 1, s, &crcs)); });
    uint32_t viaPlan = 0, viaDevice = 0;
    CHECK_CUDA(cudaMemcpyAsync(&viaPlan, crcs, 4, cudaMemcpyDeviceToHost, s));
    CHECK_OK(ringguard::crc32Device(one, total, crc, scratch, scratchBytes, s));
    CHECK_CUDA(cudaMemcpyAsync(&viaDevice, crc, 4, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    if (viaPlan != viaDevice) {
      std::fprintf(stderr, "the plan over one buffer: %08x, crc32Device %08x\n", viaPlan, viaDevice);
      return 1;
    }
  }
  const double oneMs = medianMs(
      s, warmup, iters, [&] { CHECK_OK(ringguard::crc32Device(one, total, crc, scratch, scratchBytes, s)); });
  const double copyMs = medianMs(
      s, warmup, iters, [&] { CHECK_CUDA(cudaMemcpyAsync(dst, one, total, cudaMemcpyDeviceToDevice, s)); });
  // The size rows (--sizes).
  struct SizeRow {
    size_t bytes;
    double crcMs, blockMs, strideMs;
    std::vector<double> variantMs;
  };
  std::vector<SizeRow> sizeRows;
  {
    int device = 0, sms = 0;
    CHECK_CUDA(cudaGetDevice(&device));
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    constexpr int kBlockSmem = 128 * 1024;  // the segment kernel's, so that one block fits an SM
    CHECK_CUDA(cudaFuncSetAttribute(readSegments, cudaFuncAttributeMaxDynamicSharedMemorySize, kBlockSmem));
    for (const Variant& v : kVariants) {
      CHECK_CUDA(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(ringguard::crc_segments::kDynamicSmemBytes)));
    }
    uint32_t* partials = nullptr;
    CHECK_CUDA(cudaMalloc(&partials, (ringguard::crc_segments::kMaxBlocks + 2) * sizeof(uint32_t)));
    uint32_t* variantCrc = partials + ringguard::crc_segments::kMaxBlocks;
    uint32_t* floorOut = variantCrc + 1;  // what the read floors XOR into
    for (const size_t wanted : sizes) {
      const size_t bytes = std::min(wanted, total) / 16 * 16;
      const uint64_t pieces = bytes / 16;
      const auto* p = static_cast<const uint4*>(one);
      // crc32Device's geometry (one block per 128 KiB, at most one per SM), which read_block takes too.
      ringguard::crc_segments::SegmentPlan plan = ringguard::crc_segments::planSegments(one, bytes, sms);
      plan.finalize.partials = partials;
      plan.finalize.out = variantCrc;
      SizeRow row{bytes, 0, 0, 0, {}};
      row.crcMs = medianMs(s, warmup, iters, [&] {
        CHECK_OK(ringguard::crc32Device(one, bytes, crc, scratch, scratchBytes, s));
      });
      uint32_t reference = 0;
      CHECK_CUDA(cudaMemcpyAsync(&reference, crc, 4, cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      row.blockMs = medianMs(s, warmup, iters, [&] {
        readSegments<<<plan.blocks, 1024, kBlockSmem, s>>>(p, pieces, plan.segmentPieces, floorOut);
        CHECK_CUDA(cudaGetLastError());
      });
      row.strideMs = medianMs(s, warmup, iters, [&] {
        readStride<<<8 * sms, 256, 0, s>>>(p, pieces, floorOut);
        CHECK_CUDA(cudaGetLastError());
      });
      for (const Variant& v : kVariants) {
        const auto launch = [&] {
          v.kernel<<<plan.blocks, 1024, ringguard::crc_segments::kDynamicSmemBytes, s>>>(
              p, plan.numPieces, plan.segmentPieces, partials);
          CHECK_CUDA(cudaGetLastError());
          if (&v == &kVariants[kPdlVariant]) {
            cudaLaunchConfig_t config = {};
            config.gridDim = dim3(1);
            config.blockDim = dim3(kPdlFinalizeThreads);
            config.stream = s;
            cudaLaunchAttribute attribute[1] = {};
            attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attribute[0].val.programmaticStreamSerializationAllowed = 1;
            config.attrs = attribute;
            config.numAttrs = 1;
            CHECK_CUDA(cudaLaunchKernelEx(&config, finalizeAfterGrid, plan.finalize));
          } else if (v.merge) {
            CHECK_OK(ringguard::crc_segments::launchCrc32Finalize(plan.finalize, s));
          }
        };
        row.variantMs.push_back(medianMs(s, warmup, iters, launch));
        if (!v.merge) continue;
        // Junk first, so a merge that ran early or not at all cannot pass on an earlier run's values.
        CHECK_CUDA(
            cudaMemsetAsync(partials, 0xA5, (ringguard::crc_segments::kMaxBlocks + 1) * sizeof(uint32_t), s));
        launch();
        uint32_t got = 0;
        CHECK_CUDA(cudaMemcpyAsync(&got, variantCrc, 4, cudaMemcpyDeviceToHost, s));
        CHECK_CUDA(cudaStreamSynchronize(s));
        if (got != reference) {
          std::fprintf(stderr, "variant batch=%d prefetch=%d at %zu bytes: %08x, crc32Device %08x\n", v.batch,
                       int(v.prefetch), bytes, got, reference);
          return 1;
        }
      }
      sizeRows.push_back(row);
    }
    CHECK_CUDA(cudaFree(partials));
  }
  const double gb = double(total) / 1e9;
  std::printf("spans=%zu bytes=%zu iters=%d warmup=%d\n", n, total, iters, warmup);
  std::printf("plan_run us=%.1f read_GBps=%.0f\n", runMs * 1e3, gb / (runMs * 1e-3));
  size_t summaryAt = 0;  // the default items per block when swept, else the first value
  for (size_t k = 0; k < itemChoices.size(); ++k) {
    std::printf("plan_message items=%u us=%.1f read_GBps=%.0f\n", itemChoices[k], messageMs[k] * 1e3,
                gb / (messageMs[k] * 1e-3));
    if (itemChoices[k] == ringguard::Crc32ManyPlan::kDefaultItemsPerBlock) summaryAt = k;
  }
  std::printf("plan_one_span us=%.1f read_GBps=%.0f\n", planOneMs * 1e3, gb / (planOneMs * 1e-3));
  std::printf("one_span us=%.1f read_GBps=%.0f\n", oneMs * 1e3, gb / (oneMs * 1e-3));
  std::printf("copy us=%.1f copy_GBps=%.0f\n", copyMs * 1e3, 2 * gb / (copyMs * 1e-3));
  for (const SizeRow& r : sizeRows) {
    std::printf("size bytes=%zu crc_us=%.1f read_block_us=%.1f read_stride_us=%.1f\n", r.bytes, r.crcMs * 1e3,
                r.blockMs * 1e3, r.strideMs * 1e3);
    for (size_t k = 0; k < r.variantMs.size(); ++k) {
      std::printf("variant bytes=%zu batch=%d prefetch=%d merge=%d%s us=%.1f\n", r.bytes, kVariants[k].batch,
                  int(kVariants[k].prefetch), int(kVariants[k].merge), k == kPdlVariant ? " pdl=1" : "",
                  r.variantMs[k] * 1e3);
    }
  }
  const double m = messageMs[summaryAt];
  std::printf(
      "summary: items=%u plan_message_us=%.1f one_span_us=%.1f message_vs_one_span=%.3f "
      "message_vs_copy=%.3f\n",
      itemChoices[summaryAt], m * 1e3, oneMs * 1e3, oneMs / m, (gb / m) / (2 * gb / copyMs));
  for (void* p : buffers) CHECK_CUDA(cudaFree(p));
  for (void* p : {one, dst, scratch, static_cast<void*>(crc)}) CHECK_CUDA(cudaFree(p));
  CHECK_CUDA(cudaStreamDestroy(s));
  return 0;
}
