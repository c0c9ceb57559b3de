// Pinned staging for small uploads (pinned_upload.h): blocks per device, each with the event recorded behind
// the copy that last read it.
#include "cuda/pinned_upload.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/memory_pool.h"

namespace ringguard {
namespace {

struct Block {
  int device = -1;
  void* host = nullptr;
  size_t capacity = 0;
  cudaEvent_t read = nullptr;  // recorded behind the copy that last read the block
};

// Whether the copy that last read `b` is done. An unfinished query leaves no error behind for the next
// launch check.
bool idle(const Block& b) {
  const cudaError_t err = cudaEventQuery(b.read);
  if (err == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

// Process-lifetime, never destroyed (CUDA may be torn down before static destructors run); its pinned memory
// comes from a PinnedHostPool, so the process's pool statistics count it.
struct Staging {
  std::mutex mu;
  PinnedHostPool pool;
  std::vector<Block> blocks;  // guarded by mu
};

Staging& staging() {
  static Staging* s = new Staging();
  return *s;
}

Status newBlock(Staging& s, int device, size_t bytes, Block* out) {
  Block b;
  b.device = device;
  b.capacity = PinnedHostPool::sizeClass(bytes);
  RINGGUARD_RETURN_IF_ERROR(s.pool.allocate(b.capacity, &b.host));
  const cudaError_t err = cudaEventCreateWithFlags(&b.read, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    (void)s.pool.free(b.host);
    return cuda_detail::cudaErrorStatus(err, "cudaEventCreateWithFlags", __FILE__, __LINE__);
  }
  *out = b;
  return Status::ok();
}

}  // namespace

Status pinnedUploadAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return Status::ok();
  if (dst == nullptr || src == nullptr) {
    return Status(StatusCode::kInvalidArgument, "pinnedUploadAsync: null source or destination");
  }
  // A captured copy would read the block at each replay, long after it was reused.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RINGGUARD_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return Status(StatusCode::kInvalidArgument,
                  "pinnedUploadAsync: the stream is being captured into a CUDA "
                  "graph; this upload cannot be part of one");
  }
  int device = 0;
  RINGGUARD_CUDA_CHECK(cudaGetDevice(&device));
  Staging& s = staging();
  const std::lock_guard<std::mutex> lock(s.mu);
  Block* use = nullptr;
  for (Block& b : s.blocks) {
    if (b.device == device && b.capacity >= bytes && idle(b)) {
      use = &b;
      break;
    }
  }
  if (use == nullptr) {
    Block b;
    RINGGUARD_RETURN_IF_ERROR(newBlock(s, device, bytes, &b));
    s.blocks.push_back(b);
    use = &s.blocks.back();
  }
  std::memcpy(use->host, src, bytes);
  RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(dst, use->host, bytes, cudaMemcpyHostToDevice, stream));
  RINGGUARD_CUDA_CHECK(cudaEventRecord(use->read, stream));
  return Status::ok();
}

}  // namespace ringguard
