#include "torch/tensor_checks.h"

#include <c10/util/Exception.h>

#include <sstream>

#include "ringguard/torch/convert.h"

namespace ringguard {

std::string describe(const at::Tensor& t) {
  std::ostringstream s;
  s << c10::toString(t.scalar_type()) << " tensor on " << t.device();
  return s.str();
}

[[noreturn]] void unsupported(const char* op, const std::string& what) {
  TORCH_CHECK(
      false, "ringguard: ", op, " is not supported (", what,
      "); supported: allreduce, broadcast, allgather, all_gather_into_tensor, reduce_scatter, "
      "reduce_scatter_tensor, all_to_all, all_to_all_single, reduce, gather, scatter, barrier, send, recv, "
      "all_gather_coalesced, recv without a source");
}

std::string firstTensor(const std::vector<at::Tensor>& t) {
  return t.empty() ? "no tensors" : describe(t[0]);
}

at::Tensor firstOf(const std::vector<at::Tensor>& tensors) {
  return tensors.empty() ? at::Tensor() : tensors[0];
}

ReduceOp reduceOpFor(const char* name, const c10d::ReduceOp& rop, const at::Tensor& t, DataType dt) {
  ReduceOp op = ReduceOp::kSum;
  std::string why;
  if (!toReduceOp(rop, &op, &why)) unsupported(name, why + " on " + describe(t));
  if (!reduceSupported(dt, op)) {
    unsupported(name,
                std::string(c10dReduceOpName(rop)) + " on " + describe(t) +
                    " (floats: SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM; integers: those but PREMUL_SUM, and "
                    "BAND, BOR, BXOR; bool: SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR; complex: SUM, AVG, "
                    "PREMUL_SUM; float8: copy collectives only)");
  }
  return op;
}

void checkTensor(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "ringguard: ", op, ": undefined tensor");
  if (t.is_sparse()) unsupported(op, "sparse " + describe(t));
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "ringguard: ", op, ": ", describe(t),
              ": only cpu and cuda tensors are supported");
}

void checkSingle(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "ringguard: ", op, ": expects exactly one tensor per call, got ",
              tensors.size());
  checkTensor(op, tensors[0]);
}

}  // namespace ringguard
