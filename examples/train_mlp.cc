// The main job: data-parallel training of a small MLP under mpirun, gradients aggregated by ringguard
// with fault injection on. Synthetic data is generated in-process (nothing is downloaded): a fixed random
// "teacher" network labels Gaussian inputs, and every rank trains on its shard of each global batch.
//
//   mpirun -np 4 --oversubscribe --bind-to none build/examples/train_mlp
//   mpirun -np 2 build/examples/train_mlp --device cuda     # each rank on its node-local GPU
//
// --replica-check raise|repair|warn compares the replicas' parameters and momentum buffers after every
// --replica-every-th step (CRC-32 fingerprints all-gathered over a verified host communicator,
// docs/REPLICAS.md); RINGGUARD_REPLICA_FAULT flips a bit to show it. --outlier-factor F reports a rank whose
// local gradient norm of a bucket departs from the other ranks' median by more than F (rank 0 prints it;
// --on-outlier skip also drops that optimizer step on every rank).
//
// --device cuda puts the model on GPU (OMPI_COMM_WORLD_LOCAL_RANK modulo the visible GPUs) and aggregates
// over the device communicator (RINGGUARD_DEVICE_TRANSPORT: NCCL, or host-staged when ranks share a GPU;
// the peer windows' kernels for the ranks of one host).
#include <mpi.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "ringguard/core/crc32.h"
#include "ringguard/mpi/mpi_communicator.h"
#include "ringguard/replicas/communicator_exchange.h"
#include "ringguard/replicas/replica_check.h"
#include "ringguard/torch/gradient_aggregator.h"
#include "ringguard/torch/mpi_device.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "ringguard/replicas/device_backend.h"
#endif

using namespace ringguard;

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, int64_t out) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, out));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc3(torch::tanh(fc2(torch::tanh(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(Mlp);

// A tensor of the model or the optimizer as the replica check sees it (contiguous, CPU or CUDA).
ReplicaTensor replicaTensor(const std::string& name, const torch::Tensor& t) {
  ReplicaTensor r;
  r.name = name;
  r.data = t.data_ptr();
  r.bytes = size_t(t.numel()) * t.element_size();
  r.dtype = t.scalar_type() == torch::kFloat64 ? DataType::kFloat64 : DataType::kFloat32;
  r.kind = t.is_cuda() ? MemoryKind::kDevice : MemoryKind::kHost;
  return r;
}

// What every replica must hold alike after a step: the parameters and SGD's momentum buffers.
std::vector<ReplicaTensor> replicaState(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                                        torch::optim::SGD& opt) {
  std::vector<ReplicaTensor> out;
  for (const auto& [name, p] : named) out.push_back(replicaTensor("param:" + name, p));
  for (const auto& [name, p] : named) {
    auto it = opt.state().find(p.unsafeGetTensorImpl());
    if (it == opt.state().end()) continue;
    const auto& st = static_cast<const torch::optim::SGDParamState&>(*it->second);
    if (st.momentum_buffer().defined()) {
      out.push_back(replicaTensor("optim:" + name + ".momentum_buffer", st.momentum_buffer()));
    }
  }
  return out;
}

uint64_t sumOverRanks(uint64_t v) {
  uint64_t out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringguard: data-parallel MLP training with verified gradient aggregation"};
  int steps = 600, logEvery = 100;
  int64_t batch = 64, hidden = 128, in = 32, out = 8;
  double lr = 0.05, faultProbability = 0.002;
  size_t sliceBytes = 16384, bucketBytes = 64 * 1024;
  std::string deviceKind = "cpu", replicaPolicy = "off";
  uint64_t replicaEvery = 1;
  double outlierFactor = 0.0;
  std::string onOutlier = "warn";
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, std::numeric_limits<int>::max()));
  app.add_option("--batch", batch, "samples per rank per step")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--hidden", hidden, "hidden width")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--lr", lr, "SGD learning rate")->check([](const std::string& s) {
    const double v = std::strtod(s.c_str(), nullptr);  // CLI::PositiveNumber lets NaN through
    return std::isfinite(v) && v > 0 ? std::string() : "must be a finite positive number, got " + s;
  });
  app.add_option("--log-every", logEvery, "steps between progress lines")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  app.add_option("--fault-prob", faultProbability, "corruption probability per slice transfer (0: off)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--slice-bytes", sliceBytes, "payload bytes per verified slice");
  app.add_option("--bucket-bytes", bucketBytes, "gradient bucket size");
  app.add_option("--device", deviceKind,
                 "cpu, cuda (the node-local GPU) or auto (cuda when every rank has one)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--replica-check", replicaPolicy,
                 "compare the replicas' parameters and momentum after each step: off, raise, repair or warn")
      ->check(CLI::IsMember({"off", "raise", "repair", "warn"}));
  app.add_option("--replica-every", replicaEvery, "steps between two replica checks")
      ->check(CLI::Range(uint64_t{1}, std::numeric_limits<uint64_t>::max()));
  app.add_option("--outlier-factor", outlierFactor,
                 "gradient outliers: report a rank whose bucket norm departs from the others' median by more "
                 "than this factor (> 1; 0: off)")
      ->check([](const std::string& s) {
        const double v = std::strtod(s.c_str(), nullptr);
        return std::isfinite(v) && (v == 0 || v > 1) ? std::string() : "must be 0 or a number > 1, got " + s;
      });
  app.add_option("--on-outlier", onOutlier, "what a gradient outlier does: warn, or skip the optimizer step")
      ->check(CLI::IsMember({"warn", "skip"}));
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rc = rank == 0 ? app.exit(e) : 1;  // one copy of the message
    MPI_Finalize();
    return rc;
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  torch::set_num_threads(1);  // ranks share the cores

  Options options;
  if (Status st = Options::fromEnv(&options); !st.isOk()) {
    if (rank == 0) fprintf(stderr, "%s\n", st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  options.sliceBytes = sliceBytes;
  if (faultProbability > 0) {
    options.fault.mode = FaultMode::kMultiBit;
    options.fault.probability = faultProbability;
    options.fault.seed = 2026;
  }
  bool useCuda = false;
  std::string noCuda;
  if (!chooseCuda(deviceKind, &useCuda, &noCuda)) {
    if (rank == 0) fprintf(stderr, "--device cuda: %s\n", noCuda.c_str());
    MPI_Finalize();
    return 2;
  }
  torch::Device device = torch::kCPU;
  std::unique_ptr<Communicator> comm;
  if (Status st = createWorldCommunicator(useCuda, options, &device, &comm); !st.isOk()) {
    fprintf(stderr, "rank %d: %s\n", rank, st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  torch::manual_seed(7);  // the same initial parameters on every rank
  Mlp model(in, hidden, out);
  Mlp teacher(in, hidden, out);
  for (auto& p : teacher->parameters()) p.requires_grad_(false);
  model->to(device);
  teacher->to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
  AggregatorOptions ao;
  ao.bucketBytes = bucketBytes;
  ao.outlierFactor = outlierFactor;
  std::unique_ptr<GradientAggregator> agg;
  if (Status st = GradientAggregator::create(comm.get(), named, ao, &agg); !st.isOk()) {
    fprintf(stderr, "rank %d: %s\n", rank, st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  // The replica check: fingerprints over a host communicator (the words are host memory), repairs of CUDA
  // tensors over the device one.
  std::unique_ptr<Communicator> hostComm;
  std::unique_ptr<ReplicaChecker> replicas;
  if (replicaPolicy != "off") {
    ReplicaCheckOptions ro;
    parseReplicaPolicy(replicaPolicy, &ro.onMismatch);
    ro.every = replicaEvery;
    std::unique_ptr<ReplicaBackend> deviceBackend;
    Status st = Status::ok();
    if (useCuda) {
      st = mpi::createCommunicator(options, &hostComm);
#if RINGGUARD_TORCH_CUDA
      DeviceReplicaBackendOptions dro;
      dro.device = device.index();
      if (st.isOk()) st = makeDeviceReplicaBackend(dro, &deviceBackend);
#endif
    }
    ReplicaFault fault;
    bool faultOn = false;
    const char* spec = std::getenv("RINGGUARD_REPLICA_FAULT");
    if (st.isOk()) st = parseReplicaFault(spec != nullptr ? spec : "", &fault, &faultOn);
    if (st.isOk()) {
      replicas = std::make_unique<ReplicaChecker>(
          ro,
          makeCommunicatorExchange(hostComm ? hostComm.get() : comm.get(), useCuda ? comm.get() : nullptr),
          makeHostReplicaBackend(), std::move(deviceBackend));
      if (faultOn) st = replicas->setFault(fault);
    }
    if (!st.isOk()) {
      if (rank == 0) fprintf(stderr, "--replica-check: %s\n", st.toString().c_str());
      MPI_Finalize();
      return 2;
    }
  }
  if (rank == 0) {
    printf(
        "ringguard train_mlp: %d ranks, %d steps, %lld samples/rank/step, %d buckets, device %s (transport "
        "%s), "
        "fault injection %s\n",
        world, steps, (long long)batch, agg->numBuckets(), device.str().c_str(), comm->transportName(),
        faultProbability > 0 ? "on" : "off");
  }

  Counters total;
  double lastLoss = 0;
  bool diverged = false, replicaFailed = false;
  int ran = 0;
  auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step, ++ran) {
    torch::manual_seed(1000 + step);  // the same global batch on every rank; each takes its shard
    torch::Tensor x = torch::randn({world * batch, in}).to(device);
    torch::Tensor y = teacher->forward(x);
    torch::Tensor xs = x.narrow(0, rank * batch, batch), ys = y.narrow(0, rank * batch, batch);
    opt.zero_grad(false);  // keep .grad as the bucket memory: zero copies
    torch::Tensor loss = torch::mse_loss(model->forward(xs), ys);
    loss.backward();
    StepStats stats;
    if (Status st = agg->finish(&stats); !st.isOk()) {
      fprintf(stderr, "rank %d: step %d: %s\n", rank, step, st.toString().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    // The same report on every rank, so every rank skips alike.
    const bool skip = !stats.outliers.empty() && onOutlier == "skip";
    if (!stats.outliers.empty() && rank == 0)
      fprintf(stderr, "step %d: %s%s\n", step, stats.outliers.c_str(), skip ? ": step skipped" : "");
    if (!skip) opt.step();
    total += stats.counters;
    if (replicas) {
      void* stream = nullptr;
#if RINGGUARD_TORCH_CUDA
      if (useCuda) stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
#endif
      // The same verdict on every rank: all stop at this step when it is an error.
      if (Status st = replicas->afterStep(uint64_t(step - 1), replicaState(named, opt), stream); !st.isOk()) {
        fprintf(stderr, "rank %d: %s\n", rank, st.message().c_str());
        replicaFailed = true;
        ran = step;
        break;
      }
    }
    double local = loss.item<double>(), global = 0;
    MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    lastLoss = global / world;
    if (!std::isfinite(lastLoss)) {  // the same value on every rank: all stop here
      ran = step;
      if (rank == 0)
        fprintf(stderr, "step %d: the loss is %f: training diverged (try a smaller --lr)\n", step, lastLoss);
      diverged = true;
      break;
    }
    if (step % logEvery == 0 || step == steps) {
      uint64_t verified = sumOverRanks(total.slicesVerified), detected = sumOverRanks(total.detected);
      uint64_t retransmitted = sumOverRanks(total.retransmitted);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (rank == 0) {
        printf(
            "step %4d  loss %.6f  samples/s %8.0f  slices verified %llu  corruptions detected %llu  "
            "retransmitted %llu\n",
            step, lastLoss, double(step) * world * batch / secs, (unsigned long long)verified,
            (unsigned long long)detected, (unsigned long long)retransmitted);
      }
    }
  }

  // Every rank must hold bit-identical parameters.
  uint32_t crc = 0;
  for (const auto& p : model->parameters()) {
    torch::Tensor host = p.detach().to(torch::kCPU).contiguous();
    crc = crc32(host.data_ptr(), size_t(host.numel()) * host.element_size(), crc);
  }
  uint32_t lo = 0, hi = 0;
  MPI_Allreduce(&crc, &lo, 1, MPI_UINT32_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&crc, &hi, 1, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD);
  const bool identical = lo == hi;
  const uint64_t injected = sumOverRanks(total.injected), detected = sumOverRanks(total.detected);
  const uint64_t retransmitted = sumOverRanks(total.retransmitted), escaped = sumOverRanks(total.escaped);
  if (rank == 0) {
    printf("final: ranks=%d steps=%d loss=%.6f params_identical=%s detected=%llu retransmitted=%llu\n", world,
           ran, lastLoss, identical ? "yes" : "no", (unsigned long long)detected,
           (unsigned long long)retransmitted);
    // The parameters themselves (identical on every rank when params_identical=yes): two runs that print the
    // same CRC end bit-identical (a repaired run against the fault-free one: tests/mpi/examples.sh).
    printf("params: crc32=%08x\n", lo);
    if (injected != detected || escaped != 0) {
      printf("integrity: injected=%llu detected=%llu escaped=%llu: MISMATCH\n", (unsigned long long)injected,
             (unsigned long long)detected, (unsigned long long)escaped);
    }
  }
  if (replicas && rank == 0) {
    const ReplicaCounters rc = replicas->counters();
    printf("replicas: checks=%llu mismatches=%llu repairs=%llu escalations=%llu warnings=%llu\n",
           (unsigned long long)rc.checks, (unsigned long long)rc.mismatches, (unsigned long long)rc.repairs,
           (unsigned long long)rc.escalations, (unsigned long long)rc.warnings);
  }
  const bool ok = identical && injected == detected && escaped == 0 && !diverged && !replicaFailed;
  replicas.reset();
  agg.reset();
  hostComm.reset();
  comm.reset();
  MPI_Finalize();
  return ok ? 0 : 1;
}
