#include "torch/guard/tensor_buffer.h"

namespace ringguard {

Status tensorBuffer(const at::Tensor& t, const std::string& name, GuardBuffer* out) {
  if (!t.defined()) return Status(StatusCode::kInvalidArgument, "guard: tensor '" + name + "' is undefined");
  if (!t.is_contiguous()) {
    return Status(StatusCode::kInvalidArgument, "guard: tensor '" + name + "' is not contiguous (sizes " +
                                                    c10::str(t.sizes()) + ", strides " +
                                                    c10::str(t.strides()) +
                                                    "); pass .contiguous() or declare its base tensor");
  }
  DataType dtype;
  switch (t.scalar_type()) {
    case at::kFloat:
      dtype = DataType::kFloat32;
      break;
    case at::kDouble:
      dtype = DataType::kFloat64;
      break;
    case at::kHalf:
      dtype = DataType::kFloat16;
      break;
    case at::kBFloat16:
      dtype = DataType::kBFloat16;
      break;
    case at::kInt:
      dtype = DataType::kInt32;
      break;
    case at::kLong:
      dtype = DataType::kInt64;
      break;
    case at::kByte:
    case at::kChar:
    case at::kBool:
      dtype = DataType::kUint8;
      break;
    default:
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
  *out = GuardBuffer{name, t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), dtype, kind};
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
