// bench_peer_allreduce: the one-shot verified allreduce over peer windows (cuda/peer_allreduce.cu), fp32
// sum, against a device-to-device copy of the same bytes in the same processes: eager (one launch per
// call) and inside a CUDA graph (`--graph-iters` calls captured, the graph replayed). Run under mpirun with
// every rank on the one GPU and MPS started (scripts/gpu_peer_check.sh):
//   mpirun -np 2 build/bench/gpu/bench_peer_allreduce -b 1K -e 64M
// Rank 0 prints one line per size: bytes, microseconds per call (median of --reps timed batches) for each
// path, and the ratio of the graph path to the copy.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "bootstrap/mpi_bootstrap.h"
#include "cuda/peer_allreduce.h"
#include "transport/peer/peer_window.h"

using namespace ringguard;
using namespace ringguard::peer;

namespace {

size_t parseSize(const std::string& s) {
  size_t v = std::stoull(s);
  const char u = s.empty() ? 0 : s.back();
  if (u == 'K' || u == 'k') v <<= 10;
  if (u == 'M' || u == 'm') v <<= 20;
  if (u == 'G' || u == 'g') v <<= 30;
  return v;
}

template <typename Fn>
double timeUs(cudaStream_t s, int iters, int reps, Fn fn) {
  std::vector<double> us;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    cudaEventRecord(a, s);
    fn(iters);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    us.push_back(1000.0 * ms / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CLI::App app{"bench_peer_allreduce"};
  std::string minS = "1K", maxS = "64M";
  int iters = 100, reps = 7;
  double faultProb = 0;
  app.add_option("-b,--min-bytes", minS);
  app.add_option("-e,--max-bytes", maxS);
  app.add_option("-n,--iters", iters)->check(CLI::Range(1, 100000));
  app.add_option("-r,--reps", reps)->check(CLI::Range(1, 1000));
  app.add_option("--fault-prob", faultProb, "chunk reads corrupted (transient), e.g. 0.001")
      ->check(CLI::Range(0.0, 1.0));
  CLI11_PARSE(app, argc, argv);
  const size_t minBytes = parseSize(minS), maxBytes = parseSize(maxS);

  std::unique_ptr<Bootstrap> bs;
  Status st = mpi::createBootstrap(MPI_COMM_WORLD, &bs);
  std::unique_ptr<PeerWindows> w;
  if (st.isOk()) st = PeerWindows::create(*bs, 0, maxBytes, &w);
  if (!st.isOk()) {
    fprintf(stderr, "bench_peer_allreduce: %s\n", st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *in = nullptr, *out = nullptr;
  cudaMalloc(&in, maxBytes);
  cudaMalloc(&out, maxBytes);
  cudaMemset(in, 0, maxBytes);
  if (w->rank() == 0) {
    printf(
        "# ringguard bench_peer_allreduce: %d ranks, fp32 sum, fault prob %g, us per call (median of %d x "
        "%d)\n",
        w->size(), faultProb, reps, iters);
    printf("%12s %12s %12s %12s %10s\n", "bytes", "eager_us", "graph_us", "d2d_copy_us", "graph/copy");
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 4) {
    PeerAllreduceArgs a;
    a.send = in;
    a.recv = out;
    a.count = bytes / 4;
    a.rank = w->rank();
    a.size = w->size();
    for (int r = 0; r < a.size; ++r) a.windows[r] = w->window(r);
    a.layout = w->layout();
    a.record = w->errorRecordDevice();
    a.fingerprint[3] = uint32_t(a.count);
    a.timeoutNs = 10ull * 1000 * 1000 * 1000;
    a.faultProb = faultProb;
    a.faultSeed = uint32_t(w->rank());
    const int n = bytes >= (16u << 20) ? std::max(1, iters / 10) : iters;
    Status launched = launchPeerAllreduce(a, s);
    if (!launched.isOk()) {
      fprintf(stderr, "bench_peer_allreduce: %s\n", launched.toString().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    auto eager = [&](int k) {
      for (int i = 0; i < k; ++i) (void)launchPeerAllreduce(a, s);
    };
    eager(2);
    const double eagerUs = timeUs(s, n, reps, eager);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < n; ++i) (void)launchPeerAllreduce(a, s);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&ge, g, 0);
    const double graphUs = timeUs(s, n, reps, [&](int) { cudaGraphLaunch(ge, s); });
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    const double copyUs = timeUs(s, n, reps, [&](int k) {
      for (int i = 0; i < k; ++i) cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, s);
    });
    cudaStreamSynchronize(s);
    const ErrorRecord* rec = w->errorRecord();
    if (rec->code != 0) {
      fprintf(stderr, "rank %d: peer allreduce failed: code %u peer %d chunk %u\n", w->rank(), rec->code,
              rec->peer, rec->chunk);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (w->rank() == 0) {
      printf("%12zu %12.2f %12.2f %12.2f %10.2f\n", bytes, eagerUs, graphUs, copyUs, graphUs / copyUs);
      fflush(stdout);
    }
  }
  if (w->rank() == 0 && faultProb > 0) {
    printf("# rank 0: detected %llu injected %llu\n", w->errorRecord()->detected, w->errorRecord()->injected);
  }
  cudaFree(in);
  cudaFree(out);
  w.reset();
  MPI_Finalize();
  return 0;
}
