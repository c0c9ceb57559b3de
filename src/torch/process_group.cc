#include "ringguard/torch/process_group.h"

// The c10d overrides of the "ringguard" backend: each checks its tensors (torch/tensor_checks.h), lays them
// out for the engine (torch/copy_view.h, torch/strided.h) and launches one collective (work_launch.cc). The
// group's creation and the choice of its bootstraps are in process_group_create.cc, send/recv's body in
// point_to_point.cc, the staged variants in staged_collectives.cc, monitored_barrier in monitored_barrier.cc,
// what Python reads and sets beyond c10d in process_group_controls.cc, the handler of rejected calls in
// rejection.cc.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <utility>

#include "ringguard/torch/convert.h"
#include "torch/copy_view.h"
#include "torch/rejection.h"
#include "torch/strided.h"
#include "torch/tensor_checks.h"

namespace ringguard {

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupRingguard::getBackendOptions() {
  return c10::make_intrusive<Backend::Options>("ringguard", options_.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allreduce(std::vector<at::Tensor>& tensors,
                                                                const c10d::AllreduceOptions& opts) try {
  const RejectionScope scope;
  checkSingle("allreduce", tensors);
  ContiguousOutputs dense("allreduce");
  const at::Tensor t = dense(tensors[0]);
  DataType dt;
  ReduceOp op;
  if (!toDataType(t.scalar_type(), &dt)) {
    unsupported("allreduce", "dtype of " + describe(t) +
                                 "; allreduce takes float32, float64, float16, bfloat16, int8, int16, "
                                 "int32, int64, uint8, bool, complex64 and complex128");
  }
  op = reduceOpFor("allreduce", opts.reduceOp, t, dt);
  premulOnOneRank(t, &op, /*inPlace=*/true);
  if (stagedSelected("all_reduce", t))
    return launch("allreduce", t, stagedAllreduceStart({t}, {dt}, op), tensors, dense.after());
  return launchAllreduce("allreduce", t, size_t(t.numel()), dt, op, tensors, dense.after());
} catch (...) {
  rejected(CollectiveKind::kAllreduce, firstOf(tensors), RejectedSize::kPublished);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::broadcast(std::vector<at::Tensor>& tensors,
                                                                const c10d::BroadcastOptions& opts) try {
  const RejectionScope scope;
  checkSingle("broadcast", tensors);
  TORCH_CHECK(opts.rootTensor == 0, "ringguard: broadcast: rootTensor must be 0");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "ringguard: broadcast: root rank ", opts.rootRank,
              " is outside [0, ", size_, ")");
  ContiguousOutputs dense("broadcast");
  const at::Tensor t = dense(tensors[0]);
  // The native pipelined chain: any dtype, verified slice by slice like every collective.
  const CopyView v = copyViewOf(t);
  void* data = v.flat.data_ptr();
  const size_t n = v.count;
  const DataType dt = v.dtype;
  const int root = int(opts.rootRank);
  return launch(
      "broadcast", v.flat,
      [=](Communicator* comm, void* stream) { return comm->broadcastAsync(data, data, n, dt, root, stream); },
      tensors, dense.after());
} catch (...) {
  rejected(CollectiveKind::kBroadcast, firstOf(tensors), RejectedSize::kPublished);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::AllgatherOptions& opts) try {
  const RejectionScope scope;
  checkSingle("allgather", inputs);
  TORCH_CHECK(outputs.size() == 1, "ringguard: allgather: expects one output list, got ", outputs.size());
  const at::Tensor& in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  TORCH_CHECK(int(outs.size()) == size_, "ringguard: allgather: the output list has ", outs.size(),
              " tensors, the group has ", size_, " ranks");
  for (const auto& o : outs) {
    checkTensor("allgather", o);
    checkWritable("allgather", o);
    TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type() && o.device() == in.device(),
                "ringguard: allgather: output ", describe(o), " of ", o.numel(),
                " elements does not match the input ", describe(in), " of ", in.numel());
  }
  // The native ring all-gather into one flat buffer (every block verified where it lands), then copied
  // out into the list.
  const CopyView v = copyViewOf(in);
  at::Tensor mine = v.flat;
  const int64_t n = int64_t(v.count);
  const DataType dt = v.dtype;
  at::Tensor flat = at::empty({n * size_}, mine.options());
  // A skipped collective (RINGGUARD_NAN_CHECK=skip) leaves its output as it was: here the list, which is
  // copied out of `flat` after it, so `flat` starts as the list.
  if (options_.nanCheck == NanCheck::kSkip) {
    for (size_t r = 0; r < outs.size(); ++r)
      flat.narrow(0, n * int64_t(r), n).copy_(copyViewOf(outs[r]).flat);
  }
  auto after = [outs, flat, n]() {
    for (size_t r = 0; r < outs.size(); ++r) copyInto(outs[r], flat.narrow(0, n * int64_t(r), n));
  };
  Start start = stagedSelected("all_gather", flat)
                    ? stagedAllgatherStart(mine, flat, size_t(n), dt)
                    : [mine, flat, n, dt](Communicator* comm, void* stream) {
                        return comm->allgatherAsync(mine.data_ptr(), flat.data_ptr(), size_t(n), dt, stream);
                      };
  return launch("allgather", flat, std::move(start), outs, after, /*nestedOutputs=*/true, {mine});
} catch (...) {
  rejected(CollectiveKind::kAllgather, firstOf(inputs), RejectedSize::kPublished);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) try {
  const RejectionScope scope;
  checkTensor("all_gather_into_tensor", input);
  checkTensor("all_gather_into_tensor", output);
  TORCH_CHECK(output.numel() == input.numel() * size_ && output.scalar_type() == input.scalar_type() &&
                  output.device() == input.device(),
              "ringguard: all_gather_into_tensor: output ", describe(output), " of ", output.numel(),
              " elements must hold ", size_, " x the input ", describe(input), " of ", input.numel());
  ContiguousOutputs dense("all_gather_into_tensor");
  const CopyView out = copyViewOf(dense(output));
  CopyView v = copyViewOf(input);
  const int64_t n = int64_t(v.count);
  const int64_t nb = n * int64_t(v.flat.element_size());
  // The input may be this rank's block of the output (in place, as FSDP does); any other overlap is copied.
  const auto* own = static_cast<const uint8_t*>(out.flat.data_ptr()) + nb * rank_;
  const auto* in0 = static_cast<const uint8_t*>(v.flat.data_ptr());
  const auto* out0 = static_cast<const uint8_t*>(out.flat.data_ptr());
  if (in0 != own && nb > 0 && in0 < out0 + nb * size_ && out0 < in0 + nb) v.flat = v.flat.clone();
  at::Tensor mine = v.flat, dst = out.flat;
  const DataType dt = v.dtype;
  Start start = stagedSelected("all_gather", dst)
                    ? stagedAllgatherStart(mine, dst, size_t(n), dt)
                    : [mine, dst, n, dt](Communicator* comm, void* stream) {
                        return comm->allgatherAsync(mine.data_ptr(), dst.data_ptr(), size_t(n), dt, stream);
                      };
  return launch("all_gather_into_tensor", dst, std::move(start), {output}, dense.after(),
                /*nestedOutputs=*/false, {mine});
} catch (...) {
  rejected(CollectiveKind::kAllgather, output, RejectedSize::kGatheredOutput);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::barrier(const c10d::BarrierOptions& opts) {
  for (int64_t id : opts.device_ids) {
    TORCH_CHECK(id >= 0, "ringguard: barrier: device id ", id, " in device_ids is negative");
  }
  // A one-element verified allreduce returns once every rank has entered. With device_ids torch sets
  // opts.device to (accelerator, device_ids[0]); on a CUDA device the barrier runs there, as NCCL's does,
  // and also orders that device's current stream. Otherwise (torch may pick the current CUDA device for a
  // plain barrier) it stays on the CPU communicator, so a barrier never creates the CUDA one.
  at::Device device(at::kCPU);
  if (!opts.device_ids.empty() && opts.device.has_value() && opts.device->is_cuda()) device = *opts.device;
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
  return launchAllreduce("barrier", t, 1, DataType::kInt32, ReduceOp::kSum, {t}, nullptr);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) try {
  const RejectionScope scope;
  const char* name = "reduce_scatter_tensor";
  checkTensor(name, input);
  checkTensor(name, output);
  TORCH_CHECK(input.numel() == output.numel() * size_ && output.scalar_type() == input.scalar_type() &&
                  output.device() == input.device(),
              "ringguard: reduce_scatter_tensor: input ", describe(input), " of ", input.numel(),
              " elements must hold ", size_, " x the output ", describe(output), " of ", output.numel());
  DataType dt;
  ReduceOp op;
  if (!toDataType(input.scalar_type(), &dt)) unsupported(name, "dtype of " + describe(input));
  op = reduceOpFor(name, opts.reduceOp, input, dt);
  at::Tensor in = premulOnOneRank(input.contiguous(), &op, /*inPlace=*/false);
  ContiguousOutputs dense(name);
  const at::Tensor out = dense(output);
  // The native ring's reduce steps: block r of the input, reduced over the ranks, lands in rank r's output.
  const size_t count = size_t(output.numel());
  return launch(name, out,
                [in, out, count, dt, op](Communicator* comm, void* stream) {
                  return comm->reduceScatterAsync(in.data_ptr(), out.data_ptr(), count, dt, op, stream);
                },
                {output}, dense.after(), /*nestedOutputs=*/false, {in});
} catch (...) {
  rejected(CollectiveKind::kReduceScatter, output, RejectedSize::kScatteredOutput);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) try {
  const RejectionScope scope;
  checkSingle("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == size_,
              "ringguard: reduce_scatter: expects one input list of ", size_, " tensors");
  at::Tensor out = outputs[0];
  for (const auto& t : inputs[0]) {
    TORCH_CHECK(
        t.numel() == out.numel() && t.scalar_type() == out.scalar_type() && t.device() == out.device(),
        "ringguard: reduce_scatter: input ", describe(t), " of ", t.numel(),
        " elements does not match the output ", describe(out), " of ", out.numel());
  }
  // One flat input (the list in rank order), then the tensor form (which takes the output as it is).
  at::Tensor flat = at::cat(inputs[0]).reshape({-1});
  return _reduce_scatter_base(out, flat, opts);
} catch (...) {
  rejected(CollectiveKind::kReduceScatter, firstOf(outputs), RejectedSize::kScatteredOutput);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                    std::vector<int64_t>& outputSplits,
                                                                    std::vector<int64_t>& inputSplits,
                                                                    const c10d::AllToAllOptions& opts) try {
  const RejectionScope scope;
  const char* name = "all_to_all_single";
  checkTensor(name, input);
  checkTensor(name, output);
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.device() == input.device(),
              "ringguard: all_to_all_single: output ", describe(output), " and input ", describe(input),
              " must have one dtype and device");
  // Splits count rows of dim 0 (empty: equal rows); the exchange moves the tensors as their dtype where the
  // engine has it (so RINGGUARD_NAN_CHECK scans the blocks sent), as bytes otherwise.
  ContiguousOutputs dense(name);
  const CopyView in = copyViewOf(input), out = copyViewOf(dense(output));
  auto toCounts = [this, name](const at::Tensor& t, const CopyView& v, const std::vector<int64_t>& splits,
                               std::vector<size_t>* counts, std::vector<size_t>* displs) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t rowUnits = rows == 0 ? 0 : v.count / size_t(rows);  // the view's elements per row
    counts->assign(size_t(size_), 0);
    displs->assign(size_t(size_), 0);
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "ringguard: ", name, ": ", describe(t), " has ", rows,
                  " rows, not divisible by the group size ", size_, " (give split sizes)");
    } else {
      TORCH_CHECK(int(splits.size()) == size_, "ringguard: ", name, ": ", splits.size(), " split sizes for ",
                  size_, " ranks");
    }
    int64_t sum = 0;
    for (int p = 0; p < size_; ++p) {
      const int64_t r = splits.empty() ? rows / size_ : splits[size_t(p)];
      TORCH_CHECK(r >= 0, "ringguard: ", name, ": negative split size ", r);
      (*displs)[size_t(p)] = size_t(sum) * rowUnits;
      (*counts)[size_t(p)] = size_t(r) * rowUnits;
      sum += r;
    }
    TORCH_CHECK(sum == rows, "ringguard: ", name, ": split sizes add up to ", sum, " rows, ", describe(t),
                " has ", rows);
  };
  std::vector<size_t> sc, sd, rc, rd;
  toCounts(input, in, inputSplits, &sc, &sd);
  toCounts(output, out, outputSplits, &rc, &rd);
  const at::Tensor src = in.flat, dst = out.flat;
  const DataType dt = in.dtype;
  return launch(name, dst,
                [src, dst, sc, sd, rc, rd, dt](Communicator* comm, void* stream) {
                  return comm->alltoallAsync(src.data_ptr(), sc, sd, dst.data_ptr(), rc, rd, dt, stream);
                },
                {output}, dense.after(), /*nestedOutputs=*/false, {src});
} catch (...) {
  rejected(CollectiveKind::kAlltoall, output);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::alltoall(std::vector<at::Tensor>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllToAllOptions& opts) try {
  const RejectionScope scope;
  TORCH_CHECK(int(outputs.size()) == size_ && int(inputs.size()) == size_, "ringguard: all_to_all: expects ",
              size_, " input and output tensors, got ", inputs.size(), " and ", outputs.size());
  // The list in rank order as one flat buffer each way, then copied out into the output list. Tensors of
  // one dtype move as it (so RINGGUARD_NAN_CHECK scans them), a mix of dtypes as bytes.
  bool oneDtype = true;
  for (int p = 0; p < size_; ++p) {
    checkTensor("all_to_all", inputs[size_t(p)]);
    checkTensor("all_to_all", outputs[size_t(p)]);
    checkWritable("all_to_all", outputs[size_t(p)]);
    TORCH_CHECK(
        inputs[size_t(p)].device() == inputs[0].device() && outputs[size_t(p)].device() == inputs[0].device(),
        "ringguard: all_to_all: every tensor must be on ", inputs[0].device());
    oneDtype = oneDtype && inputs[size_t(p)].scalar_type() == inputs[0].scalar_type() &&
               outputs[size_t(p)].scalar_type() == inputs[0].scalar_type();
  }
  auto view = [oneDtype](const at::Tensor& t) { return oneDtype ? copyViewOf(t).flat : bytesOf(t); };
  std::vector<at::Tensor> blocks;
  std::vector<size_t> sc, sd, rc, rd;
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < size_; ++p) {
    blocks.push_back(view(inputs[size_t(p)]));
    sd.push_back(sendTotal);
    sc.push_back(size_t(blocks.back().numel()));
    sendTotal += sc.back();
    rd.push_back(recvTotal);
    rc.push_back(size_t(view(outputs[size_t(p)]).numel()));
    recvTotal += rc.back();
  }
  at::Tensor in = at::cat(blocks);
  const DataType dt = oneDtype ? copyViewOf(inputs[0]).dtype : DataType::kUint8;
  at::Tensor out = at::empty({int64_t(recvTotal)}, in.options());
  std::vector<at::Tensor> outs = outputs;
  // A skipped collective (RINGGUARD_NAN_CHECK=skip) leaves the output list as it was: `out` starts as it.
  if (options_.nanCheck == NanCheck::kSkip) {
    for (size_t p = 0; p < outs.size(); ++p)
      out.narrow(0, int64_t(rd[p]), int64_t(rc[p])).copy_(view(outs[p]));
  }
  auto after = [outs, out, rc, rd]() {
    for (size_t p = 0; p < outs.size(); ++p) copyInto(outs[p], out.narrow(0, int64_t(rd[p]), int64_t(rc[p])));
  };
  return launch("all_to_all", out,
                [in, out, sc, sd, rc, rd, dt](Communicator* comm, void* stream) {
                  return comm->alltoallAsync(in.data_ptr(), sc, sd, out.data_ptr(), rc, rd, dt, stream);
                },
                outs, after, /*nestedOutputs=*/false, {in});
} catch (...) {
  rejected(CollectiveKind::kAlltoall, firstOf(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) try {
  const RejectionScope scope;
  const char* name = "allreduce_coalesced";
  TORCH_CHECK(!tensors.empty(), "ringguard: ", name, ": no tensors");
  ReduceOp op = ReduceOp::kSum;
  std::vector<DataType> dts;
  ContiguousOutputs dense(name);
  std::vector<at::Tensor> ts;
  for (const at::Tensor& t : tensors) {
    checkTensor(name, t);
    ts.push_back(dense(t));
    TORCH_CHECK(t.device() == tensors[0].device(), "ringguard: ", name, ": every tensor must be on ",
                tensors[0].device());
    DataType dt;
    if (!toDataType(t.scalar_type(), &dt)) unsupported(name, "dtype of " + describe(t));
    op = reduceOpFor(name, opts.reduceOp, t, dt);  // every dtype checked against the op
    dts.push_back(dt);
  }
  if (size_ == 1 && isPremulSum(op)) {
    const ReduceOp premul = op;
    for (const at::Tensor& t : ts) {
      op = premul;
      premulOnOneRank(t, &op, /*inPlace=*/true);
    }
  }
  // One verified allreduce per tensor, queued back to back (see the coalesced all-gather below), or staged
  // one after the other while the all_reduce family runs staged_chunked.
  Start start = stagedSelected("all_reduce", ts[0])
                    ? stagedAllreduceStart(ts, dts, op)
                    : [ts, dts, op](Communicator* comm, void* stream) {
                        std::shared_ptr<ringguard::Work> last;
                        for (size_t i = 0; i < ts.size(); ++i) {
                          last = comm->allreduceAsync(ts[i].data_ptr(), ts[i].data_ptr(),
                                                      size_t(ts[i].numel()), dts[i], op, stream);
                        }
                        return last;
                      };
  return launch(name, ts[0], std::move(start), tensors, dense.after(), /*nestedOutputs=*/false, ts);
} catch (...) {
  rejected(CollectiveKind::kAllreduce, firstOf(tensors));
}

// The coalesced forms enqueue one verified collective per pair, back to back, and complete with the last:
// the communicator runs its queue in order and a failure poisons everything after it, so the last one
// succeeding means every one did.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) try {
  const RejectionScope scope;
  const char* name = "allgather_into_tensor_coalesced";
  TORCH_CHECK(!inputs.empty() && inputs.size() == outputs.size(), "ringguard: ", name, ": ", inputs.size(),
              " inputs and ", outputs.size(), " outputs");
  std::vector<at::Tensor> ins, outs;
  std::vector<DataType> dts;
  ContiguousOutputs dense(name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(name, inputs[i]);
    checkTensor(name, outputs[i]);
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_ &&
                    outputs[i].scalar_type() == inputs[i].scalar_type() &&
                    outputs[i].device() == inputs[0].device() && inputs[i].device() == inputs[0].device(),
                "ringguard: ", name, ": output ", i, " ", describe(outputs[i]), " of ", outputs[i].numel(),
                " elements must hold ", size_, " x input ", describe(inputs[i]), " of ", inputs[i].numel());
    const CopyView in = copyViewOf(inputs[i]);
    ins.push_back(in.flat);
    outs.push_back(copyViewOf(dense(outputs[i])).flat);
    dts.push_back(in.dtype);
  }
  std::vector<at::Tensor> keep = ins;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return launch(
      name, outs[0],
      [ins, outs, dts](Communicator* comm, void* stream) {
        std::shared_ptr<ringguard::Work> last;
        for (size_t i = 0; i < ins.size(); ++i) {
          last = comm->allgatherAsync(ins[i].data_ptr(), outs[i].data_ptr(), size_t(ins[i].numel()), dts[i],
                                      stream);
        }
        return last;
      },
      outputs, dense.after(), /*nestedOutputs=*/false, keep);
} catch (...) {
  rejected(CollectiveKind::kAllgather, firstOf(outputs));
}

// The list form: every input of every rank in one verified all-gather of one flat buffer (the inputs in
// order, as their dtype when they share one, else as bytes), then copied out: outputs[r][i] gets rank r's
// input i. Every rank must give the same total (the fingerprint compares count and dtype: an error on every
// rank otherwise); each output must match its input here.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) try {
  const RejectionScope scope;
  const char* name = "allgather_coalesced";
  TORCH_CHECK(!inputs.empty(), "ringguard: ", name, ": no input tensors");
  TORCH_CHECK(int(outputs.size()) == size_, "ringguard: ", name, ": ", outputs.size(),
              " output lists, the group has ", size_, " ranks (one list per rank)");
  bool oneDtype = true;
  for (const at::Tensor& in : inputs) {
    checkTensor(name, in);
    TORCH_CHECK(in.device() == inputs[0].device(), "ringguard: ", name, ": every tensor must be on ",
                inputs[0].device());
    oneDtype = oneDtype && in.scalar_type() == inputs[0].scalar_type();
  }
  for (size_t r = 0; r < outputs.size(); ++r) {
    TORCH_CHECK(outputs[r].size() == inputs.size(), "ringguard: ", name, ": output list ", r, " has ",
                outputs[r].size(), " tensors for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& o = outputs[r][i];
      checkTensor(name, o);
      checkWritable(name, o);
      TORCH_CHECK(o.numel() == inputs[i].numel() && o.scalar_type() == inputs[i].scalar_type() &&
                      o.device() == inputs[i].device(),
                  "ringguard: ", name, ": output ", r, "/", i, " ", describe(o), " of ", o.numel(),
                  " elements does not match input ", i, " ", describe(inputs[i]), " of ", inputs[i].numel());
    }
  }
  auto view = [oneDtype](const at::Tensor& t) { return oneDtype ? copyViewOf(t).flat : bytesOf(t); };
  const DataType dt = oneDtype ? copyViewOf(inputs[0]).dtype : DataType::kUint8;
  std::vector<at::Tensor> blocks;
  std::vector<int64_t> offsets;
  int64_t n = 0;
  for (const at::Tensor& in : inputs) {
    blocks.push_back(view(in));
    offsets.push_back(n);
    n += blocks.back().numel();
  }
  at::Tensor mine = at::cat(blocks);
  at::Tensor flat = at::empty({n * size_}, mine.options());
  std::vector<at::Tensor> outs, slots;  // every output, and its place in `flat`
  for (size_t r = 0; r < outputs.size(); ++r) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      outs.push_back(outputs[r][i]);
      slots.push_back(flat.narrow(0, n * int64_t(r) + offsets[i], blocks[i].numel()));
    }
  }
  // A skipped collective (RINGGUARD_NAN_CHECK=skip) leaves the output lists as they were: `flat` starts as
  // them.
  if (options_.nanCheck == NanCheck::kSkip) {
    for (size_t k = 0; k < outs.size(); ++k) slots[k].copy_(view(outs[k]));
  }
  auto after = [outs, slots]() {
    for (size_t k = 0; k < outs.size(); ++k) copyInto(outs[k], slots[k]);
  };
  return launch(name, flat,
                [mine, flat, n, dt](Communicator* comm, void* stream) {
                  return comm->allgatherAsync(mine.data_ptr(), flat.data_ptr(), size_t(n), dt, stream);
                },
                outs, after, /*nestedOutputs=*/false, {mine});
} catch (...) {
  rejected(CollectiveKind::kAllgather, firstOf(inputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) try {
  const RejectionScope scope;
  const char* name = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(!inputs.empty() && inputs.size() == outputs.size(), "ringguard: ", name, ": ", inputs.size(),
              " inputs and ", outputs.size(), " outputs");
  ReduceOp op = ReduceOp::kSum;
  std::vector<DataType> dts;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(name, inputs[i]);
    checkTensor(name, outputs[i]);
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_ &&
                    outputs[i].scalar_type() == inputs[i].scalar_type() &&
                    outputs[i].device() == inputs[0].device() && inputs[i].device() == inputs[0].device(),
                "ringguard: ", name, ": input ", i, " ", describe(inputs[i]), " of ", inputs[i].numel(),
                " elements must hold ", size_, " x output ", describe(outputs[i]), " of ",
                outputs[i].numel());
    DataType dt;
    if (!toDataType(inputs[i].scalar_type(), &dt)) unsupported(name, "dtype of " + describe(inputs[i]));
    op = reduceOpFor(name, opts.reduceOp, inputs[i], dt);
    dts.push_back(dt);
  }
  std::vector<at::Tensor> ins, outs;
  ContiguousOutputs dense(name);
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(inputs[i].contiguous());
    outs.push_back(dense(outputs[i]));
  }
  if (size_ == 1 && isPremulSum(op)) {
    const ReduceOp premul = op;
    for (at::Tensor& in : ins) {
      op = premul;
      in = premulOnOneRank(in, &op, /*inPlace=*/false);
    }
  }
  std::vector<at::Tensor> keep = ins;
  keep.insert(keep.end(), outs.begin(), outs.end());
  return launch(
      name, outs[0],
      [ins, outs, dts, op](Communicator* comm, void* stream) {
        std::shared_ptr<ringguard::Work> last;
        for (size_t i = 0; i < ins.size(); ++i) {
          last = comm->reduceScatterAsync(ins[i].data_ptr(), outs[i].data_ptr(), size_t(outs[i].numel()),
                                          dts[i], op, stream);
        }
        return last;
      },
      outputs, dense.after(), /*nestedOutputs=*/false, keep);
} catch (...) {
  rejected(CollectiveKind::kReduceScatter, firstOf(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::reduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::ReduceOptions& opts) try {
  const RejectionScope scope;
  checkSingle("reduce", tensors);
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "ringguard: reduce: root rank ", opts.rootRank,
              " is outside [0, ", size_, ")");
  const at::Tensor& t = tensors[0];
  DataType dt;
  ReduceOp op;
  if (!toDataType(t.scalar_type(), &dt)) unsupported("reduce", "dtype of " + describe(t));
  op = reduceOpFor("reduce", opts.reduceOp, t, dt);
  // A verified allreduce; the other ranks reduce a copy, so their tensors keep their values (as NCCL's).
  // Traffic: the allreduce's, about 2x a reduce to one rank.
  ContiguousOutputs dense("reduce");
  at::Tensor buffer = rank_ == int(opts.rootRank) ? dense(t) : t.clone(at::MemoryFormat::Contiguous);
  premulOnOneRank(buffer, &op, /*inPlace=*/true);  // one rank: the root
  return launchAllreduce("reduce", buffer, size_t(t.numel()), dt, op, tensors, dense.after());
} catch (...) {
  rejected(CollectiveKind::kAllreduce, firstOf(tensors), RejectedSize::kPublished);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::GatherOptions& opts) try {
  const RejectionScope scope;
  checkSingle("gather", inputs);
  const int root = int(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "ringguard: gather: root rank ", root, " is outside [0, ", size_,
              ")");
  const CopyView v = copyViewOf(inputs[0]);  // as its dtype where the engine has it: NaN-checked then
  at::Tensor in = v.flat;
  const size_t n = v.count;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == size_,
                "ringguard: gather: the root needs one list of ", size_, " output tensors");
    outs = outputs[0];
    for (int p = 0; p < size_; ++p) {
      const at::Tensor& o = outs[size_t(p)];
      checkTensor("gather", o);
      checkWritable("gather", o);
      TORCH_CHECK(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type() &&
                      o.device() == inputs[0].device(),
                  "ringguard: gather: output ", describe(o), " of ", o.numel(),
                  " elements does not match the input ", describe(inputs[0]), " of ", inputs[0].numel());
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "ringguard: gather: only the root passes output tensors");
  }
  at::Tensor flat = at::empty({int64_t(rank_ == root ? n * size_t(size_) : 0)}, in.options());
  // A skipped collective (RINGGUARD_NAN_CHECK=skip) leaves the root's list as it was: `flat` starts as it.
  if (options_.nanCheck == NanCheck::kSkip) {
    for (size_t p = 0; p < outs.size(); ++p)
      flat.narrow(0, int64_t(p * n), int64_t(n)).copy_(copyViewOf(outs[p]).flat);
  }
  auto after = [outs, flat, n]() {
    for (size_t p = 0; p < outs.size(); ++p) copyInto(outs[p], flat.narrow(0, int64_t(p * n), int64_t(n)));
  };
  return launchGather("gather", in, flat, root, outs, after, /*nestedOutputs=*/true, v.dtype);
} catch (...) {
  rejected(CollectiveKind::kAlltoall, firstOf(inputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::gatherSingle(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::GatherOptions& opts) try {
  const RejectionScope scope;
  const char* name = "gather_single";
  checkTensor(name, input);
  const int root = int(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "ringguard: ", name, ": root rank ", root, " is outside [0, ", size_,
              ")");
  const CopyView v = copyViewOf(input);
  at::Tensor in = v.flat;
  at::Tensor out = at::empty({0}, in.options());
  std::vector<at::Tensor> outputs;
  ContiguousOutputs dense(name);
  if (rank_ == root) {
    checkTensor(name, output);
    TORCH_CHECK(output.numel() == input.numel() * size_ && output.scalar_type() == input.scalar_type() &&
                    output.device() == input.device(),
                "ringguard: ", name, ": output ", describe(output), " of ", output.numel(),
                " elements must hold ", size_, " x the input ", describe(input), " of ", input.numel());
    out = copyViewOf(dense(output)).flat;
    outputs.push_back(output);
    // The exchange is not in place: an input inside the output (the root's own block, say) is copied first.
    const auto* i0 = static_cast<const uint8_t*>(in.data_ptr());
    const auto* o0 = static_cast<const uint8_t*>(out.data_ptr());
    const int64_t inBytes = in.numel() * int64_t(in.element_size()),
                  outBytes = out.numel() * int64_t(out.element_size());
    if (inBytes > 0 && i0 < o0 + outBytes && o0 < i0 + inBytes) in = in.clone();
  }
  return launchGather(name, in, out, root, outputs, dense.after(), /*nestedOutputs=*/false, v.dtype);
} catch (...) {
  rejected(CollectiveKind::kAlltoall, input);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::scatter(std::vector<at::Tensor>& outputs,
                                                              std::vector<std::vector<at::Tensor>>& inputs,
                                                              const c10d::ScatterOptions& opts) try {
  const RejectionScope scope;
  checkSingle("scatter", outputs);
  const int root = int(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "ringguard: scatter: root rank ", root, " is outside [0, ", size_,
              ")");
  ContiguousOutputs dense("scatter");
  const CopyView v =
      copyViewOf(dense(outputs[0]));  // the root's blocks as this dtype: NaN-checked where floating
  at::Tensor out = v.flat;
  const size_t n = v.count;
  std::vector<size_t> sc(size_t(size_), 0), sd(size_t(size_), 0), rc(size_t(size_), 0), rd(size_t(size_), 0);
  rc[size_t(root)] = n;
  at::Tensor flat = at::empty({0}, out.options());
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == size_,
                "ringguard: scatter: the root needs one list of ", size_, " input tensors");
    std::vector<at::Tensor> blocks;
    for (int p = 0; p < size_; ++p) {
      const at::Tensor& i = inputs[0][size_t(p)];
      checkTensor("scatter", i);
      TORCH_CHECK(i.numel() == outputs[0].numel() && i.scalar_type() == outputs[0].scalar_type() &&
                      i.device() == outputs[0].device(),
                  "ringguard: scatter: input ", describe(i), " of ", i.numel(),
                  " elements does not match the output ", describe(outputs[0]), " of ", outputs[0].numel());
      blocks.push_back(copyViewOf(i).flat);
      sc[size_t(p)] = n;
      sd[size_t(p)] = size_t(p) * n;
    }
    flat = at::cat(blocks);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "ringguard: scatter: only the root passes input tensors");
  }
  const DataType dt = v.dtype;
  return launch("scatter", out,
                [flat, out, sc, sd, rc, rd, dt](Communicator* comm, void* stream) {
                  return comm->alltoallAsync(flat.data_ptr(), sc, sd, out.data_ptr(), rc, rd, dt, stream);
                },
                outputs, dense.after(), /*nestedOutputs=*/false, {flat});
} catch (...) {
  rejected(CollectiveKind::kAlltoall, firstOf(outputs));
}

#define RINGGUARD_UNSUPPORTED(signature, opname, what) \
  c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::signature { unsupported(opname, what); }

RINGGUARD_UNSUPPORTED(allreduce_sparse(std::vector<at::Tensor>& t, const c10d::AllreduceOptions&),
                      "allreduce_sparse", firstTensor(t))
#undef RINGGUARD_UNSUPPORTED

// A receive from any source: PointToPoint::recvAny's matching rule (ringguard/runtime/point_to_point.h,
// docs/TORCH.md); the Work's sourceRank() is the rank the message came from.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                    int tag) {
  checkSingle("recv", tensors);
  return p2p("recv", tensors[0], kAnySource, tag, /*isSend=*/false);
}

at::Tensor ProcessGroupRingguard::premulOnOneRank(const at::Tensor& t, ReduceOp* op, bool inPlace) const {
  if (size_ != 1 || !isPremulSum(*op)) return t;
  // The factor as a scalar of the tensor's (real) dtype, as ProcessGroupNCCL makes it and the engine rounds
  // it; the product is computed as at::mul computes it (f16/bf16 in f32, rounded once), which is the
  // engine's arithmetic for one input. A CPU scalar also for a CUDA tensor (a kernel argument, no copy);
  // the multiply runs on the caller's stream, which the collective is ordered after.
  at::Tensor out = inPlace ? t : t.clone();
  at::Tensor real = out.is_complex() ? at::view_as_real(out) : out;
  real.mul_(at::scalar_tensor(premulFactor(*op), real.options().device(at::kCPU)));
  *op = ReduceOp::kSum;
  return out;
}

// Every rank issues the same collectives in the same order, so a count of them agrees across the group
// (what TORCH_DISTRIBUTED_DEBUG=DETAIL compares).
void ProcessGroupRingguard::setSequenceNumberForGroup() { sequence_ = 0; }
uint64_t ProcessGroupRingguard::getSequenceNumberForGroup() { return sequence_; }

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                           int tag) {
  checkSingle("send", tensors);
  return p2p("send", tensors[0], dstRank, tag, /*isSend=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingguard::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                           int tag) {
  checkSingle("recv", tensors);
  return p2p("recv", tensors[0], srcRank, tag, /*isSend=*/false);
}

void ProcessGroupRingguard::shutdown() { stop(/*abort=*/false); }
void ProcessGroupRingguard::abort() { stop(/*abort=*/true); }

}  // namespace ringguard
