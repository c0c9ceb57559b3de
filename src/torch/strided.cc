#include "torch/strided.h"

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <sstream>

namespace ringguard {

void checkWritable(const char* op, const at::Tensor& t) {
  if (t.is_contiguous() || at::has_internal_overlap(t) != at::MemOverlap::Yes) return;
  std::ostringstream s;
  s << c10::toString(t.scalar_type()) << " tensor on " << t.device() << " of sizes " << t.sizes()
    << " and strides " << t.strides();
  TORCH_CHECK(false, "ringguard: ", op, ": the output ", s.str(),
              " has elements that share memory (an expanded or broadcast view), so they can't each receive "
              "a result; pass a tensor that owns its elements (.clone())");
}

void copyInto(const at::Tensor& t, const at::Tensor& flat) {
  if (flat.scalar_type() == t.scalar_type()) {
    t.copy_(flat.view(t.sizes()));
  } else if (t.is_contiguous()) {
    t.view({-1}).view(at::kByte).copy_(flat);  // bytes into bytes
  } else {
    // Bytes whose offset in their buffer need not suit t's dtype (a mixed all_to_all list): a fresh copy
    // does.
    t.copy_(flat.clone().view(t.scalar_type()).view(t.sizes()));
  }
}

at::Tensor ContiguousOutputs::operator()(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  checkWritable(op_, t);
  at::Tensor copy = t.contiguous();
  copies_.emplace_back(t, copy);
  return copy;
}

std::function<void()> ContiguousOutputs::after(std::function<void()> then) const {
  if (copies_.empty()) return then;
  return [then = std::move(then), copies = copies_]() {
    if (then) then();
    for (const auto& [t, copy] : copies) t.copy_(copy);
  };
}

}  // namespace ringguard
