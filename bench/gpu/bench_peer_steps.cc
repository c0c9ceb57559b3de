// bench_peer_steps: where the verified one-shot allreduce's time goes, step by step (issue 42's in-graph
// latency goal; docs/PERFORMANCE.md, "Per-step clocks of the peer kernels"). Its allreduce kernels are
// src/cuda/peer/allreduce_{one,two}_shot.cu compiled into this program with RINGGUARD_PEER_STEP_CLOCKS
// (cuda/peer/step_clock.cuh), taking the place of the library's (the linker takes an archive's object only
// for a symbol still undefined); the program stops if no call wrote its trace. Run under mpirun with every
// rank on the one GPU and MPS started (scripts/gpu_peer_check.sh, PEER_STEPS=1):
//   mpirun -np 2 build/bench/gpu/bench_peer_steps                 1 KiB, 64 KiB, 1 MiB; eager and graph
//   mpirun -np 4 build/bench/gpu/bench_peer_steps --algorithm two -s 1M
//   mpirun -np 2 build/bench/gpu/bench_peer_steps -s 1M --fault-prob 0.01  a fault in (nearly) every call
// For each size and mode, --calls calls (the graph: --graph-calls captured launches, replayed), then per step
// the median over the calls of its time since the previous step reached in the same block (clock64,
// converted with the SM clock measured against %globaltimer) and since entry, on rank 0 and on the last
// rank; each delta includes one marker (its cost is printed). The tail steps are the last block's (the one
// that publishes `done`): its first step counts from block 0's arrival count by %globaltimer. Then the same
// calls timed by events, and an empty kernel of the same grid and parameters (the graph floor). The
// summary closing the output has one column per size and mode.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_sizes.h"
#include "bootstrap/mpi_bootstrap.h"
#include "cuda/peer/peer_collectives.h"
#include "cuda/peer/peer_launch.h"
#include "cuda/peer/step_clock.h"
#include "gpu/peer_bench_timing.h"
#include "peer_steps_kernels.h"
#include "transport/peer/peer_window.h"

using namespace ringguard;
using namespace ringguard::peer;

namespace {

[[noreturn]] void die(int rank, const std::string& what) {
  fprintf(stderr, "bench_peer_steps: rank %d: %s\n", rank, what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void check(int rank, cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(rank, std::string(what) + ": " + cudaGetErrorString(e));
}

std::string stepName(int i, int own) {
  static const std::map<int, const char*> names = {
      {kStepEntry, "entry"},
      {kStepSeqRead, "seq read"},
      {kStepAcked, "acknowledgements"},
      {kStepInputLoaded, "publish: input loaded"},
      {kStepPublishCrc, "publish: CRC + entry"},
      {kStepPublishFence, "publish: fence"},
      {kStepEpochsStored, "publish: epochs stored"},
      {kStepReduced, "reduced + stored"},
      {kStepResultsRead, "two-shot: results read"},
      {kStepArrivalChecked, "arrival check"},
      {kStepGridFence, "grid fence"},
      {kStepArriveCounted, "arrive counted"},
      {kStepExit, "block 0 exit"},
      {kStepLastArrive, "last block: arrived"},
      {kStepLastReported, "last block: seq, report"},
      {kStepLastDone, "last block: done published"},
      {kStepLastExit, "last block: exit"},
  };
  if (i >= kStepPeer && i <= kStepPeerLast) {
    const int p = (i - kStepPeer) / kPeerSteps, what = (i - kStepPeer) % kPeerSteps;
    static const char* const kinds[] = {"epoch seen", "bytes loaded", "CRC verified"};
    // `own`: this rank's input (-1: every rank by number).
    return (p == own ? std::string("own") : "rank " + std::to_string(p)) + ": " + kinds[what];
  }
  const auto it = names.find(i);
  return it == names.end() ? "step " + std::to_string(i) : it->second;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per step: the median delta from the previous step reached and since entry (ns; -1: never reached).
struct StepStats {
  std::vector<double> delta, cum;
  std::vector<int> hits;
  double total = -1;  // entry (block 0) to done published (last block), %globaltimer
};

StepStats analyze(const std::vector<StepRow>& rows, double cyclesPerNs) {
  StepStats st;
  st.delta.assign(kStepCount, -1);
  st.cum.assign(kStepCount, -1);
  st.hits.assign(kStepCount, 0);
  std::vector<std::vector<double>> d(kStepCount), c(kStepCount);
  std::vector<double> totals;
  const auto ns = [&](uint64_t cycles) { return double(cycles) / cyclesPerNs; };
  for (const StepRow& r : rows) {
    if (r.epoch == 0 || r.clock[kStepEntry] == 0) continue;
    const bool sameBlock = r.lastBlock == 0;
    int prev = -1;
    for (int i = 0; i < kStepCount; ++i) {
      if (r.clock[i] == 0) continue;
      if (i == kStepFirstTail) prev = -1;  // another block, unless block 0 is the last
      ++st.hits[size_t(i)];
      if (i < kStepFirstTail || sameBlock) {
        c[size_t(i)].push_back(ns(r.clock[i] - r.clock[kStepEntry]));
      } else {
        c[size_t(i)].push_back(double(int64_t(r.timer[i] - r.timer[kStepEntry])));
      }
      if (prev >= 0) {
        d[size_t(i)].push_back(ns(r.clock[i] - r.clock[size_t(prev)]));
      } else if (i == kStepFirstTail && r.clock[kStepArriveCounted] != 0) {
        d[size_t(i)].push_back(sameBlock ? ns(r.clock[i] - r.clock[kStepArriveCounted])
                                         : double(int64_t(r.timer[i] - r.timer[kStepArriveCounted])));
      } else if (i == kStepFirstTail && sameBlock && r.clock[kStepArrivalChecked] != 0) {
        // A one-block grid counts no arrival: its tail follows the block barrier.
        d[size_t(i)].push_back(ns(r.clock[i] - r.clock[kStepArrivalChecked]));
      }
      prev = i;
    }
    if (r.timer[kStepLastDone] != 0)
      totals.push_back(double(int64_t(r.timer[kStepLastDone] - r.timer[kStepEntry])));
  }
  for (int i = 0; i < kStepCount; ++i) {
    st.delta[size_t(i)] = median(d[size_t(i)]);
    st.cum[size_t(i)] = median(c[size_t(i)]);
  }
  st.total = median(totals);
  return st;
}

struct Column {
  std::string name;
  StepStats first, last;  // rank 0, the last rank
  double eventsUs = -1, floorUs = -1, skewNs = 0, flagNs = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CLI::App app{"bench_peer_steps"};
  std::vector<std::string> sizeArgs = {"1K", "64K", "1M"};
  std::string algorithm = "one";
  int calls = 1000, graphCalls = 100;
  double faultProb = 0;
  app.add_option("-s,--sizes", sizeArgs, "message sizes (fp32 sum)")->delimiter(',');
  app.add_option("--algorithm", algorithm)->check(CLI::IsMember({"one", "two"}));
  app.add_option("-n,--calls", calls, "calls traced per size and mode")
      ->check(CLI::Range(1, kStepRingRows - 64));
  app.add_option("-g,--graph-calls", graphCalls, "launches captured in the graph (calls is a multiple)")
      ->check(CLI::Range(1, kStepRingRows - 64));
  app.add_option("--fault-prob", faultProb,
                 "chunk reads corrupted (transient, bitflip): where a call with a fault spends its time")
      ->check(CLI::Range(0.0, 1.0));
  std::vector<size_t> sizes;
  try {
    app.parse(argc, argv);
    for (const std::string& s : sizeArgs) sizes.push_back(bench::parseBytes("--sizes", s));
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    MPI_Finalize();
    return rc;
  }
  const size_t maxBytes = *std::max_element(sizes.begin(), sizes.end());
  const int replays = std::max(1, calls / graphCalls);
  calls = replays * graphCalls;

  std::unique_ptr<Bootstrap> bs;
  Status st = mpi::createBootstrap(MPI_COMM_WORLD, &bs);
  std::unique_ptr<PeerWindows> w;
  if (st.isOk()) st = PeerWindows::create(*bs, 0, maxBytes, 0, PeerHandles::kAuto, &w);
  if (!st.isOk()) die(-1, st.toString());
  const int rank = w->rank(), size = w->size();

  // The trace ring, named in this rank's window header (cuda/peer/step_clock.h).
  StepRow* ring = nullptr;
  const size_t ringBytes = sizeof(StepRow) * kStepRingRows;
  check(rank, cudaMalloc(reinterpret_cast<void**>(&ring), ringBytes), "cudaMalloc(ring)");
  check(rank,
        cudaMemcpy(static_cast<char*>(w->window(rank)) + kStepTraceOffset, &ring, sizeof ring,
                   cudaMemcpyHostToDevice),
        "the ring's address into the window");
  const double cyclesPerNs = steps::clockCyclesPerNs(20ull * 1000 * 1000);
  const double markerNs = steps::markerCycles() / cyclesPerNs;

  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *in = nullptr, *out = nullptr;
  check(rank, cudaMalloc(&in, maxBytes), "cudaMalloc");
  check(rank, cudaMalloc(&out, maxBytes), "cudaMalloc");
  cudaMemset(in, 0, maxBytes);
  if (rank == 0) {
    printf(
        "# ringguard bench_peer_steps: %s-shot allreduce, %d ranks, fp32 sum, %d calls per size and mode, "
        "fault prob %g\n",
        algorithm.c_str(), size, calls, faultProb);
    printf(
        "# SM clock %.4f cycles/ns (against %%globaltimer over 20 ms); one marker: %.1f ns (%.0f cycles), "
        "included in every delta\n",
        cyclesPerNs, markerNs, markerNs * cyclesPerNs);
  }

  std::vector<StepRow> rows(kStepRingRows), all(size_t(kStepRingRows) * size_t(size));
  std::vector<Column> columns;
  for (size_t bytes : sizes) {
    PeerAllreduceArgs a;
    a.rank = rank;
    a.size = size;
    for (int r = 0; r < size; ++r) a.windows[r] = w->window(r);
    a.layout = w->layout();
    a.record = w->errorRecordDevice();
    a.oneDevice = w->oneDevice();
    a.fingerprint[0] = uint32_t(CollectiveKind::kAllreduce);
    a.fingerprint[3] = uint32_t(bytes / 4);
    a.timeoutNs = 10ull * 1000 * 1000 * 1000;
    a.fault.probability = faultProb;
    a.fault.seed = uint32_t(rank);
    a.send = in;
    a.recv = out;
    a.count = bytes / 4;
    a.algorithm = algorithm == "one" ? PeerAlgorithm::kAllreduceOneShot : PeerAlgorithm::kAllreduceTwoShot;
    int blocks = 1;
    if (!(st = peerGrid(chunkCount(bytes), size, &blocks)).isOk()) die(rank, st.toString());
    const auto launch = [&] {
      const Status ls = launchPeerAllreduce(a, s);
      if (!ls.isOk()) die(rank, ls.toString());
    };

    cudaGraph_t g, floorGraph;
    cudaGraphExec_t ge, floorExec;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < graphCalls; ++i) launch();
    cudaStreamEndCapture(s, &g);
    check(rank, cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate");
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < graphCalls; ++i) steps::launchEmptyPeerKernel(a, blocks, s);
    cudaStreamEndCapture(s, &floorGraph);
    check(rank, cudaGraphInstantiate(&floorExec, floorGraph, 0), "cudaGraphInstantiate(floor)");

    for (const bool graph : {false, true}) {
      Column col;
      col.name =
          (bytes >= (1u << 20) ? std::to_string(bytes >> 20) + "M" : std::to_string(bytes >> 10) + "K") +
          (graph ? "/graph" : "/eager");
      const auto run = [&] {
        if (graph) {
          for (int r = 0; r < replays; ++r) cudaGraphLaunch(ge, s);
        } else {
          for (int i = 0; i < calls; ++i) launch();
        }
      };
      run();  // warm
      check(rank, cudaStreamSynchronize(s), "warm-up");
      col.eventsUs = bench::medianUsPerCall(s, calls, 5, run);
      col.floorUs = graph ? bench::medianUsPerCall(s, graphCalls, 5, [&] { cudaGraphLaunch(floorExec, s); })
                          : bench::medianUsPerCall(s, graphCalls, 5, [&] {
                              for (int i = 0; i < graphCalls; ++i) steps::launchEmptyPeerKernel(a, blocks, s);
                            });
      // The traced calls: the ring cleared, every rank lined up, then one run.
      check(rank, cudaStreamSynchronize(s), "before the traced run");
      cudaMemset(ring, 0, ringBytes);
      cudaDeviceSynchronize();
      MPI_Barrier(MPI_COMM_WORLD);
      run();
      check(rank, cudaStreamSynchronize(s), "traced run");
      const ErrorRecord* rec = w->errorRecord();
      if (rec->code != 0) {
        die(rank, "allreduce failed: code " + std::to_string(rec->code) + " peer " +
                      std::to_string(rec->peer) + " chunk " + std::to_string(rec->chunk));
      }
      cudaMemcpy(rows.data(), ring, ringBytes, cudaMemcpyDeviceToHost);
      const long traced =
          std::count_if(rows.begin(), rows.end(), [](const StepRow& r) { return r.epoch != 0; });
      if (traced < calls) {
        die(rank, std::to_string(traced) + " of " + std::to_string(calls) +
                      " calls wrote a trace row: are the kernels the instrumented ones "
                      "(RINGGUARD_PEER_STEP_CLOCKS)?");
      }
      MPI_Gather(rows.data(), int(ringBytes), MPI_BYTE, all.data(), int(ringBytes), MPI_BYTE, 0,
                 MPI_COMM_WORLD);
      if (rank != 0) continue;
      const auto rowsOf = [&](int r) {
        return std::vector<StepRow>(all.begin() + ptrdiff_t(r) * kStepRingRows,
                                    all.begin() + ptrdiff_t(r + 1) * kStepRingRows);
      };
      col.first = analyze(rowsOf(0), cyclesPerNs);
      col.last = analyze(rowsOf(size - 1), cyclesPerNs);
      // Across ranks (%globaltimer, one GPU): the last rank's entry after rank 0's, and rank 0 seeing the
      // last rank's chunk epoch after it stored it (negative: it was there before rank 0 looked).
      std::vector<double> skew, flag;
      const StepRow* last = all.data() + ptrdiff_t(size - 1) * kStepRingRows;
      const int seen = kStepPeer + kPeerSteps * (size - 1) + kStepPeerEpochSeen;
      for (int i = 0; i < kStepRingRows && size > 1; ++i) {
        const StepRow& r0 = all[size_t(i)];
        const StepRow& rl = last[i];
        if (r0.epoch == 0 || r0.epoch != rl.epoch) continue;
        skew.push_back(double(int64_t(rl.timer[kStepEntry] - r0.timer[kStepEntry])));
        if (r0.timer[seen] != 0 && rl.timer[kStepEpochsStored] != 0)
          flag.push_back(double(int64_t(r0.timer[seen] - rl.timer[kStepEpochsStored])));
      }
      col.skewNs = median(skew);
      col.flagNs = median(flag);

      printf(
          "\n# %zu B %s: grid %d blocks; %.2f us per call by events (instrumented), graph floor %.2f us "
          "(empty kernel, same grid and parameters%s)\n",
          bytes, graph ? "graph" : "eager", blocks, col.eventsUs, col.floorUs, graph ? "" : ", eager");
      printf(
          "# entry to done published %.0f ns (rank 0), %.0f ns (rank %d); rank %d enters %.0f ns after rank "
          "0; "
          "rank 0 sees its epochs %.0f ns after it stored them (%%globaltimer)\n",
          col.first.total, col.last.total, size - 1, size - 1, col.skewNs, col.flagNs);
      printf("%-30s %10s %10s %10s %10s\n", "step (ns, median)", "r0 delta", "r0 cum", "rN delta", "rN cum");
      for (int i = 0; i < kStepCount; ++i) {
        if (col.first.hits[size_t(i)] == 0 && col.last.hits[size_t(i)] == 0) continue;
        const std::string name = stepName(i, -1);
        printf("%-30s %10.0f %10.0f %10.0f %10.0f\n", name.c_str(), col.first.delta[size_t(i)],
               col.first.cum[size_t(i)], col.last.delta[size_t(i)], col.last.cum[size_t(i)]);
      }
      fflush(stdout);
      columns.push_back(col);
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaGraphExecDestroy(floorExec);
    cudaGraphDestroy(floorGraph);
  }

  if (rank == 0) {
    // The summary: one column per size and mode, rank 0's delta per step, then the last rank's.
    for (int which = 0; which < 2; ++which) {
      printf(
          "\n# summary: rank %d, ns since the previous step (median of %d calls; 'own' = rank %d's input)\n",
          which == 0 ? 0 : size - 1, calls, which == 0 ? 0 : size - 1);
      printf("%-30s", "step");
      for (const Column& c : columns) printf(" %11s", c.name.c_str());
      printf("\n");
      for (int i = 0; i < kStepCount; ++i) {
        bool any = false;
        for (const Column& c : columns) any = any || (which == 0 ? c.first : c.last).hits[size_t(i)] != 0;
        if (!any) continue;
        printf("%-30s", stepName(i, which == 0 ? 0 : size - 1).c_str());
        for (const Column& c : columns) printf(" %11.0f", (which == 0 ? c.first : c.last).delta[size_t(i)]);
        printf("\n");
      }
      printf("%-30s", "entry -> done published");
      for (const Column& c : columns) printf(" %11.0f", (which == 0 ? c.first : c.last).total);
      printf("\n");
    }
    printf("%-30s", "us per call (events)");
    for (const Column& c : columns) printf(" %11.2f", c.eventsUs);
    printf("\n%-30s", "floor us (empty kernel)");
    for (const Column& c : columns) printf(" %11.2f", c.floorUs);
    printf("\n%-30s", "rank N entry - rank 0 (ns)");
    for (const Column& c : columns) printf(" %11.0f", c.skewNs);
    printf("\n%-30s", "r0 sees rN epochs (ns)");
    for (const Column& c : columns) printf(" %11.0f", c.flagNs);
    printf("\n# marker %.1f ns in every delta; SM clock %.4f cycles/ns\n", markerNs, cyclesPerNs);
  }
  // The window outlives no trace: the header's line cleared before the ring goes.
  const StepRow* none = nullptr;
  cudaMemcpy(static_cast<char*>(w->window(rank)) + kStepTraceOffset, &none, sizeof none,
             cudaMemcpyHostToDevice);
  cudaFree(ring);
  cudaFree(in);
  cudaFree(out);
  w.reset();
  MPI_Finalize();
  return 0;
}
