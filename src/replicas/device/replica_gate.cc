// The replica check's gate over the CUDA layer (docs/REPLICAS.md, "The gate"): the release and deadline
// words live in mapped pinned memory (the host writes one, the kernel the other), each check's gathered
// words are copied into one of kSlots pinned slots with an event, which the verdict thread waits for.
#include "cuda/replica_gate.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/memory_pool.h"
#include "ringguard/replicas/gate.h"
#include "ringguard/replicas/replica_check.h"

namespace ringguard {
namespace {

// Checks whose words the verdict thread has not taken yet, at most: hold() waits for a slot beyond that, so
// it must be more than the steps the CPU runs ahead of the GPU (4 throttled the small GPT's training thread).
constexpr int kSlots = 64;

class DeviceReplicaGate;

// One check's gathered words in a pinned slot; freeing the pending frees the slot.
class SlotPending final : public ReplicaPending {
 public:
  SlotPending(DeviceReplicaGate* gate, int slot, size_t words) : gate_(gate), slot_(slot), words_(words) {}
  ~SlotPending() override;
  bool ready() override;
  Status take(std::vector<uint32_t>* all) override;

 private:
  DeviceReplicaGate* gate_;
  int slot_;
  size_t words_;
};

class DeviceReplicaGate final : public ReplicaGate {
 public:
  struct Slot {
    uint32_t* host = nullptr;  // pinned, from pinned_
    size_t capacity = 0;       // words
    cudaEvent_t copied = nullptr;
    bool busy = false;
  };

  ~DeviceReplicaGate() override {
    release(kOpenAll);  // no kernel may wait on words about to be freed
    cuda_detail::DeviceGuard onDevice(device_);
    (void)cudaDeviceSynchronize();  // the gates and copies still queued end before their memory goes
    for (Slot& s : slots_) {
      if (s.copied != nullptr) (void)cudaEventDestroy(s.copied);
    }
    if (words_ != nullptr) (void)cudaFreeHost(words_);
  }

  Status init(const DeviceReplicaGateOptions& o) {
    device_ = o.device;
    timeoutNs_ = o.timeoutNs;
    cuda_detail::DeviceGuard onDevice(device_);
    RINGGUARD_CUDA_CHECK(onDevice.error());
    Status st = Status::ok();
    void* mapped = nullptr;
    if (cudaHostAlloc(&mapped, 2 * sizeof(uint64_t), cudaHostAllocMapped) != cudaSuccess) {
      st = Status(StatusCode::kInternal, "replica gate: cudaHostAlloc of its mapped words failed");
    } else {
      words_ = static_cast<uint64_t*>(mapped);
      words_[0] = 0;  // release
      words_[1] = 0;  // expired
      void* onDevice = nullptr;
      if (cudaHostGetDevicePointer(&onDevice, mapped, 0) != cudaSuccess) {
        st = Status(StatusCode::kInternal, "replica gate: the mapped words have no device address");
      } else {
        deviceWords_ = static_cast<uint64_t*>(onDevice);
      }
    }
    for (Slot& s : slots_) {
      // A blocking event: the verdict thread sleeps in take() instead of spinning on a core beside the
      // training thread's.
      if (st.isOk() &&
          cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming | cudaEventBlockingSync) != cudaSuccess)
        st = Status(StatusCode::kInternal, "replica gate: cudaEventCreate failed");
    }
    if (!st.isOk()) cudaGetLastError();
    return st;
  }

  Status hold(const uint32_t* words, size_t wordsPerRank, int ranks, uint64_t epoch, void* stream,
              std::unique_ptr<ReplicaPending>* out) override {
    auto s = static_cast<cudaStream_t>(stream);
    const size_t total = wordsPerRank * size_t(ranks);
    int slot = -1;
    {
      std::unique_lock<std::mutex> lock(mu_);
      freed_.wait(lock, [&] {
        for (int i = 0; i < kSlots; ++i) {
          if (!slots_[i].busy) {
            slot = i;
            return true;
          }
        }
        return false;
      });
      slots_[slot].busy = true;
    }
    Slot& sl = slots_[slot];
    Status st = Status::ok();
    if (sl.capacity < total) {
      // A larger message than this slot held (the first check, or a model that grew): this slot and every
      // other free one grown now, at once (a page-locked allocation waits for the device: once, not at each
      // of the next kSlots checks). A free slot has no copy in flight, and only this thread takes slots.
      for (int i = 0; i < kSlots && st.isOk(); ++i) {
        bool free = i == slot;
        if (!free) {
          std::lock_guard<std::mutex> lock(mu_);
          free = !slots_[i].busy;
        }
        if (free && slots_[i].capacity < total) st = grow(&slots_[i], total);
      }
    }
    if (st.isOk() &&
        cudaMemcpyAsync(sl.host, words, total * sizeof(uint32_t), cudaMemcpyDeviceToHost, s) != cudaSuccess)
      st = Status(StatusCode::kInternal, "replica gate: the copy of the gathered words failed");
    if (st.isOk() && cudaEventRecord(sl.copied, s) != cudaSuccess)
      st = Status(StatusCode::kInternal, "replica gate: cudaEventRecord failed");
    if (st.isOk()) {
      ReplicaGateArgs a;
      a.words = words;
      a.wordsPerRank = wordsPerRank;
      a.ranks = ranks;
      a.epoch = epoch;
      a.release = deviceWords_;
      a.expired = deviceWords_ + 1;
      a.timeoutNs = timeoutNs_;
      st = launchReplicaGate(a, s);
    }
    if (!st.isOk()) {
      cudaGetLastError();
      freeSlot(slot);
      return st;
    }
    *out = std::make_unique<SlotPending>(this, slot, total);
    return Status::ok();
  }

  // `slot` (free) with room for `words` words of pinned memory, from the CUDA layer's pinned pool.
  Status grow(Slot* slot, size_t words) {
    RINGGUARD_RETURN_IF_ERROR(pinned_.free(slot->host));
    slot->host = nullptr;
    slot->capacity = 0;
    void* p = nullptr;
    RINGGUARD_RETURN_IF_ERROR(pinned_.allocate(words * sizeof(uint32_t), &p));
    slot->host = static_cast<uint32_t*>(p);
    slot->capacity = words;
    return Status::ok();
  }

  void release(uint64_t epoch) override {
    std::lock_guard<std::mutex> lock(releaseMu_);
    volatile uint64_t* r = words_;
    if (r != nullptr && epoch > *r) {
      std::atomic_thread_fence(std::memory_order_seq_cst);  // what the verdict thread wrote comes first
      *r = epoch;
    }
  }

  uint64_t expired() const override {
    if (words_ == nullptr) return 0;
    const volatile uint64_t* e = words_ + 1;
    return *e;
  }

  // The verdict thread's device, for good: its fingerprints and broadcasts run on this device's streams.
  void bindThread() override { (void)cudaSetDevice(device_); }

  bool ready(int slot) { return cudaEventQuery(slots_[slot].copied) == cudaSuccess; }

  Status take(int slot, size_t words, std::vector<uint32_t>* all) {
    RINGGUARD_CUDA_CHECK(cudaEventSynchronize(slots_[slot].copied));
    all->assign(slots_[slot].host, slots_[slot].host + words);
    return Status::ok();
  }

  void freeSlot(int slot) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots_[slot].busy = false;
    }
    freed_.notify_all();
  }

 private:
  int device_ = 0;
  uint64_t timeoutNs_ = 0;
  uint64_t* words_ = nullptr;        // mapped pinned: [0] release, [1] expired
  uint64_t* deviceWords_ = nullptr;  // the same, as the kernel addresses them
  std::mutex releaseMu_;
  std::mutex mu_;
  std::condition_variable freed_;
  PinnedHostPool pinned_;  // the slots' words (declared before them: it frees its blocks after they go)
  Slot slots_[kSlots];
};

SlotPending::~SlotPending() { gate_->freeSlot(slot_); }
bool SlotPending::ready() { return gate_->ready(slot_); }
Status SlotPending::take(std::vector<uint32_t>* all) { return gate_->take(slot_, words_, all); }

}  // namespace

Status makeDeviceReplicaGate(const DeviceReplicaGateOptions& options, std::unique_ptr<ReplicaGate>* out) {
  auto gate = std::make_unique<DeviceReplicaGate>();
  RINGGUARD_RETURN_IF_ERROR(gate->init(options));
  *out = std::move(gate);
  return Status::ok();
}

}  // namespace ringguard
