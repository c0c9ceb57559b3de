// The replica check's gate over the CUDA layer (docs/REPLICAS.md, "The gate"): the release and deadline
// words live in mapped pinned memory (the host writes one, the kernel the other); the gate kernel itself
// writes each check's gathered words into one of kSlots pinned slots, then the check's epoch beside them,
// which the verdict thread polls (no copy and no event on the training thread: ~15 us of its host time a
// check on an H100's host).
#include "cuda/replica_gate.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
// Between the verdict thread's reads of a slot's epoch: the kernel that writes it runs behind the step the
// training thread queued before the check, so its wait is for the GPU's progress.
constexpr auto kPoll = std::chrono::microseconds(20);
constexpr uint64_t kPollsPerHealthCheck = 2500;  // at least 50 ms apart

class DeviceReplicaGate;

// One check's gathered words in a pinned slot; freeing the pending frees the slot.
class SlotPending final : public ReplicaPending {
 public:
  SlotPending(DeviceReplicaGate* gate, int slot, size_t words, uint64_t epoch)
      : gate_(gate), slot_(slot), words_(words), epoch_(epoch) {}
  ~SlotPending() override;
  bool ready() override;
  Status take(std::vector<uint32_t>* all) override;

 private:
  DeviceReplicaGate* gate_;
  int slot_;
  size_t words_;
  uint64_t epoch_;
};

class DeviceReplicaGate final : public ReplicaGate {
 public:
  struct Slot {
    // Pinned, from pinned_: the epoch whose words are there (the kernel's last store), then the words.
    uint64_t* block = nullptr;
    uint64_t* blockOnDevice = nullptr;  // the same, as the kernel addresses it
    size_t capacity = 0;                // words
    bool busy = false;
    const volatile uint64_t* copied() const { return block; }
    const uint32_t* words() const { return reinterpret_cast<const uint32_t*>(block + 1); }
  };

  ~DeviceReplicaGate() override {
    release(kOpenAll);  // no kernel may wait on words about to be freed
    cuda_detail::DeviceGuard onDevice(device_);
    (void)cudaDeviceSynchronize();  // the gates still queued end before their memory goes
    if (words_ != nullptr) (void)cudaFreeHost(words_);
    if (health_ != nullptr) (void)cudaStreamDestroy(health_);
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
    if (st.isOk() && cudaStreamCreateWithFlags(&health_, cudaStreamNonBlocking) != cudaSuccess)
      st = Status(StatusCode::kInternal, "replica gate: cudaStreamCreate failed");
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
    if (st.isOk()) {
      ReplicaGateArgs a;
      a.words = words;
      a.wordsPerRank = wordsPerRank;
      a.ranks = ranks;
      a.epoch = epoch;
      a.copy = reinterpret_cast<uint32_t*>(sl.blockOnDevice + 1);
      a.copied = sl.blockOnDevice;
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
    *out = std::make_unique<SlotPending>(this, slot, total, epoch);
    return Status::ok();
  }

  // `slot` (free) with room for `words` words of pinned memory, from the CUDA layer's pinned pool, and the
  // device's address of it (page-locked memory is mapped under unified addressing).
  Status grow(Slot* slot, size_t words) {
    RINGGUARD_RETURN_IF_ERROR(pinned_.free(slot->block));
    slot->block = nullptr;
    slot->blockOnDevice = nullptr;
    slot->capacity = 0;
    void* p = nullptr;
    RINGGUARD_RETURN_IF_ERROR(pinned_.allocate(sizeof(uint64_t) + words * sizeof(uint32_t), &p));
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess || attr.devicePointer == nullptr) {
      cudaGetLastError();
      (void)pinned_.free(p);
      return Status(StatusCode::kInternal,
                    "replica gate: its pinned slot has no device address (no unified addressing?)");
    }
    slot->block = static_cast<uint64_t*>(p);
    slot->block[0] = 0;  // no epoch's words yet
    slot->blockOnDevice = static_cast<uint64_t*>(attr.devicePointer);
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
  // Relaxed capture mode: its calls must not invalidate a graph the training thread may be capturing.
  void bindThread() override {
    (void)cudaSetDevice(device_);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
  }

  bool ready(int slot, uint64_t epoch) {
    if (*slots_[slot].copied() != epoch) return false;
    std::atomic_thread_fence(std::memory_order_acquire);  // the words before the epoch that says so
    return true;
  }

  // Waits for the kernel's words (the verdict thread's wait): reads of host memory, and every ~50 ms a
  // query of an idle stream of the gate's own, which returns a device's sticky error (a kernel before the
  // gate faulted, so the gate never runs) as the event wait this replaced did; the verdict thread's capture
  // mode is relaxed (bindThread), so the query disturbs no graph capture on another thread. Once abandoned
  // (the checker stopping) it waits at most the gate's timeout more: a stream that never reaches the kernel
  // would otherwise hold the checker's join for good.
  Status take(int slot, size_t words, uint64_t epoch, std::vector<uint32_t>* all) {
    std::chrono::steady_clock::time_point giveUp = std::chrono::steady_clock::time_point::max();
    for (uint64_t polls = 1; !ready(slot, epoch); ++polls) {
      if (polls % kPollsPerHealthCheck == 0) {
        const cudaError_t e = cudaStreamQuery(health_);
        if (e != cudaSuccess && e != cudaErrorNotReady) {
          return Status(StatusCode::kInternal, "replica gate: the device failed while check " +
                                                   std::to_string(epoch) +
                                                   "'s words were awaited: " + cudaGetErrorString(e));
        }
      }
      if (abandoned_.load(std::memory_order_acquire)) {
        const auto now = std::chrono::steady_clock::now();
        if (giveUp == std::chrono::steady_clock::time_point::max()) {
          giveUp = now + std::chrono::nanoseconds(timeoutNs_);
        } else if (now > giveUp) {
          return Status(StatusCode::kTimeout, "replica gate: the checker stopped and check " +
                                                  std::to_string(epoch) +
                                                  "'s words did not arrive within RINGGUARD_TIMEOUT_MS");
        }
      }
      std::this_thread::sleep_for(kPoll);
    }
    all->assign(slots_[slot].words(), slots_[slot].words() + words);
    return Status::ok();
  }

  void abandon() override { abandoned_.store(true, std::memory_order_release); }

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
  std::atomic<bool> abandoned_{false};
  cudaStream_t health_ = nullptr;    // never given work: take()'s query of the device's health
  uint64_t* words_ = nullptr;        // mapped pinned: [0] release, [1] expired
  uint64_t* deviceWords_ = nullptr;  // the same, as the kernel addresses them
  std::mutex releaseMu_;
  std::mutex mu_;
  std::condition_variable freed_;
  PinnedHostPool pinned_;  // the slots' words (declared before them: it frees its blocks after they go)
  Slot slots_[kSlots];
};

SlotPending::~SlotPending() { gate_->freeSlot(slot_); }
bool SlotPending::ready() { return gate_->ready(slot_, epoch_); }
Status SlotPending::take(std::vector<uint32_t>* all) { return gate_->take(slot_, words_, epoch_, all); }

}  // namespace

Status makeDeviceReplicaGate(const DeviceReplicaGateOptions& options, std::unique_ptr<ReplicaGate>* out) {
  auto gate = std::make_unique<DeviceReplicaGate>();
  RINGGUARD_RETURN_IF_ERROR(gate->init(options));
  *out = std::move(gate);
  return Status::ok();
}

}  // namespace ringguard
