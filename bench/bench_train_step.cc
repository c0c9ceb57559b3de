// Step time of data-parallel MLP training with the GradientAggregator (verified AllReduces) against the
// same step with no communication, in the same run; prints the overhead.
//
//   mpirun -np 2 build/bench/bench_train_step --hidden 512 --steps 50
//   mpirun -np 2 build/bench/bench_train_step --device cuda   # node-local GPU, device communicator
//
// A step is zero_grad(false), forward, backward, GradientAggregator::finish() and the SGD step; the baseline
// is the same step under no_sync (no collective). Time is host wall time over the timed steps, the slowest
// rank's; on CUDA the device is synchronised after the warmup and at the end of the timed loop (never
// inside a step), so queued GPU work is counted.
#include <mpi.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "ringguard/torch/gradient_aggregator.h"
#include "ringguard/torch/mpi_device.h"

using namespace ringguard;

int main(int argc, char** argv) {
  CLI::App app{"bench_train_step: aggregator step time vs no communication"};
  int steps = 50, warmup = 5;
  int64_t batch = 64, hidden = 512, layers = 4;
  size_t bucketBytes = size_t(4) << 20;
  std::string deviceKind = "cpu";
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, std::numeric_limits<int>::max()));
  app.add_option("--warmup", warmup, "untimed steps")->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_option("--batch", batch, "samples per rank per step")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--hidden", hidden, "hidden width")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--layers", layers, "hidden layers")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--bucket-bytes", bucketBytes, "gradient bucket size");
  app.add_option("--device", deviceKind,
                 "cpu, cuda (the node-local GPU) or auto (cuda when every rank has one)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    MPI_Finalize();
    return rc;
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  torch::set_num_threads(1);
  bool useCuda = false;
  std::string noCuda;
  if (!chooseCuda(deviceKind, &useCuda, &noCuda)) {
    if (rank == 0) fprintf(stderr, "--device cuda: %s\n", noCuda.c_str());
    MPI_Finalize();
    return 2;
  }
  torch::Device device = torch::kCPU;
  std::unique_ptr<Communicator> comm;
  Options options;
  Status created = Options::fromEnv(&options);
  if (created.isOk()) created = createWorldCommunicator(useCuda, options, &device, &comm);
  if (!created.isOk()) {
    fprintf(stderr, "rank %d: %s\n", rank, created.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  torch::manual_seed(7);
  torch::nn::Sequential model;
  for (int64_t l = 0; l < layers; ++l) {
    model->push_back(torch::nn::Linear(hidden, hidden));
    model->push_back(torch::nn::Tanh());
  }
  model->to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
  AggregatorOptions ao;
  ao.bucketBytes = bucketBytes;
  std::unique_ptr<GradientAggregator> agg;
  if (Status st = GradientAggregator::create(comm.get(), named, ao, &agg); !st.isOk()) {
    fprintf(stderr, "rank %d: %s\n", rank, st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  torch::Tensor x = torch::randn({batch, hidden}).to(device), y = torch::randn({batch, hidden}).to(device);
  auto drain = [&] {  // outside the timed steps only: the queued GPU work belongs to the measurement
#if RINGGUARD_TORCH_CUDA
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
#endif
  };
  auto step = [&](bool communicate) {
    opt.zero_grad(false);
    agg->setNoSync(!communicate);  // no_sync: the very same step without any collective
    torch::mse_loss(model->forward(x), y).backward();
    if (Status st = agg->finish(nullptr); !st.isOk()) {
      fprintf(stderr, "rank %d: %s\n", rank, st.toString().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    opt.step();
  };
  auto timeSteps = [&](bool communicate) {
    for (int i = 0; i < warmup; ++i) step(communicate);
    drain();
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step(communicate);
    drain();
    double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps,
           worst = 0;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
  };
  const double local = timeSteps(false), verified = timeSteps(true);
  size_t gradBytes = 0;
  for (const auto& p : model->parameters()) gradBytes += size_t(p.numel()) * p.element_size();
  if (rank == 0) {
    printf("# np=%d layers=%lld hidden=%lld batch=%lld grad_bytes=%zu buckets=%d device=%s transport=%s\n",
           world, (long long)layers, (long long)hidden, (long long)batch, gradBytes, agg->numBuckets(),
           device.str().c_str(), comm->transportName());
    printf("step without communication: %.3f ms\nstep with verified aggregation: %.3f ms\n", local * 1e3,
           verified * 1e3);
    printf("summary: np=%d grad_bytes=%zu overhead_pct=%.1f\n", world, gradBytes,
           (verified / local - 1) * 100);
  }
  agg.reset();
  comm.reset();
  MPI_Finalize();
  return 0;
}
