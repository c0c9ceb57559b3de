// send / recv / recv without a source (ProcessGroupRingguard::p2p): a tensor through host memory to the
// group's point-to-point lanes (ringguard/runtime/point_to_point.h), one verified message each, and the c10d
// Work that completes when the lane ran it.
#include "ringguard/runtime/point_to_point.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <exception>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "ringguard/torch/convert.h"
#include "ringguard/torch/process_group.h"
#include "torch/completion.h"
#include "torch/copy_view.h"
#include "torch/strided.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace ringguard {

// send/recv: the engine's verified point-to-point (ringguard/runtime/point_to_point.h), the tensor as its
// dtype (bytes where the engine has none). CUDA tensors are staged through host memory, unless the group's
// CUDA communicator runs send/recv on its peer windows (device_point_to_point.cc).
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::p2p(const char* op, at::Tensor& t, int peer, int tag,
                                                          bool isSend) {
  const bool any = peer == kAnySource && !isSend;
  TORCH_CHECK(any || (peer >= 0 && peer < size_ && peer != rank_), "ringguard: ", op, ": peer rank ", peer,
              " must be another rank in [0, ", size_, ")");
  TORCH_CHECK(!any || size_ > 1, "ringguard: recv without a source on rank ", rank_,
              ": the group has no other rank to receive from");
  TORCH_CHECK(tag >= 0, "ringguard: ", op, ": tag ", tag, " must be non-negative");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopped_, "ringguard: ", op, " after ", stoppedBy_);
  }
#if RINGGUARD_TORCH_CUDA
  if (t.is_cuda()) {
    // A receive from any source only asks (making the CUDA communicator is collective, and this rank's peers
    // are not in this call): its sender's send would take the windows, where nothing receives without one.
    Communicator* comm = nullptr;
    const bool windows = peerSendRecv(t, op, /*make=*/!any, &comm);
    TORCH_CHECK(
        !(any && windows), "ringguard: recv without a source of a CUDA tensor on rank ", rank_,
        ": send/recv of CUDA tensors runs on the device's peer windows (RINGGUARD_DEVICE_TRANSPORT=peer), "
        "where every receive names its source (as NCCL's); name the source rank, receive into a CPU "
        "tensor, or choose another RINGGUARD_DEVICE_TRANSPORT");
    if (windows) return deviceP2p(op, t, peer, isSend, comm);
  }
#endif
  releaseHeldP2p();  // held lone send/recv of CUDA tensors go first
  std::vector<c10::Device> devices;
  int device = -1;
  void* stream = nullptr;
#if RINGGUARD_TORCH_CUDA
  if (t.is_cuda()) {
    devices.push_back(t.device());
    device = t.device().index();
    stream = c10::cuda::getCurrentCUDAStream(device).stream();
  }
#endif
  // Host memory the message moves through, contiguous: the tensor itself, or a copy (made on the caller's
  // stream for CUDA) that a receive copies into the tensor.
  if (!isSend) checkWritable(op, t);
  const bool copied = t.is_cuda() || !t.is_contiguous();
  at::Tensor host = !copied  ? t
                    : isSend ? t.to(at::kCPU).contiguous()
                             : at::empty(t.sizes(), t.options().device(at::kCPU));
  auto future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
  auto rg = c10::make_intrusive<RgWork>(rank_, isSend ? c10d::OpType::SEND : c10d::OpType::RECV, op,
                                        std::vector<at::Tensor>{t}, future);
  auto done = [rg, future, t, host, device, stream, isSend, copied](const Status& st, int source) mutable {
    // The lanes run this on their thread and destroys it later: what it holds is released here, inside
    // the window, since after complete() the caller may return and the interpreter finalise (completion.h).
    const ExitWindow window;
    std::exception_ptr error;
    if (!st.isOk()) error = toException(st);
    try {
#if RINGGUARD_TORCH_CUDA
      std::optional<c10::cuda::CUDAStreamGuard> guard;
      if (device >= 0) {
        guard.emplace(
            c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), c10::DeviceIndex(device)));
      }
#endif
      if (!error && source >= 0) rg->setSourceRank(source);  // before the Work completes: wait() reads it
      if (!error && !isSend && copied) {
        const at::NoGradGuard noGrad;  // as the collectives' copy-outs (completion.cc)
        t.copy_(host, /*non_blocking=*/false);
      }
      if (error) {
        future->setError(error);
      } else {
        future->markCompleted(c10::IValue(std::vector<at::Tensor>{t}));
      }
    } catch (...) {
      if (!error) error = std::current_exception();
      if (!future->completed()) future->setError(error);
    }
    rg->complete(error);
    auto held = std::make_tuple(std::move(rg), std::move(future), std::move(t), std::move(host));
    if (!window.open()) keepForExit(std::move(held));  // the interpreter is exiting: see completion.h
  };
  // As its dtype where the engine has one, so that the fingerprint compares dtypes as well as sizes (a
  // receive of another dtype of the same bytes fails both sides); else as bytes.
  const CopyView elements = copyViewOf(host);  // contiguous already: a view, no copy
  if (any) {
    p2p_->recvAny(tag, host.data_ptr(), elements.count, elements.dtype, std::move(done));
  } else if (isSend) {
    p2p_->send(peer, tag, host.data_ptr(), elements.count, elements.dtype,
               [done](const Status& st) mutable { done(st, -1); });
  } else {
    p2p_->recv(peer, tag, host.data_ptr(), elements.count, elements.dtype,
               [done, peer](const Status& st) mutable { done(st, peer); });
  }
  coalesce(rg);
  return rg;
}

}  // namespace ringguard
