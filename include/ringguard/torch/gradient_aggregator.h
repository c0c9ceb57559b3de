#pragma once
// Zero-copy gradient aggregation over libtorch (the torch layer: this header exposes torch types).
//
// The aggregator lays out the parameters in buckets (reverse registration order, as DDP does), allocates
// each bucket as one flat tensor on the parameters' device, and makes every parameter's .grad a view into
// its bucket before the first backward. Backward then accumulates straight into the buffers that are
// allreduced: no gradient is copied into or out of a fusion buffer. Readiness comes from autograd post
// hooks on each parameter's AccumulateGrad node; a ready bucket is launched once every lower-indexed bucket
// has been launched, so every rank issues the same collectives in the same order. The layout and the launch
// order are the framework-free aggregation layer's (src/aggregation: planBuckets, LaunchOrder); this class
// binds them to torch tensors, autograd hooks and CUDA streams.
//
// CPU parameters need a host communicator (mpi::createCommunicator); CUDA parameters (in a build with
// CUDA) a device communicator (cuda::createDeviceCommunicator) on the parameters' GPU. Their buckets come
// from a stream-ordered DevicePool, and the compute and communication streams meet through CUDA events
// only (docs/AGGREGATION.md, "CUDA").
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ringguard/core/counters.h"
#include "ringguard/core/status.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {

class LaunchOrder;

struct AggregatorOptions {
  size_t bucketBytes = size_t(25) << 20;  // DDP's default bucket cap
  bool average = true;                    // divide by the world size (ReduceOp::kAvg), else sum
  // > 1: gradient outliers (docs/REPLICAS.md): each bucket's local gradient norm, taken right before its
  // allreduce, is gathered in finish(), and ranks departing from the median of the others' by more than this
  // factor are reported in StepStats::outliers (the same on every rank). 0: off.
  double outlierFactor = 0.0;
};

struct StepStats {
  Counters counters;        // integrity counters of this step (the communicator's, as a delta)
  uint64_t gradCopies = 0;  // grads that were not the bucket view and had to be copied in (see below)
  int bucketsLaunched = 0;  // buckets launched during backward (the rest at finish: unused parameters)
  int buckets = 0;
  std::string outliers;  // the gradient-outlier report of this step; empty: none (or outlierFactor off)
};

class GradientAggregator {
 public:
  // Collective over `comm`'s ranks: checks that every rank has the same parameters (count, dtype and
  // shape) and fails with kInvalidArgument naming the first parameter that differs. Every parameter must
  // be on one device: CPU with a host communicator, or one GPU with a device communicator on that GPU
  // (anything else fails with kInvalidArgument naming the parameter, before any communication). For CUDA
  // parameters the stream current at create() allocates the buckets and, when the last gradient view is
  // gone, frees them (as PyTorch's caching allocator does for a block and its stream). `comm` must
  // outlive the aggregator.
  static Status create(Communicator* comm, const std::vector<std::pair<std::string, torch::Tensor>>& params,
                       const AggregatorOptions& options, std::unique_ptr<GradientAggregator>* out);
  ~GradientAggregator();

  // Gradient accumulation: while set, backward accumulates into the buckets and nothing is launched.
  void setNoSync(bool noSync) { noSync_ = noSync; }

  // After loss.backward(): launches what backward did not (parameters that got no gradient contribute
  // zeros), waits for every bucket, and returns the step's statistics. With no_sync set it only resets.
  // For CUDA parameters the wait is on the host for the verdicts, and the stream current at finish() is
  // ordered after every bucket's result by CUDA events (no device synchronisation): the optimizer step
  // that follows on that stream reads the averaged gradients.
  //
  // libtorch's optimizer.zero_grad() defaults to set_to_none, after which backward installs a fresh .grad
  // tensor instead of accumulating into the bucket view. The hook then copies that grad into the bucket,
  // points .grad back at the view and counts the copy (StepStats::gradCopies), so nothing is silently
  // wrong; use zero_grad(false) for zero copies.
  Status finish(StepStats* stats);

  int numBuckets() const { return int(buckets_.size()); }
  // The bucket each parameter (in the order given to create) lives in.
  int bucketOf(size_t param) const { return params_[param].bucket; }
  // The flat tensor of bucket `b` (its parameters' .grad are tensors over its memory).
  const torch::Tensor& bucket(int b) const { return buckets_[b].flat; }
  // The parameters' device (CPU, or the GPU of a device communicator).
  torch::Device device() const { return device_; }
  // Order of events in the last step, for tests: "launch:<bucket>" and "backward_end".
  std::vector<std::string> trace() const;

 private:
  struct Param {
    std::string name;
    torch::Tensor tensor;
    int bucket = 0;
    int64_t offset = 0;                                  // elements into the bucket
    torch::Tensor view;                                  // the bucket slice shaped like the parameter
    std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive: the hook lives on it
    uintptr_t hookKey = 0;
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<size_t> params;
    std::shared_ptr<Work> work;
  };
  struct CudaState;  // streams, events and the device pool of CUDA parameters (gradient_aggregator.cc)

  GradientAggregator(Communicator* comm, const AggregatorOptions& options);
  void onGradReady(size_t param);
  // `stream`: the caller's cudaStream_t the launches are ordered after (CUDA parameters; else unused).
  void launchReady(bool all, void* stream);
  void resetStep();

  Communicator* comm_;
  AggregatorOptions options_;
  torch::Device device_{torch::kCPU};
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<LaunchOrder>
      order_;  // readiness and in-order launch (ringguard/aggregation/launch_order.h)
  bool noSync_ = false;
  bool stepStarted_ = false;
  uint64_t gradCopies_ = 0;
  int launchedInBackward_ = 0;
  Counters before_;
  Status hookError_;          // a CUDA call that failed inside a hook; reported by finish()
  mutable std::mutex mutex_;  // hooks may run on autograd worker threads
  std::vector<std::string> trace_, lastTrace_;
  std::unique_ptr<CudaState> cuda_;  // null for CPU parameters
  std::vector<torch::Tensor>
      localNorms_;      // outlierFactor > 0: per bucket, this step's norm before its allreduce
  uint64_t steps_ = 0;  // finish() calls that communicated (the outlier report's step)
  Status gatherOutliers(void* stream, std::string* report);
};

}  // namespace ringguard
