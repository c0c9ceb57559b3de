// send / recv of CUDA tensors on the device's peer windows (docs/TORCH.md, "Point-to-point"): when the
// group's CUDA communicator runs send/recv there (Communicator::sendRecvOnPeerWindows, agreed on every rank),
// a CUDA tensor's send or receive is an op of a grouped call (Communicator::sendRecvGroupAsync: rounds every
// rank runs in the same order, so a group cannot deadlock whatever order each rank lists its ops in, when
// both ends group the same ops). A coalescing block's ops (batch_isend_irecv) are issued together at
// endCoalescing on the caller's current stream.
//
// Lone ops are held, and issued together as one grouped call when released: by a wait on one of them
// (wait, is_completed, get_future), or by any other ringguard call of the thread that held them (a
// collective, a CPU send/recv, set_fault, destroy; a block takes them in; abort fails them), or by an op
// for another stream or device. Inside a CUDA graph capture an op is issued at once. Issued one at a time,
// a ring exchange (every rank: irecv from the left, isend to the right, then wait) and a send-first exchange
// (isend, then recv) would deadlock: each rank's first kernel would hold its stream until the peer's
// matching op, queued behind the peer's own first kernel (a send's kernel ends only once its receive is
// posted; ProcessGroupNCCL avoids it with a stream per peer pair; the peer path runs its kernels in issue
// order on one chain, stream_chain.h). Each op's Work completes with its group's. Tags are not used
// (messages of a pair match in issue order, as NCCL's); a receive from any source is refused in p2p().
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ringguard/torch/convert.h"
#include "ringguard/torch/process_group.h"
#include "torch/completion.h"
#include "torch/copy_view.h"
#include "torch/strided.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ringguard/runtime/device_factory.h"
#endif

namespace ringguard {

// One group's held lone ops (see the top of this file). `mutex` guards the fields and serialises the
// issues, so ops go out in the order the rank called them.
struct HeldDeviceP2p {
  std::mutex mutex;
  ProcessGroupRingguard* group = nullptr;  // null once the group stopped
  DeviceP2pOps ops;
  int device = -1;
  void* stream = nullptr;  // the caller's current stream when the ops were held (one for all)
  std::thread::id holder;  // the thread that held the first of `ops`
  uint64_t firstHeld = 0;  // when (a process-wide count): sets release in the order they were held

  // Issues `issued` as one grouped call on the group; the Status a failure leaves them with (failed by the
  // caller, after the lock). Caller holds mutex.
  Status issueLocked(const DeviceP2pOps& issued, int onDevice, void* onStream) {
    if (group == nullptr)
      return Status(StatusCode::kAborted, "send/recv held when its process group stopped");
    try {
      group->issueDeviceP2p(issued, onDevice, onStream);
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal, e.what());
    }
    return Status::ok();
  }
};

namespace {

// Every group's held ops, so that a thread's ringguard call releases what it holds on any group (it may
// block in that call, and a peer's send may wait on a receive it holds). Never destroyed: a late thread
// (a Future's callback at exit) may still reach it.
struct HeldRegistry {
  std::mutex mutex;
  std::vector<std::weak_ptr<HeldDeviceP2p>> sets;
  std::atomic<uint64_t> holds{0};
};
HeldRegistry& registry() {
  static HeldRegistry* r = new HeldRegistry;
  return *r;
}

// Issues what `held` holds. Nothing is completed or let go under the lock (a Future's callbacks may issue on
// the group, and the last reference to a tensor Python owns takes the GIL): `taken` goes after it.
void release(HeldDeviceP2p& held) {
  DeviceP2pOps taken;
  Status st;
  {
    std::lock_guard<std::mutex> lock(held.mutex);
    if (held.ops.empty()) return;
    taken.swap(held.ops);
    st = held.issueLocked(taken, held.device, held.stream);
  }
  if (!st.isOk()) failNotHandedOver(taken, st);
}

// Releases the sets the calling thread holds, and `also` whoever holds it, in the order they were held.
void releaseHeld(HeldDeviceP2p* also) {
  std::vector<std::shared_ptr<HeldDeviceP2p>> sets;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    for (const auto& w : registry().sets) {
      if (auto h = w.lock()) sets.push_back(std::move(h));
    }
  }
  const std::thread::id me = std::this_thread::get_id();
  std::vector<std::pair<uint64_t, HeldDeviceP2p*>> mine;
  for (const auto& h : sets) {
    std::lock_guard<std::mutex> lock(h->mutex);
    if (!h->ops.empty() && (h->holder == me || h.get() == also)) mine.emplace_back(h->firstHeld, h.get());
  }
  std::sort(mine.begin(), mine.end());
  for (const auto& m : mine) release(*m.second);
}

// A held op's Work: waiting on it, asking whether it is done or for its Future releases its group's held
// ops, and what the waiting thread holds elsewhere, first.
class HeldP2pWork final : public C10dWork {
 public:
  HeldP2pWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
              c10::intrusive_ptr<c10::ivalue::Future> future, std::shared_ptr<HeldDeviceP2p> held)
      : C10dWork(rank, type, title, std::move(outputs), std::move(future)), held_(std::move(held)) {}
  bool wait(std::chrono::milliseconds timeout) override {
    releaseHeld(held_.get());
    return C10dWork::wait(timeout);
  }
  bool isCompleted() override {
    releaseHeld(held_.get());
    return C10dWork::isCompleted();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    releaseHeld(held_.get());
    return C10dWork::getFuture();
  }

 private:
  const std::shared_ptr<HeldDeviceP2p> held_;
};

}  // namespace

void ProcessGroupRingguard::releaseHeldP2p() { releaseHeld(nullptr); }

DeviceP2pOps ProcessGroupRingguard::takeHeldForBlock(int* device) {
  std::shared_ptr<HeldDeviceP2p> held;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    held = heldP2p_;
  }
  DeviceP2pOps taken;
#if RINGGUARD_TORCH_CUDA
  if (!held) return taken;
  std::lock_guard<std::mutex> lock(held->mutex);
  if (held->ops.empty() || held->holder != std::this_thread::get_id() ||
      held->stream != c10::cuda::getCurrentCUDAStream(held->device).stream()) {
    return taken;
  }
  taken.swap(held->ops);
  *device = held->device;
#else
  (void)device;
#endif
  return taken;
}

void ProcessGroupRingguard::endDeviceP2p(bool abort) {
  std::shared_ptr<HeldDeviceP2p> held;
  DeviceP2pOps block;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    held = heldP2p_;
    block.swap(deviceP2p_);
  }
  failNotHandedOver(block, Status(StatusCode::kAborted,
                                  std::string("send/recv of a coalescing block that never ") +
                                      "reached endCoalescing, at " + (abort ? "abort()" : "shutdown()")));
  if (!held) return;
  DeviceP2pOps taken;
  Status st;
  {
    std::lock_guard<std::mutex> lock(held->mutex);
    taken.swap(held->ops);
    if (abort) {
      st = Status(StatusCode::kAborted, "send/recv held when its process group was aborted");
    } else if (!taken.empty()) {
      st = held->issueLocked(taken, held->device, held->stream);  // destroy: issued, as NCCL's would be
    }
    held->group = nullptr;
  }
  if (!st.isOk()) failNotHandedOver(taken, st);
}

bool ProcessGroupRingguard::peerSendRecv(const at::Tensor& t, const char* op, bool make,
                                         Communicator** comm) {
  *comm = nullptr;
#if RINGGUARD_TORCH_CUDA
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cuda_) {
      if (!cuda_->sendRecvOnPeerWindows()) return false;
    } else {
      // Only a device transport named "peer" can run send/recv on the windows (docs/GPU.md): the others keep
      // the lanes without making a CUDA communicator for it.
      cuda::DeviceOptions dev;
      if (!cuda::DeviceOptions::fromLookup([this](const char* name) { return option(name); }, &dev).isOk() ||
          dev.transport != cuda::DeviceTransportKind::kPeer || dev.peerP2pBytes == 0) {
        return false;
      }
      if (!make) return true;
    }
  }
  Communicator* c = communicatorFor(t, op);
  if (!c->sendRecvOnPeerWindows()) return false;
  *comm = c;
  return true;
#else
  return false;
#endif
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::deviceP2p(const char* op, at::Tensor& t, int peer,
                                                                bool isSend, Communicator* comm) {
  (void)comm;  // issueDeviceP2p reads the group's CUDA communicator, which `comm` is
  if (!isSend) checkWritable(op, t);
  // The message's contiguous device memory: the tensor itself, or a copy (a send's, made now on the caller's
  // stream; a receive's, copied into the tensor on that stream once the group is done).
  const bool copied = !t.is_contiguous();
  at::Tensor buffer = !copied ? t : isSend ? t.contiguous() : at::empty(t.sizes(), t.options());
  // As its dtype where the engine has one (the fingerprint compares dtypes as well as sizes), else bytes.
  const CopyView elements = copyViewOf(buffer);  // contiguous already: a view, no copy
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                         std::vector<c10::Device>{t.device()});
  std::shared_ptr<HeldDeviceP2p> held;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    if (!heldP2p_) {
      heldP2p_ = std::make_shared<HeldDeviceP2p>();
      heldP2p_->group = this;
      std::lock_guard<std::mutex> entry(registry().mutex);
      auto& sets = registry().sets;
      sets.erase(std::remove_if(sets.begin(), sets.end(), [](const auto& w) { return w.expired(); }),
                 sets.end());
      sets.push_back(heldP2p_);
    }
    held = heldP2p_;
  }
  // In a block the op is issued at endCoalescing; its Work's release finds nothing of the group held
  // (startCoalescing took that into the block).
  auto rg = c10::make_intrusive<HeldP2pWork>(rank_, isSend ? c10d::OpType::SEND : c10d::OpType::RECV, op,
                                             std::vector<at::Tensor>{t}, future, held);
  auto p = std::make_shared<PendingCollective>();
  p->c10dWork = rg;
  p->future = future;
  p->value = c10::IValue(std::vector<at::Tensor>{t});
  p->keep = {t, buffer};
  p->device = t.device().index();
  if (!isSend && copied) p->after = [t, buffer]() mutable { t.copy_(buffer); };
  const P2pOp message{isSend ? P2pOp::Kind::kSend : P2pOp::Kind::kRecv, peer, buffer.data_ptr(),
                      elements.count, elements.dtype};
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    if (coalescing_) {
      deviceP2p_.emplace_back(message, std::move(p));
      deviceP2pDevice_ = t.device().index();
      coalesced_.push_back(rg);
      return rg;
    }
  }
#if RINGGUARD_TORCH_CUDA
  const int device = t.device().index();
  void* stream = c10::cuda::getCurrentCUDAStream(device).stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  // A capture takes its ops when they are called: nothing is held across it (a query that fails counts).
  const bool capturing = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capture) != cudaSuccess ||
                         capture != cudaStreamCaptureStatusNone;
  if (capturing) (void)cudaGetLastError();
  DeviceP2pOps before, now;
  Status beforeSt, nowSt;
  {
    std::lock_guard<std::mutex> lock(held->mutex);
    // Ops held for another stream or device, or before a capture, go first, as their own group.
    if (!held->ops.empty() && (held->device != device || held->stream != stream || capturing)) {
      before.swap(held->ops);
      beforeSt = held->issueLocked(before, held->device, held->stream);
    }
    if (capturing) {
      now.emplace_back(message, std::move(p));
      nowSt = held->issueLocked(now, device, stream);
    } else {
      if (held->ops.empty()) {
        held->holder = std::this_thread::get_id();
        held->firstHeld = ++registry().holds;
      }
      held->ops.emplace_back(message, std::move(p));
      held->device = device;
      held->stream = stream;
    }
  }
  if (!beforeSt.isOk()) failNotHandedOver(before, beforeSt);
  if (!nowSt.isOk()) failNotHandedOver(now, nowSt);
#else
  TORCH_CHECK(false, "ringguard: send/recv of CUDA tensors in a build without CUDA");
#endif
  return rg;
}

void ProcessGroupRingguard::issueDeviceP2p(const DeviceP2pOps& ops, int device, void* stream) {
#if RINGGUARD_TORCH_CUDA
  Communicator* comm = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopped_, "ringguard: send/recv after ", stoppedBy_);
    comm = cuda_.get();
  }
  const c10::cuda::CUDAGuard guard(device);
  std::vector<P2pOp> list;
  list.reserve(ops.size());
  for (const auto& op : ops) list.push_back(op.first);
  std::shared_ptr<ringguard::Work> group = comm->sendRecvGroupAsync(list, stream);
  for (const auto& op : ops) {
    op.second->work = group;
    op.second->stream = stream;
    try {
      cudaLane_->push(op.second);
    } catch (...) {
      op.second->work.reset();  // not handed over: failNotHandedOver fails it
      throw;
    }
  }
#else
  (void)stream;
  TORCH_CHECK(ops.empty(), "ringguard: send/recv of CUDA tensors in a build without CUDA");
#endif
}

}  // namespace ringguard
