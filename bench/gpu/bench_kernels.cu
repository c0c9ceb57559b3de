// Bandwidth of the CUDA kernels against a device-to-device copy measured in the same run.
//
//   bench_kernels [--bytes 1G,256M] [--iters 20] [--warmup 5] [--offset 0] [--no-verify]
//
// Reference bandwidth: the copy moves B bytes in and B bytes out, so its rate is 2B / t_copy ("copy
// read+write"); that is the ~4.3 TB/s the H200 copy of 1 GiB reaches (0.504 ms). A checker only reads B
// bytes, so its rate is B / t_kernel, and
//
//   crc_vs_copy     = (B / t_crc)     / (2B / t_copy)
//   nanscan_vs_copy = (B / t_nanscan) / (2B / t_copy)        (fp32)
//
// i.e. the fraction of the copy's total DRAM throughput the checker sustains while reading. The goals are
// crc_vs_copy >= 0.80 and nanscan_vs_copy >= 0.90.
//
// The apply of a forwarded slice (f32 sum of a slot and an accumulator, verified against a sealed trailer,
// then the CRC of the result for the next hop; out of place, so that every run sums the same values) is
// timed as verify + apply without the CRC (verifyApplyDevice), two passes (verifyApplyDevice then crc32Device
// of dst) and fused (verifyApplyCrcDevice), beside reduce alone (reduceDevice: no verify, no CRC). It
// moves 3B bytes (slot and accumulator in, result out); the same as a copy (an all-gather step) moves 2B.
// fused_vs_two_pass = t_two_pass / t_fused, of the sum. The forwarded copy is also timed as the device
// executor now runs it, "sealed" (verifyCopyCrcDevice: verify + copy, then the verified payload CRC after
// kOk, no second read of the result), and "reject" (the same after a bad verdict: nothing copied, the CRC of
// dst computed); copy_sealed_vs_fused = t_fused / t_sealed of the copy.
//
// Times are medians of --iters runs timed with CUDA events after --warmup runs. The last line is
// `summary: crc_vs_copy=<r> nanscan_vs_copy=<r> fused_vs_two_pass=<r> copy_sealed_vs_fused=<r>` for the
// largest size.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../bench_sizes.h"
#include "bench_cuda_check.h"
#include "bench_gpu_timing.h"
#include "cuda/kernels.h"
#include "cuda/memory_pool.h"
#include "cuda/verify_reduce.h"
#include "ringguard/core/crc32.h"

namespace {

using bench_gpu::medianMs;

// Finite pseudo-random data: clearing bit 6 of every byte keeps every f32, f16 and bf16 exponent below
// all-ones, and every float8 byte finite.
__global__ void __launch_bounds__(256, 1) fillFinite(uint32_t* p, size_t words, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(256) + threadIdx.x; i < words; i += size_t(gridDim.x) * 256) {
    uint32_t x = static_cast<uint32_t>(i) * 0x9e3779b9u ^ seed;
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    p[i] = x & 0xbfbfbfbfu;
  }
}

double tbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e12; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CRC-32 and NaN-scan bandwidth against a device-to-device copy"};
  std::vector<std::string> sizeArgs = {"1G"};
  int iters = 20;
  int warmup = 5;
  size_t offset = 0;
  bool noVerify = false;
  double torchMs = 0;
  app.add_option("--bytes", sizeArgs, "buffer sizes, e.g. 1G,256M,4K (comma separated or repeated)")
      ->delimiter(',');
  app.add_option("--iters", iters, "timed runs per measurement (median reported)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  app.add_option("--warmup", warmup, "untimed runs before timing")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_option(
      "--offset", offset,
      "byte offset of the checked buffers from a 256-byte boundary (rounded down to 4 for the scans)");
  app.add_flag("--no-verify", noVerify, "skip the host CRC check of the device result");
  app.add_option(
      "--torch-isfinite-ms", torchMs,
      "time of torch.isfinite(x).all() on the fp32 buffer of the largest size, for the speedup line");
  CLI11_PARSE(app, argc, argv);

  std::vector<size_t> sizes;
  try {
    for (const auto& s : sizeArgs) sizes.push_back(ringguard::bench::parseBytes("--bytes", s));
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  std::sort(sizes.begin(), sizes.end());
  const size_t largest = sizes.back();

  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs, %.0f GiB)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  std::printf("reference: copy read+write = 2B / t_copy; ratios = (B / t_kernel) / (2B / t_copy)\n");

  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<ringguard::DevicePool> pool;
  CHECK_OK(ringguard::DevicePool::create(0, &pool));
  const size_t padded = largest + offset + 256;
  void* src = nullptr;
  void* dst = nullptr;
  void* scratch = nullptr;
  void* out = nullptr;
  void* acc = nullptr;  // the accumulator of the apply
  const size_t scratchBytes = ringguard::crc32DeviceScratchBytes(largest);
  CHECK_OK(pool->allocate(padded, stream, &src));
  CHECK_OK(pool->allocate(padded, stream, &dst));
  CHECK_OK(pool->allocate(padded, stream, &acc));
  CHECK_OK(pool->allocate(std::max<size_t>(scratchBytes, 4), stream, &scratch));
  CHECK_OK(pool->allocate(sizeof(ringguard::NanScanResult) + 16 + 64, stream, &out));
  fillFinite<<<1024, 256, 0, stream>>>(static_cast<uint32_t*>(src), padded / 4, 12345u);
  CHECK_CUDA(cudaGetLastError());
  fillFinite<<<1024, 256, 0, stream>>>(static_cast<uint32_t*>(acc), padded / 4, 777u);
  CHECK_CUDA(cudaGetLastError());
  auto* crcOut = static_cast<uint32_t*>(out);
  auto* scanOut = reinterpret_cast<ringguard::NanScanResult*>(static_cast<char*>(out) + 16);
  // The apply's device words: the slot's trailer, its payload CRC, the verdict, the CRC of the result.
  auto* trailer = reinterpret_cast<ringguard::Trailer*>(static_cast<char*>(out) + 16 + 16);
  auto* applyWords = reinterpret_cast<uint32_t*>(static_cast<char*>(out) + 16 + 16 + 48);
  uint32_t* payloadCrc = applyWords;
  uint32_t* verdict = applyWords + 1;
  uint32_t* accCrc = applyWords + 2;
  char* data = static_cast<char*>(src) + offset;
  // The scan needs element alignment: an --offset that is not a multiple of 4 is rounded down for it.
  char* scanData = static_cast<char*>(src) + (offset & ~size_t(3));

  double crcRatio = 0;
  double scanRatio = 0;
  double fusedRatio = 0;
  double sealedRatio = 0;
  for (size_t bytes : sizes) {
    const size_t crcScratch = ringguard::crc32DeviceScratchBytes(bytes);
    const double copyMs = medianMs(stream, warmup, iters, [&] {
      CHECK_CUDA(
          cudaMemcpyAsync(static_cast<char*>(dst) + offset, data, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    const double crcMs = medianMs(stream, warmup, iters, [&] {
      CHECK_OK(ringguard::crc32Device(data, bytes, crcOut, scratch, crcScratch, stream));
    });
    const double f32Ms = medianMs(stream, warmup, iters, [&] {
      CHECK_OK(ringguard::nanScanDevice(scanData, bytes / 4, ringguard::DataType::kFloat32, scanOut, stream));
    });
    const double bf16Ms = medianMs(stream, warmup, iters, [&] {
      CHECK_OK(
          ringguard::nanScanDevice(scanData, bytes / 2, ringguard::DataType::kBFloat16, scanOut, stream));
    });
    const double f8Ms = medianMs(stream, warmup, iters, [&] {
      CHECK_OK(ringguard::nanScanDevice(scanData, bytes, ringguard::DataType::kFloat8E4M3, scanOut, stream));
    });
    const double copyRate = tbps(2.0 * bytes, copyMs);
    std::printf("\nsize %zu bytes (%.3f GiB), offset %zu, median of %d\n", bytes, bytes / 1073741824.0,
                offset, iters);
    std::printf("  %-14s %9.4f ms  %6.3f TB/s read+write (%.3f TB/s read)\n", "copy d2d", copyMs, copyRate,
                tbps(bytes, copyMs));
    std::printf("  %-14s %9.4f ms  %6.3f TB/s read   crc_vs_copy=%.3f\n", "crc32", crcMs, tbps(bytes, crcMs),
                tbps(bytes, crcMs) / copyRate);
    std::printf("  %-14s %9.4f ms  %6.3f TB/s read   nanscan_vs_copy=%.3f\n", "nanscan f32", f32Ms,
                tbps(bytes, f32Ms), tbps(bytes, f32Ms) / copyRate);
    std::printf("  %-14s %9.4f ms  %6.3f TB/s read   nanscan_bf16_vs_copy=%.3f\n", "nanscan bf16", bf16Ms,
                tbps(bytes, bf16Ms), tbps(bytes, bf16Ms) / copyRate);
    std::printf("  %-14s %9.4f ms  %6.3f TB/s read   nanscan_f8_vs_copy=%.3f\n", "nanscan f8e4m3", f8Ms,
                tbps(bytes, f8Ms), tbps(bytes, f8Ms) / copyRate);
    crcRatio = tbps(bytes, crcMs) / copyRate;
    scanRatio = tbps(bytes, f32Ms) / copyRate;
    if (bytes == largest && torchMs > 0) {
      std::printf("  torch.isfinite(x).all() %.4f ms -> nanscan f32 is %.2fx faster\n", torchMs,
                  torchMs / f32Ms);
    }

    // The apply of a forwarded slice: the slot is `data` (f32, element aligned), sealed on the device.
    const size_t count = bytes / 4;
    const ringguard::SliceId id{1, 0, 0, 0, static_cast<uint32_t>(count * 4), 0};
    CHECK_OK(ringguard::crc32Device(scanData, count * 4, payloadCrc, scratch, crcScratch, stream));
    CHECK_OK(ringguard::sealTrailerDevice(id, payloadCrc, nullptr, trailer, stream));
    char* accData = static_cast<char*>(acc) + (offset & ~size_t(3));
    char* sumData = static_cast<char*>(dst) + (offset & ~size_t(3));
    ringguard::DeviceApply apply;
    apply.slotTrailer = trailer;
    apply.payloadCrc = payloadCrc;
    apply.expected = id;
    apply.verdictWord = verdict;
    apply.dst = sumData;
    apply.local = accData;
    apply.slot = scanData;
    apply.count = count;
    apply.nranks = 2;
    apply.reduce = true;  // dst = local + slot (a reduce-scatter step); below also as a copy (all-gather)
    const double reduceMs = medianMs(stream, warmup, iters, [&] {
      CHECK_OK(ringguard::reduceDevice(ringguard::DataType::kFloat32, ringguard::ReduceOp::kSum, sumData,
                                       accData, scanData, count, false, 2, stream));
    });
    std::printf("  %-14s %9.4f ms  %6.3f TB/s read+write (no verify, no CRC)\n", "reduce f32", reduceMs,
                tbps(3.0 * count * 4, reduceMs));
    // One forwarded apply three ways; `moved` is its traffic without the CRC pass (3B reduce, 2B copy).
    struct ApplyTimes {
      double verifyMs, twoPassMs, fusedMs;
    };
    const auto timeApply = [&](const char* what, double moved) {
      const double verifyMs =
          medianMs(stream, warmup, iters, [&] { CHECK_OK(ringguard::verifyApplyDevice(apply, stream)); });
      const double twoPassMs = medianMs(stream, warmup, iters, [&] {
        CHECK_OK(ringguard::verifyApplyDevice(apply, stream));
        CHECK_OK(ringguard::crc32Device(sumData, count * 4, accCrc, scratch, crcScratch, stream));
      });
      const double fusedMs = medianMs(stream, warmup, iters, [&] {
        CHECK_OK(ringguard::verifyApplyCrcDevice(apply, accCrc, scratch, crcScratch, stream));
      });
      std::printf("  %-6s verify  %9.4f ms  %6.3f TB/s (no CRC of the result)\n", what, verifyMs,
                  tbps(moved, verifyMs));
      std::printf("  %-6s 2-pass  %9.4f ms  %6.3f TB/s (then crc32Device of the result)\n", what, twoPassMs,
                  tbps(moved, twoPassMs));
      std::printf("  %-6s fused   %9.4f ms  %6.3f TB/s   fused_vs_two_pass=%.3f fused_vs_verify=%.3f%s\n",
                  what, fusedMs, tbps(moved, fusedMs), twoPassMs / fusedMs, verifyMs / fusedMs,
                  ringguard::verifyApplyCrcFuses(apply) ? "" : " (NOT fused: unequal alignment)");
      return ApplyTimes{verifyMs, twoPassMs, fusedMs};
    };
    const ApplyTimes sum = timeApply("sum", 3.0 * count * 4);
    fusedRatio = sum.twoPassMs / sum.fusedMs;
    apply.reduce = false;
    const ApplyTimes copy = timeApply("copy", 2.0 * count * 4);
    // The forwarded copy as the executor runs it: the CRC kernels read the verdict and return at once
    // after kOk; after a bad verdict (a stale trailer here) they checksum dst as it is.
    const double sealedMs = medianMs(stream, warmup, iters, [&] {
      CHECK_OK(ringguard::verifyCopyCrcDevice(apply, accCrc, scratch, crcScratch, stream));
    });
    ringguard::DeviceApply rejected = apply;
    rejected.expected.step += 1;
    const double rejectMs = medianMs(stream, warmup, iters, [&] {
      CHECK_OK(ringguard::verifyCopyCrcDevice(rejected, accCrc, scratch, crcScratch, stream));
    });
    std::printf("  %-6s sealed  %9.4f ms  %6.3f TB/s   copy_sealed_vs_fused=%.3f sealed_vs_verify=%.3f\n",
                "copy", sealedMs, tbps(2.0 * count * 4, sealedMs), copy.fusedMs / sealedMs,
                copy.verifyMs / sealedMs);
    std::printf("  %-6s reject  %9.4f ms  (bad verdict: nothing copied, crc32 of dst)\n", "copy", rejectMs);
    sealedRatio = copy.fusedMs / sealedMs;
    apply.reduce = true;
    CHECK_OK(ringguard::verifyApplyCrcDevice(apply, accCrc, scratch, crcScratch, stream));  // for the check

    // The device results are checked too, so a fast but wrong kernel cannot pass unnoticed.
    ringguard::NanScanResult scan{};
    uint32_t crc = 0;
    CHECK_CUDA(cudaMemcpyAsync(&crc, crcOut, sizeof(crc), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaMemcpyAsync(&scan, scanOut, sizeof(scan), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (scan.count != 0 || scan.firstIndex != ~0ull) {
      std::printf("  nanscan check: FAILED (count %llu, first %llu on finite data)\n", scan.count,
                  scan.firstIndex);
      return 1;
    }
    uint32_t applied = 0, resultCrc = 0;
    CHECK_CUDA(cudaMemcpyAsync(&applied, verdict, sizeof(applied), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaMemcpyAsync(&resultCrc, accCrc, sizeof(resultCrc), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (applied != static_cast<uint32_t>(ringguard::SliceCheck::kOk)) {
      std::printf("  apply check: FAILED (verdict %u on an intact slot)\n", applied);
      return 1;
    }
    if (!noVerify) {
      std::vector<unsigned char> host(bytes);
      CHECK_CUDA(cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost));
      const uint32_t want = ringguard::crc32(host.data(), bytes);
      std::printf("  crc check: %s (device %08x, host %08x)\n", want == crc ? "ok" : "FAILED", crc, want);
      if (want != crc) return 1;
      CHECK_CUDA(cudaMemcpy(host.data(), sumData, count * 4, cudaMemcpyDeviceToHost));
      const uint32_t wantAcc = ringguard::crc32(host.data(), count * 4);
      std::printf("  fused crc check: %s (device %08x, host %08x)\n", wantAcc == resultCrc ? "ok" : "FAILED",
                  resultCrc, wantAcc);
      if (wantAcc != resultCrc) return 1;
      // The sealed copy: after kOk the verified CRC (that of the slot), and dst holds the slot; after a bad
      // verdict the CRC of dst as it then is (the same bytes here, copied by the good run).
      for (int bad = 0; bad < 2; ++bad) {
        apply.reduce = false;
        CHECK_OK(ringguard::verifyCopyCrcDevice(bad ? rejected : apply, accCrc, scratch, crcScratch, stream));
        apply.reduce = true;
        CHECK_CUDA(cudaMemcpyAsync(&applied, verdict, sizeof(applied), cudaMemcpyDeviceToHost, stream));
        CHECK_CUDA(cudaMemcpyAsync(&resultCrc, accCrc, sizeof(resultCrc), cudaMemcpyDeviceToHost, stream));
        CHECK_CUDA(cudaStreamSynchronize(stream));
        std::vector<unsigned char> slotHost(count * 4);
        CHECK_CUDA(cudaMemcpy(host.data(), sumData, count * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(slotHost.data(), scanData, count * 4, cudaMemcpyDeviceToHost));
        const uint32_t wantCopy = ringguard::crc32(host.data(), count * 4);
        const bool ok = resultCrc == wantCopy && std::equal(slotHost.begin(), slotHost.end(), host.begin()) &&
                        (applied == static_cast<uint32_t>(ringguard::SliceCheck::kOk)) == (bad == 0);
        std::printf("  sealed copy check (%s): %s (device %08x, host %08x, verdict %u)\n",
                    bad ? "rejected" : "ok", ok ? "ok" : "FAILED", resultCrc, wantCopy, applied);
        if (!ok) return 1;
      }
    }
  }

  CHECK_OK(pool->free(src, stream));
  CHECK_OK(pool->free(dst, stream));
  CHECK_OK(pool->free(acc, stream));
  CHECK_OK(pool->free(scratch, stream));
  CHECK_OK(pool->free(out, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamDestroy(stream));
  pool.reset();
  std::printf(
      "\nsummary: crc_vs_copy=%.3f nanscan_vs_copy=%.3f fused_vs_two_pass=%.3f copy_sealed_vs_fused=%.3f\n",
      crcRatio, scanRatio, fusedRatio, sealedRatio);
  return 0;
}
