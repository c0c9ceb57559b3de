// send / recv of CUDA tensors on the device's peer windows (docs/TORCH.md, "Point-to-point"): when the
// group's CUDA communicator runs send/recv there (Communicator::sendRecvOnPeerWindows, agreed on every rank),
// a CUDA tensor's send or receive is an op of a grouped call (Communicator::sendRecvGroupAsync, which cannot
// deadlock whatever order each rank lists its ops in). A coalescing block's ops (batch_isend_irecv) are
// issued together at endCoalescing on the caller's current stream. Lone isend/irecv are held, and issued
// together as one grouped call when the rank waits on one of them (wait, is_completed, get_future,
// synchronize) or calls anything else on the group (a collective, a CPU send/recv, a block, destroy), or
// holds one for another stream or device. Issued one at a time, a ring exchange (every rank: irecv from the
// left, isend to the right, then wait) would deadlock: each rank's receive would hold its stream until the
// left rank's send, queued on that rank's stream behind its own receive (ProcessGroupNCCL avoids it with a
// stream per peer pair; the peer path runs its kernels in issue order on one chain, stream_chain.h). Each
// op's Work completes with its group's. Tags are not used (messages of a pair match in issue order, as
// NCCL's); a receive from any source is refused in p2p().
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <mutex>
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

// The held lone ops (see the top of this file). `mutex` also serialises the releases, so groups are issued
// in the order their ops were held.
struct ProcessGroupRingguard::HeldDeviceP2p {
  std::mutex mutex;
  ProcessGroupRingguard* group = nullptr;  // null once the group stopped
  std::vector<std::pair<P2pOp, std::shared_ptr<PendingCollective>>> ops;
  int device = -1;
  void* stream = nullptr;  // the caller's current stream when the ops were held (one for all)

  // Issues what is held as one grouped call. An error before the call is issued fails the held ops'
  // Works (their wait() raises it): no Work is left that nothing will complete. Caller holds mutex.
  void releaseLocked() {
    if (ops.empty()) return;
    std::vector<std::pair<P2pOp, std::shared_ptr<PendingCollective>>> taken;
    taken.swap(ops);
    if (group == nullptr) {
      failAll(taken, Status(StatusCode::kAborted, "send/recv held when its process group stopped"));
      return;
    }
    try {
      group->issueDeviceP2p(taken, device, stream);  // a copy: `taken` is what an exception fails
    } catch (const std::exception& e) {
      failAll(taken, Status(StatusCode::kInternal, e.what()));
    }
  }

  static void failAll(std::vector<std::pair<P2pOp, std::shared_ptr<PendingCollective>>>& failed,
                      const Status& why) {
    const std::exception_ptr error = toException(why);
    for (auto& op : failed) {
      op.second->future->setError(error);
      op.second->c10dWork->complete(error);
    }
    failed.clear();
  }
};

namespace {

// A held op's Work: whatever asks after it releases the held ops first.
class HeldP2pWork final : public C10dWork {
 public:
  HeldP2pWork(int rank, c10d::OpType type, const char* title, std::vector<at::Tensor> outputs,
              c10::intrusive_ptr<c10::ivalue::Future> future, std::function<void()> release)
      : C10dWork(rank, type, title, std::move(outputs), std::move(future)), release_(std::move(release)) {}
  bool wait(std::chrono::milliseconds timeout) override {
    release_();
    return C10dWork::wait(timeout);
  }
  bool isCompleted() override {
    release_();
    return C10dWork::isCompleted();
  }
  void synchronize() override {
    release_();
    C10dWork::synchronize();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    release_();
    return C10dWork::getFuture();
  }

 private:
  const std::function<void()> release_;
};

}  // namespace

void ProcessGroupRingguard::releaseHeldP2p() {
  std::shared_ptr<HeldDeviceP2p> held;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    held = heldP2p_;
  }
  if (!held) return;
  std::lock_guard<std::mutex> lock(held->mutex);
  held->releaseLocked();
}

void ProcessGroupRingguard::endHeldP2p(bool abort) {
  std::shared_ptr<HeldDeviceP2p> held;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    held = heldP2p_;
  }
  if (!held) return;
  std::lock_guard<std::mutex> lock(held->mutex);
  if (abort) {
    HeldDeviceP2p::failAll(held->ops,
                           Status(StatusCode::kAborted, "send/recv held when its process group was aborted"));
  } else {
    held->releaseLocked();  // destroy_process_group: what the rank called is issued, as NCCL's would be
  }
  held->group = nullptr;
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
    }
    held = heldP2p_;
  }
  // In a block the op is issued at endCoalescing, and releasing the held ones (none: startCoalescing
  // released them) does nothing.
  auto rg = c10::make_intrusive<HeldP2pWork>(rank_, isSend ? c10d::OpType::SEND : c10d::OpType::RECV, op,
                                             std::vector<at::Tensor>{t}, future, [held] {
                                               std::lock_guard<std::mutex> lock(held->mutex);
                                               held->releaseLocked();
                                             });
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
  std::lock_guard<std::mutex> lock(held->mutex);
  if (!held->ops.empty() && (held->device != device || held->stream != stream)) held->releaseLocked();
  held->ops.emplace_back(message, std::move(p));
  held->device = device;
  held->stream = stream;
#else
  TORCH_CHECK(false, "ringguard: send/recv of CUDA tensors in a build without CUDA");
#endif
  return rg;
}

void ProcessGroupRingguard::issueDeviceP2p(
    std::vector<std::pair<P2pOp, std::shared_ptr<PendingCollective>>> ops, int device, void* stream) {
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
  for (auto& op : ops) {
    op.second->work = group;
    op.second->stream = stream;
    cudaLane_->push(std::move(op.second));
  }
#else
  (void)stream;
  TORCH_CHECK(ops.empty(), "ringguard: send/recv of CUDA tensors in a build without CUDA");
#endif
}

}  // namespace ringguard
