// bench_peer_allreduce: the verified one-sided collectives over peer windows (src/cuda/peer/), against a
// device-to-device copy of the same bytes in the same processes: eager (one launch per call) and inside a
// CUDA graph (`--iters` calls captured, the graph replayed). Run under mpirun with every rank on the one GPU
// and MPS started (scripts/gpu_peer_check.sh):
//   mpirun -np 2 build/bench/gpu/bench_peer_allreduce -b 1K -e 64M                  one-shot vs two-shot
//   mpirun -np 4 build/bench/gpu/bench_peer_allreduce -c allgather -b 1K -e 64M    (bytes per rank)
//   mpirun -np 2 build/bench/gpu/bench_peer_allreduce -c sendrecv -b 1K -e 64M     (a ring shift)
// Rank 0 prints one line per size: bytes, microseconds per call (median of --reps timed batches) of each
// kernel eager and in a graph, the copy, and ratios. allreduce: the one-shot and the two-shot side by side
// (the two-shot's threshold, RINGGUARD_PEER_TWO_SHOT_BYTES, is where its column wins); allgather, broadcast
// (root 0), reduce_scatter (bytes = each rank's result), sendrecv (every rank sends `bytes` to the next and
// receives from the previous in one call, through --p2p-bytes slots): one kernel. fp32 sums throughout.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/mpi_bootstrap.h"
#include "cuda/peer/peer_collectives.h"
#include "gpu/peer_bench_timing.h"
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

void fail(const PeerWindows& w, const char* what, const Status& st) {
  fprintf(stderr, "bench_peer_allreduce: rank %d: %s: %s\n", w.rank(), what, st.toString().c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// Every launch's common arguments.
void fillWindowArgs(const PeerWindows& w, size_t count, CollectiveKind kind, double faultProb,
                    bool arriveFirst, PeerWindowArgs* a) {
  a->rank = w.rank();
  a->size = w.size();
  for (int r = 0; r < a->size; ++r) a->windows[r] = w.window(r);
  a->layout = w.layout();
  a->record = w.errorRecordDevice();
  a->oneDevice = w.oneDevice();
  a->fingerprint[0] = uint32_t(kind);
  a->fingerprint[3] = uint32_t(count);
  a->timeoutNs = 10ull * 1000 * 1000 * 1000;
  a->fault.probability = faultProb;
  a->fault.seed = uint32_t(w.rank());
  a->arriveFirst = arriveFirst;
}

// Eager and graph microseconds per call of `launch`.
std::pair<double, double> timeKernel(const PeerWindows& w, cudaStream_t s, int n, int reps, const char* what,
                                     const std::function<Status()>& launch) {
  Status st = launch();
  if (!st.isOk()) fail(w, what, st);
  auto eager = [&](int k) {
    for (int i = 0; i < k; ++i) (void)launch();
  };
  eager(2);
  const double eagerUs = bench::medianUsPerCall(s, n, reps, [&] { eager(n); });
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  for (int i = 0; i < n; ++i) (void)launch();
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&ge, g, 0);
  const double graphUs = bench::medianUsPerCall(s, n, reps, [&] { cudaGraphLaunch(ge, s); });
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamSynchronize(s);
  const ErrorRecord* rec = w.errorRecord();
  if (rec->code != 0) {
    fprintf(stderr, "rank %d: %s failed: code %u peer %d chunk %u epoch %u\n", w.rank(), what, rec->code,
            rec->peer, rec->chunk, rec->epoch);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return {eagerUs, graphUs};
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CLI::App app{"bench_peer_allreduce"};
  std::string minS = "1K", maxS = "64M", collective = "allreduce", p2pS = "1M";
  int iters = 100, reps = 7;
  double faultProb = 0;
  bool arriveFirst = false;
  app.add_option("-b,--min-bytes", minS);
  app.add_option("-e,--max-bytes", maxS);
  app.add_option("-c,--collective", collective)
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast", "reduce_scatter", "sendrecv"}));
  app.add_option("--p2p-bytes", p2pS, "sendrecv: payload bytes per slot (RINGGUARD_PEER_P2P_BYTES)");
  app.add_option("-n,--iters", iters)->check(CLI::Range(1, 100000));
  app.add_option("-r,--reps", reps)->check(CLI::Range(1, 1000));
  app.add_option("--fault-prob", faultProb, "chunk reads corrupted (transient), e.g. 0.001")
      ->check(CLI::Range(0.0, 1.0));
  bool clocks = false;
  app.add_flag(
      "--clocks", clocks,
      "allreduce: each call between the timeline's clock kernels, which write its start and end into "
      "a ring in mapped pinned memory, as the peer path does while the timeline is on");
  app.add_flag("--arrive-first", arriveFirst,
               "every call's grid behind the one-block arrival kernel (RINGGUARD_PEER_ARRIVAL_BYTES's form)");
  CLI11_PARSE(app, argc, argv);
  const size_t minBytes = parseSize(minS), maxBytes = parseSize(maxS);

  std::unique_ptr<Bootstrap> bs;
  Status st = mpi::createBootstrap(MPI_COMM_WORLD, &bs);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // What one rank publishes at the largest size: the reduce-scatter's whole input is size x its result.
  // (send/recv publishes into its channels' slots only.)
  const bool sendrecv = collective == "sendrecv";
  const size_t published = collective == "reduce_scatter" ? maxBytes * size_t(size)
                           : sendrecv                     ? kChunkBytes
                                                          : maxBytes;
  std::unique_ptr<PeerWindows> w;
  if (st.isOk())
    st = PeerWindows::create(*bs, 0, published, sendrecv ? parseSize(p2pS) : 0, PeerHandles::kAuto, &w);
  if (!st.isOk()) {
    fprintf(stderr, "bench_peer_allreduce: %s\n", st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const size_t bufferBytes = maxBytes * size_t(size);
  void *in = nullptr, *out = nullptr;
  cudaMalloc(&in, bufferBytes);
  cudaMalloc(&out, bufferBytes);
  cudaMemset(in, 0, bufferBytes);
  const bool allreduce = collective == "allreduce";
  void* ringHost = nullptr;
  void* ringDevice = nullptr;
  if (clocks) {
    cudaHostAlloc(&ringHost, sizeof(CallClock) * kCallClocks, cudaHostAllocMapped);
    cudaHostGetDevicePointer(&ringDevice, ringHost, 0);
  }
  if (w->rank() == 0) {
    printf(
        "# ringguard bench_peer_allreduce %s: %d ranks, fp32, fault prob %g, clocks %s, us per call (median "
        "of "
        "%d x %d)\n",
        collective.c_str(), w->size(), faultProb, clocks ? "on" : "off", reps, iters);
    if (allreduce) {
      printf("%12s %10s %10s %10s %10s %10s %10s %10s\n", "bytes", "one_eager", "one_graph", "two_eager",
             "two_graph", "d2d_copy", "two/one", "best/copy");
    } else {
      printf("%12s %10s %10s %10s %10s\n", "bytes", "eager_us", "graph_us", "d2d_copy", "graph/copy");
    }
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 4) {
    const size_t count = bytes / 4;
    const int n = bytes >= (16u << 20) ? std::max(1, iters / 10) : iters;
    // The copy moves what one rank receives: the result's bytes (the all-gather's: every rank's block).
    const size_t copyBytes = collective == "allgather" ? bytes * size_t(w->size()) : bytes;
    const double copyUs = bench::medianUsPerCall(s, n, reps, [&] {
      for (int i = 0; i < n; ++i) cudaMemcpyAsync(out, in, copyBytes, cudaMemcpyDeviceToDevice, s);
    });
    if (allreduce) {
      PeerAllreduceArgs a;
      fillWindowArgs(*w, count, CollectiveKind::kAllreduce, faultProb, arriveFirst, &a);
      a.send = in;
      a.recv = out;
      a.count = count;
      // --clocks: the timeline's clock kernels around each call, as the peer path launches them.
      auto timed = [&](const PeerAllreduceArgs& args) {
        void* own = w->window(w->rank());
        if (!clocks) return launchPeerAllreduce(args, s);
        RINGGUARD_RETURN_IF_ERROR(launchCallClockBegin(own, s));
        RINGGUARD_RETURN_IF_ERROR(launchPeerAllreduce(args, s));
        return launchCallClockEnd(own, static_cast<CallClock*>(ringDevice), args, s);
      };
      const auto one = timeKernel(*w, s, n, reps, "one-shot allreduce", [&] { return timed(a); });
      PeerAllreduceArgs b = a;
      b.algorithm = PeerAlgorithm::kAllreduceTwoShot;
      const auto two = timeKernel(*w, s, n, reps, "two-shot allreduce", [&] { return timed(b); });
      if (w->rank() == 0) {
        const double best = std::min(std::min(one.first, one.second), std::min(two.first, two.second));
        printf("%12zu %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", bytes, one.first, one.second,
               two.first, two.second, copyUs, two.second / one.second, best / copyUs);
      }
    } else {
      std::function<Status()> launch;
      PeerAllgatherArgs g;
      PeerBroadcastArgs c;
      PeerReduceScatterArgs r;
      PeerSendRecvArgs p;
      if (collective == "allgather") {
        fillWindowArgs(*w, count, CollectiveKind::kAllgather, faultProb, arriveFirst, &g);
        g.send = in;
        g.recv = out;
        g.count = count;
        launch = [&] { return launchPeerAllgather(g, s); };
      } else if (collective == "broadcast") {
        fillWindowArgs(*w, count, CollectiveKind::kBroadcast, faultProb, arriveFirst, &c);
        c.send = in;
        c.recv = out;
        c.count = count;
        launch = [&] { return launchPeerBroadcast(c, s); };
      } else if (sendrecv) {
        fillWindowArgs(*w, 0, CollectiveKind::kSendRecv, faultProb, arriveFirst, &p);
        p.send = in;
        p.sendCount = count;
        p.dst = (w->rank() + 1) % w->size();
        p.recv = out;
        p.recvCount = count;
        p.src = (w->rank() + w->size() - 1) % w->size();
        launch = [&] { return launchPeerSendRecv(p, s); };
      } else {
        fillWindowArgs(*w, count, CollectiveKind::kReduceScatter, faultProb, arriveFirst, &r);
        r.send = in;
        r.recv = out;
        r.count = count;
        launch = [&] { return launchPeerReduceScatter(r, s); };
      }
      const auto t = timeKernel(*w, s, n, reps, collective.c_str(), launch);
      if (w->rank() == 0)
        printf("%12zu %10.2f %10.2f %10.2f %10.2f\n", bytes, t.first, t.second, copyUs, t.second / copyUs);
    }
    fflush(stdout);
  }
  if (w->rank() == 0 && faultProb > 0) {
    printf("# rank 0: detected %llu injected %llu\n", w->errorRecord()->detected, w->errorRecord()->injected);
  }
  cudaFree(in);
  cudaFree(out);
  w.reset();  // waits for the device before the ring the kernels wrote goes
  if (ringHost != nullptr) cudaFreeHost(ringHost);
  MPI_Finalize();
  return 0;
}
