// The launchers' shared host code (peer_launch.h) and the chunk-CRC test kernel (peer_collectives.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/reduce.h"
#include "cuda/cuda_check.h"
#include "cuda/peer/peer_device.cuh"
#include "cuda/peer/peer_launch.h"
#include "ringguard/core/crc32.h"

namespace ringguard {
namespace peer {
namespace {

// A literal, so scripts/regcheck.py reads the kernel's bounds from this file.
constexpr int kBlockThreads = 512;
static_assert(kBlockThreads == kThreads, "the block size of peer_device.cuh");

}  // namespace

Status checkWindowArgs(const PeerWindowArgs& args, const char* what, size_t publishedBytes) {
  const std::string name = std::string("peer ") + what + ": ";
  if (args.size < 1 || args.size > kMaxRanks || args.rank < 0 || args.rank >= args.size) {
    return Status(StatusCode::kInvalidArgument, name + "rank " + std::to_string(args.rank) + " of size " +
                                                    std::to_string(args.size) + " is out of range");
  }
  if (publishedBytes > args.layout.capacity) {
    return Status(StatusCode::kInvalidArgument,
                  name + std::to_string(publishedBytes) + " bytes exceed the window's " +
                      std::to_string(args.layout.capacity) + " bytes per collective");
  }
  for (int r = 0; r < args.size; ++r) {
    if (args.windows[r] == nullptr) {
      return Status(StatusCode::kInvalidArgument, name + "no window for rank " + std::to_string(r));
    }
  }
  if (args.record == nullptr) return Status(StatusCode::kInvalidArgument, name + "no error record");
  if (args.maxRereads < 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + "maxRereads " + std::to_string(args.maxRereads) + " is negative");
  }
  return Status::ok();
}

Status preloadPeerKernels() {
  RINGGUARD_RETURN_IF_ERROR(preloadAllreduceOneShot());
  RINGGUARD_RETURN_IF_ERROR(preloadAllreduceTwoShot());
  RINGGUARD_RETURN_IF_ERROR(preloadPeerAllgather());
  RINGGUARD_RETURN_IF_ERROR(preloadPeerBroadcast());
  RINGGUARD_RETURN_IF_ERROR(preloadPeerReduceScatter());
  RINGGUARD_RETURN_IF_ERROR(preloadPeerAlltoall());
  RINGGUARD_RETURN_IF_ERROR(preloadPeerDecline());
  RINGGUARD_RETURN_IF_ERROR(preloadPeerArrival());
  RINGGUARD_RETURN_IF_ERROR(preloadPeerAbortMark());
  RINGGUARD_RETURN_IF_ERROR(preloadPeerClock());
  return preloadPeerSendRecv();
}

Status peerGrid(size_t chunks, int size, int* blocks) {
  int device = 0, sms = 0;
  RINGGUARD_CUDA_CHECK(cudaGetDevice(&device));
  RINGGUARD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int maxBlocks = std::max(1, sms / std::max(1, size));
  *blocks = int(std::max<size_t>(1, std::min<size_t>((chunks + kWarps - 1) / kWarps, size_t(maxBlocks))));
  return Status::ok();
}

uint32_t peerFingerprintCrc(const PeerWindowArgs& args, PeerAlgorithm algorithm) {
  if (algorithm == PeerAlgorithm::kAllreduceOneShot) return crc32(args.fingerprint, sizeof args.fingerprint);
  uint32_t words[kFingerprintWords + 1];
  std::copy(std::begin(args.fingerprint), std::end(args.fingerprint), words);
  words[kFingerprintWords] = 0x50000000u | uint32_t(algorithm);
  return crc32(words, sizeof words);
}

Status launchPeerAllreduce(const PeerAllreduceArgs& args, void* stream) {
  const size_t totalBytes = args.count * dataTypeSize(args.dtype);
  RINGGUARD_RETURN_IF_ERROR(checkWindowArgs(args, "allreduce", totalBytes));
  if (!reduceSupported(args.dtype, args.op)) {
    return Status(StatusCode::kInvalidArgument, std::string("peer allreduce: ") + reduceOpName(args.op) +
                                                    " does not reduce " + dataTypeName(args.dtype));
  }
  if (args.count != 0 && (args.send == nullptr || args.recv == nullptr)) {
    return Status(StatusCode::kInvalidArgument, "peer allreduce: null buffer");
  }
  switch (args.algorithm) {
    case PeerAlgorithm::kAllreduceOneShot:
      return launchAllreduceOneShot(args, stream);
    case PeerAlgorithm::kAllreduceTwoShot:
      return launchAllreduceTwoShot(args, stream);
    default:
      return Status(StatusCode::kInvalidArgument, "peer allreduce: algorithm " +
                                                      std::to_string(uint32_t(args.algorithm)) +
                                                      " is not an allreduce (one-shot 0 or two-shot 1)");
  }
}

namespace {

__global__ void __launch_bounds__(kBlockThreads)
    chunkCrcKernel(const uint4* data, size_t chunks, uint32_t* out) {
  stageCrcTables();
  crcTablesArrived();
  __syncthreads();
  const uint32_t lane = threadIdx.x & 31u;
  const size_t warp = blockIdx.x * kWarps + threadIdx.x / 32;
  if (warp >= chunks) return;
  uint4 vec[kLaneVectors];
#pragma unroll
  for (int v = 0; v < kLaneVectors; ++v) vec[v] = data[warp * kPieces + v * 32 + lane];
  const uint32_t crc = warpChunkCrc(vec);
  if (lane == 0) out[warp] = crc;
}

}  // namespace

Status peerChunkCrcForTest(const void* data, size_t bytes, uint32_t* crcOut) {
  if (bytes % kChunkBytes != 0) {
    return Status(StatusCode::kInvalidArgument, "peerChunkCrcForTest: bytes must be whole chunks");
  }
  const size_t chunks = bytes / kChunkBytes;
  if (chunks == 0) return Status::ok();
  uint32_t* out = nullptr;
  RINGGUARD_CUDA_CHECK(cudaMalloc(&out, chunks * sizeof(uint32_t)));
  chunkCrcKernel<<<unsigned((chunks + kWarps - 1) / kWarps), kThreads>>>(static_cast<const uint4*>(data),
                                                                         chunks, out);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t copied = launched == cudaSuccess
                                 ? cudaMemcpy(crcOut, out, chunks * sizeof(uint32_t), cudaMemcpyDeviceToHost)
                                 : launched;
  cudaFree(out);
  RINGGUARD_CUDA_CHECK(copied);
  return Status::ok();
}

}  // namespace peer
}  // namespace ringguard
