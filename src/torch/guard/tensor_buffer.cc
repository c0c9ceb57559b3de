#include "torch/guard/tensor_buffer.h"

#include "ringguard/torch/convert.h"

namespace ringguard {

Status tensorBuffer(const at::Tensor& t, const std::string& name, GuardBuffer* out) {
  TensorRange r;
  RINGGUARD_RETURN_IF_ERROR(tensorRange(t, name, &r));
  *out = GuardBuffer{name, r.data, r.bytes, r.dtype, r.kind};
  return Status::ok();
}

Status tensorRange(const at::Tensor& t, const std::string& name, TensorRange* out) {
  if (!t.defined()) return Status(StatusCode::kInvalidArgument, "guard: tensor '" + name + "' is undefined");
  if (t.layout() != at::kStrided) {
    return Status(StatusCode::kInvalidArgument, "guard: tensor '" + name + "' has layout " +
                                                    c10::str(t.layout()) +
                                                    ": the guard takes dense (strided) tensors");
  }
  if (!t.is_contiguous()) {
    return Status(StatusCode::kInvalidArgument, "guard: tensor '" + name + "' is not contiguous (sizes " +
                                                    c10::str(t.sizes()) + ", strides " +
                                                    c10::str(t.strides()) +
                                                    "); pass .contiguous() or declare its base tensor");
  }
  DataType dtype;
  if (!toDataType(t.scalar_type(), &dtype)) {
    return Status(StatusCode::kInvalidArgument, std::string("guard: tensor '") + name + "' has dtype " +
                                                    c10::toString(t.scalar_type()) +
                                                    ", which the guard does not handle");
  }
  MemoryKind kind;
  if (t.device().is_cpu()) {
    kind = MemoryKind::kHost;
  } else if (t.device().is_cuda()) {
    kind = MemoryKind::kDevice;
  } else {
    return Status(StatusCode::kInvalidArgument,
                  "guard: tensor '" + name + "' is on " + t.device().str() + " (CPU and CUDA only)");
  }
  *out = TensorRange{t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), dtype, kind};
  return Status::ok();
}

Status tensorBuffers(const std::vector<std::pair<std::string, at::Tensor>>& list,
                     std::vector<GuardBuffer>* out) {
  for (const auto& [name, t] : list) {
    GuardBuffer b;
    RINGGUARD_RETURN_IF_ERROR(tensorBuffer(t, name, &b));
    out->push_back(b);
  }
  return Status::ok();
}

}  // namespace ringguard
