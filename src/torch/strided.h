#pragma once
// Tensors of any strides in the c10d backend (docs/TORCH.md, "Tensors of any strides"). Private to the
// torch layer.
//
// The engine moves contiguous memory. gloo and NCCL take channels_last tensors (a channels_last model's
// gradients, reduced by hand), gloo takes other views too; a user expects `dist.all_reduce(t)` to reduce t
// whatever its strides. So a tensor that is not contiguous travels through a contiguous copy, and moves by
// its logical elements (a rank's channels_last tensor and another rank's contiguous one agree): an input is
// read from its copy, an output is written into its copy, which is copied back into the caller's tensor
// when the collective has succeeded (on the caller's stream for CUDA tensors, as every copy-out).
#include <ATen/ATen.h>

#include <functional>
#include <utility>
#include <vector>

namespace ringguard {

// Refuses a tensor whose elements share memory (an expanded or broadcast view) as the output of `op`: its
// elements can't each receive a result (torch's in-place ops refuse it too).
void checkWritable(const char* op, const at::Tensor& t);

// Copies `flat` (contiguous, 1-D, the tensor's dtype or its bytes as uint8, at any byte offset) into `t`,
// whatever t's strides.
void copyInto(const at::Tensor& t, const at::Tensor& flat);

// The collective's outputs as contiguous tensors: each output as it is when it is contiguous, else a
// contiguous copy (holding the output's values: a collective skipped under RINGGUARD_NAN_CHECK=skip leaves
// them as they were) that after() copies back.
class ContiguousOutputs {
 public:
  explicit ContiguousOutputs(const char* op) : op_(op) {}

  at::Tensor operator()(const at::Tensor& t);

  // What launch() runs on success: `then` (copy-outs of the op's own, which write the caller's tensors),
  // then the copies back; null when there is nothing to run.
  std::function<void()> after(std::function<void()> then = nullptr) const;

 private:
  const char* op_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_;  // (caller's tensor, its contiguous copy)
};

}  // namespace ringguard
