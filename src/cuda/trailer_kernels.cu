// The trailer kernels of the device executor (docs/design/protocol.md, "Executors"), one thread each:
//  * sealTrailerKernel / retagTrailerKernel: makeTrailer and sealTrailer;
//  * verifySliceKernel: the verdict of a slice received in place (nothing to apply), exactly checkSlice,
//    and its forwarding trailer.
// The build and check are core/trailer_check.h, the host's own (cuda/trailer_device.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/trailer.h"
#include "cuda/cuda_check.h"
#include "cuda/trailer_device.cuh"
#include "cuda/verify_reduce.h"

namespace ringguard {
namespace {

// ---- Launch geometry (scripts/regcheck.py reads the bounds from the __launch_bounds__ below) -----------
constexpr int kTrailerThreads = 32;

struct SealArgs {
  SliceId id;
  const uint32_t* crc;
  const uint32_t* verdictWord;  // may be null: flags 0
  Trailer* out;
};

__global__ void __launch_bounds__(kTrailerThreads, 1) sealTrailerKernel(const __grid_constant__ SealArgs a) {
  if (threadIdx.x != 0) return;
  const uint16_t flags =
      (a.verdictWord != nullptr && *a.verdictWord != static_cast<uint32_t>(SliceCheck::kOk))
          ? kTrailerPoisoned
          : uint16_t(0);
  *a.out = cuda_detail::makeTrailerDevice(a.id, *a.crc, flags);
}

// verifyInPlaceDevice: the verdict of bytes verified where they lie, and the trailer forwarding them.
struct VerifyArgs {
  const Trailer* trailer;
  const uint32_t* payloadCrc;
  SliceId expected;
  uint8_t* verdictByte;   // may be null
  uint32_t* verdictWord;  // may be null
  SliceId next;
  Trailer* sealOut;  // may be null
};

__global__ void __launch_bounds__(kTrailerThreads, 1)
    verifySliceKernel(const __grid_constant__ VerifyArgs a) {
  if (threadIdx.x != 0) return;
  const Trailer t = *a.trailer;
  const uint32_t crc = *a.payloadCrc;
  const SliceCheck verdict = cuda_detail::checkSliceDevice(t, a.expected, crc);
  if (a.verdictByte != nullptr) *a.verdictByte = static_cast<uint8_t>(verdict);
  if (a.verdictWord != nullptr) *a.verdictWord = static_cast<uint32_t>(verdict);
  if (a.sealOut != nullptr) {
    *a.sealOut = cuda_detail::makeTrailerDevice(a.next, crc,
                                                verdict == SliceCheck::kOk ? uint16_t(0) : kTrailerPoisoned);
  }
}

__global__ void __launch_bounds__(kTrailerThreads, 1) retagTrailerKernel(Trailer* t, uint16_t attempt) {
  if (threadIdx.x != 0) return;
  Trailer v = *t;
  v.attempt = attempt;
  cuda_detail::resealTrailerDevice(&v);
  *t = v;
}

}  // namespace

Status verifyInPlaceDevice(const DeviceVerify& v, cudaStream_t stream) {
  if (v.slotTrailer == nullptr || v.payloadCrc == nullptr) {
    return Status(StatusCode::kInvalidArgument, "verifyInPlaceDevice: null trailer or payload CRC pointer");
  }
  VerifyArgs args{};
  args.trailer = v.slotTrailer;
  args.payloadCrc = v.payloadCrc;
  args.expected = v.expected;
  args.verdictByte = v.verdictByte;
  args.verdictWord = v.verdictWord;
  args.next = v.next;
  args.sealOut = v.sealOut;
  verifySliceKernel<<<1, kTrailerThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status sealTrailerDevice(const SliceId& id, const uint32_t* crcDevice, const uint32_t* verdictWordDevice,
                         Trailer* outDevice, cudaStream_t stream) {
  if (crcDevice == nullptr || outDevice == nullptr) {
    return Status(StatusCode::kInvalidArgument, "sealTrailerDevice: null CRC or output pointer");
  }
  SealArgs args{};
  args.id = id;
  args.crc = crcDevice;
  args.verdictWord = verdictWordDevice;
  args.out = outDevice;
  sealTrailerKernel<<<1, kTrailerThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status retagTrailerDevice(Trailer* trailerDevice, uint16_t attempt, cudaStream_t stream) {
  if (trailerDevice == nullptr)
    return Status(StatusCode::kInvalidArgument, "retagTrailerDevice: null trailer");
  retagTrailerKernel<<<1, kTrailerThreads, 0, stream>>>(trailerDevice, attempt);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace ringguard
