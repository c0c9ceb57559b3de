#include "torch/copy_view.h"

#include "ringguard/torch/convert.h"

namespace ringguard {

at::Tensor bytesOf(const at::Tensor& t) { return t.contiguous().view({-1}).view(at::kByte); }

CopyView copyViewOf(const at::Tensor& t) {
  CopyView v;
  if (toDataType(t.scalar_type(), &v.dtype)) {
    v.flat = t.contiguous().view({-1});
  } else {
    v.flat = bytesOf(t);
    v.dtype = DataType::kUint8;
  }
  v.count = size_t(v.flat.numel());
  return v;
}

}  // namespace ringguard
