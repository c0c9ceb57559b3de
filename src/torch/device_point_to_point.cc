// send / recv of CUDA tensors on the device's peer windows (docs/TORCH.md, "Point-to-point"): when the
// group's CUDA communicator runs send/recv there (Communicator::sendRecvOnPeerWindows, agreed on every rank),
// a CUDA tensor's send or receive is an op of a grouped call (Communicator::sendRecvGroupAsync, which cannot
// deadlock whatever order each rank lists its ops in): the coalescing block's ops (batch_isend_irecv) are
// issued together at endCoalescing on the caller's current stream, a lone isend/irecv as a group of one (as
// NCCL's lone ops: a send waits for its receive to be posted, so lone ops need the same order on both ends).
// Each op's Work completes with its group's. Tags are not used (messages of a pair match in issue order, as
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
  auto rg = c10::make_intrusive<RgWork>(rank_, isSend ? c10d::OpType::SEND : c10d::OpType::RECV, op,
                                        std::vector<at::Tensor>{t}, future);
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
  issueDeviceP2p({{message, std::move(p)}}, t.device().index());
  return rg;
}

void ProcessGroupRingguard::issueDeviceP2p(
    std::vector<std::pair<P2pOp, std::shared_ptr<PendingCollective>>> ops, int device) {
#if RINGGUARD_TORCH_CUDA
  Communicator* comm = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopped_, "ringguard: send/recv after ", stoppedBy_);
    comm = cuda_.get();
  }
  const c10::cuda::CUDAGuard guard(device);
  void* stream = c10::cuda::getCurrentCUDAStream(device).stream();
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
  TORCH_CHECK(ops.empty(), "ringguard: send/recv of CUDA tensors in a build without CUDA");
#endif
}

}  // namespace ringguard
