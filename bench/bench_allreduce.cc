// nccl-tests-style benchmark: ringguard's verified host ring against MPI_Allreduce on the same buffers,
// in the same run.
//
//   mpirun -np 2 build/bench/bench_allreduce -b 1K -e 64M -f 4 -n 10 -w 3 -c 1 -d f32
//
// With -D (device buffers, built with CUDA) the peer is what a user would do without ringguard: copy to
// pinned host memory, MPI_Allreduce, copy back (ringguard_vs_mpi_staged). Ranks share the GPU through the
// host-staged transport unless each has its own GPU and RINGGUARD_DEVICE_TRANSPORT allows NCCL. Over NCCL
// the peer is ncclAllReduce on the same buffers (ringguard_vs_nccl), and a third line times the ring's
// transfers alone over ncclSend/ncclRecv (p2p_ring_vs_nccl): the ceiling of a ring on NCCL point-to-point,
// whole columns per group and (p2p_sliced_vs_nccl) one group per slice.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/reduce.h"
#include "ringguard/mpi/mpi_communicator.h"
#if RINGGUARD_BENCH_DEVICE
#include <cuda_runtime_api.h>

#include "ringguard/runtime/mpi_device_communicator.h"
#endif
#if RINGGUARD_BENCH_NCCL
#include <nccl.h>
#endif

using namespace ringguard;
using namespace ringguard::bench;

int main(int argc, char** argv) {
  CLI::App app{"bench_allreduce: ringguard verified ring vs MPI_Allreduce"};
  BenchArgs args;
  args.addTo(app, "device buffers (CUDA builds): against copy to host + MPI_Allreduce + copy back");
  int p2pLanes = 0;
  app.add_option("--p2p-lanes", p2pLanes,
                 "NCCL communicators (each on its own stream) the sliced p2p ceiling spreads its groups over "
                 "(0: as many as the transport's lanes, RINGGUARD_NCCL_LANES)")
      ->check(CLI::Range(0, 8));
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (int rc = parseOrExit(app, argc, argv, &args, nullptr); rc >= 0) return rc;
  if (!sizesFit(args, dataTypeSize(args.dtype), rank)) {
    MPI_Finalize();
    return 2;
  }
  const Options options = benchOptions(args);
  const size_t minB = args.minB, maxB = args.maxB;
  const DataType dtype = args.dtype;
  const double factor = args.factor;
  const int iters = args.iters, warmup = args.warmup, check = args.check;
  const bool device = args.device;
#if RINGGUARD_BENCH_DEVICE
  cuda::DeviceOptions dopt;
  std::unique_ptr<Communicator> comm = benchCommunicator(args, options, &dopt);
#else
  std::unique_ptr<Communicator> comm = benchCommunicator(args, options);
#endif
  if (!comm) return 2;
#if RINGGUARD_BENCH_DEVICE
  cudaStream_t stream = nullptr;
  if (device) BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
#if RINGGUARD_BENCH_NCCL
  ncclComm_t nccl = nullptr;
  struct Lane {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  std::vector<Lane> lanes;
  // Over NCCL the peer is ncclAllReduce on the same buffers (a communicator of its own).
  if (device && std::string(comm->transportName()) == "nccl") {
    nccl = newNcclComm();
    // Lanes of the sliced p2p ceiling: lane 0 is (nccl, stream); each other one a communicator and stream.
    lanes.push_back({nccl, stream});
    if (p2pLanes == 0) p2pLanes = dopt.ncclLanes;
    for (int l = 1; l < p2pLanes; ++l) {
      Lane lane;
      BENCH_CUDA(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
      lane.comm = newNcclComm();
      lanes.push_back(lane);
    }
  }
#endif
#endif
  const size_t esize = dataTypeSize(dtype);
  if (rank == 0) {
    printf(
        "# ringguard bench_allreduce: np=%d dtype=%s slice=%zu slots=%d iters=%d warmup=%d memory=%s "
        "transport=%s\n",
        size, dataTypeName(dtype), comm->options().sliceBytes, comm->options().slots, iters, warmup,
        device ? "device" : "host", comm->transportName());
    if (device && std::string(comm->transportName()) == "nccl") {
      printf("# peer (mpi columns): ncclAllReduce on the same device buffers\n");
    } else if (device) {
      printf("# peer (mpi columns): cudaMemcpy to pinned host + MPI_Allreduce + cudaMemcpy back\n");
    }
    printf("# busbw = algbw * 2(n-1)/n. ratio = MPI time / ringguard time (> 1: ringguard faster)\n");
    printf("%12s %12s | %10s %9s %9s | %10s %9s %9s | %7s %6s\n", "bytes", "count", "rg_us", "rg_algbw",
           "rg_busbw", "mpi_us", "mpi_algbw", "mpi_busbw", "ratio", "check");
  }
  double lastRatio = 0, lastP2p = 0;
  size_t lastBytes = 0;
  bool allOk = true;
  std::vector<uint8_t> in, outRg, outMpi;
  for (size_t bytes = std::max(minB, esize); bytes <= maxB;
       bytes = std::max(bytes + esize, size_t(bytes * factor))) {
    const size_t count = bytes / esize, n = count * esize;
    in.resize(n);
    outRg.assign(n, 0);
    outMpi.assign(n, 0);
    fill(dtype, in.data(), count, rank);
    bool failed = false;
    auto report = [&](const Status& st) {
      if (!st.isOk()) {
        fprintf(stderr, "rank %d: %s\n", rank, st.toString().c_str());
        failed = true;
      }
    };
    double tRg = 0, tMpi = 0, tP2p = 0, tP2pSliced = 0;
    Counters before = comm->counters();
    if (!device) {
      tRg = timeIt(warmup, iters,
                   [&] { report(comm->allreduce(in.data(), outRg.data(), count, dtype, ReduceOp::kSum)); });
      tMpi = timeIt(warmup, iters, [&] {
        MPI_Allreduce(in.data(), outMpi.data(), int(count), mpiType(dtype), MPI_SUM, MPI_COMM_WORLD);
      });
    }
#if RINGGUARD_BENCH_DEVICE
    if (device) {
      void *dIn = nullptr, *dOut = nullptr, *pinned = nullptr;
      BENCH_CUDA(cudaMalloc(&dIn, n + 1));
      BENCH_CUDA(cudaMalloc(&dOut, n + 1));
      BENCH_CUDA(cudaMallocHost(&pinned, n + 1));
      BENCH_CUDA(cudaMemcpy(dIn, in.data(), n, cudaMemcpyHostToDevice));
      tRg = timeIt(warmup, iters, [&] {
        report(comm->allreduce(dIn, dOut, count, dtype, ReduceOp::kSum, stream));
        BENCH_CUDA(cudaStreamSynchronize(stream));
      });
      BENCH_CUDA(cudaMemcpy(outRg.data(), dOut, n, cudaMemcpyDeviceToHost));
      tMpi = timeIt(warmup, iters, [&] {
#if RINGGUARD_BENCH_NCCL
        if (nccl) {
          ncclAllReduce(dIn, dOut, count, ncclType(dtype), ncclSum, nccl, stream);
          BENCH_CUDA(cudaStreamSynchronize(stream));
          return;
        }
#endif
        BENCH_CUDA(cudaMemcpyAsync(pinned, dIn, n, cudaMemcpyDeviceToHost, stream));
        BENCH_CUDA(cudaStreamSynchronize(stream));
        MPI_Allreduce(MPI_IN_PLACE, pinned, int(count), mpiType(dtype), MPI_SUM, MPI_COMM_WORLD);
        BENCH_CUDA(cudaMemcpyAsync(dOut, pinned, n, cudaMemcpyHostToDevice, stream));
        BENCH_CUDA(cudaStreamSynchronize(stream));
      });
      BENCH_CUDA(cudaMemcpy(outMpi.data(), dOut, n, cudaMemcpyDeviceToHost));
#if RINGGUARD_BENCH_NCCL
      // The ring's transfers alone over ncclSend/ncclRecv: 2(n-1) steps, each sending a column (bytes /
      // ranks) to the right and receiving one from the left into scratch, in groups of `piece` bytes; no
      // verification, no reduction. With whole columns: the ceiling of any ring on NCCL's point-to-point
      // operations; with the ring's slice size: the ceiling at that slice size (one group per slice).
      if (nccl && size > 1) {
        const size_t column = n / size;
        void* scratch = nullptr;
        BENCH_CUDA(cudaMalloc(&scratch, column + 1));
        // Group g goes to lane g % numLanes (its own communicator and stream when --p2p-lanes > 1).
        auto p2pRing = [&](size_t piece, size_t numLanes) {
          return timeIt(warmup, iters, [&] {
            size_t g = 0;
            for (int s = 0; s < 2 * (size - 1); ++s) {
              const size_t from = size_t((rank - s % size + size) % size) * column;
              for (size_t off = 0; off < std::max<size_t>(column, 1); off += piece, ++g) {
                const size_t len = std::min(piece, column - off);
                const Lane& lane = lanes[g % numLanes];
                ncclGroupStart();
                ncclSend(static_cast<uint8_t*>(dIn) + from + off, len, ncclUint8, (rank + 1) % size,
                         lane.comm, lane.stream);
                ncclRecv(static_cast<uint8_t*>(scratch) + off, len, ncclUint8, (rank + size - 1) % size,
                         lane.comm, lane.stream);
                ncclGroupEnd();
              }
            }
            for (size_t l = 0; l < numLanes; ++l) BENCH_CUDA(cudaStreamSynchronize(lanes[l].stream));
          });
        };
        tP2p = p2pRing(std::max<size_t>(column, 1), 1);
        const size_t slice = comm->options().sliceBytes;
        if (slice < column) tP2pSliced = p2pRing(slice, lanes.size());
        BENCH_CUDA(cudaFree(scratch));
      }
#endif
      BENCH_CUDA(cudaFree(dIn));
      BENCH_CUDA(cudaFree(dOut));
      BENCH_CUDA(cudaFreeHost(pinned));
    }
#endif
    Counters after = comm->counters();
    // Without fault injection nothing may fail verification: a detection here is a real bug (or a real
    // bad link), never noise.
    const bool clean = after.detected - before.detected == after.injected - before.injected;
    if (!clean)
      fprintf(stderr, "rank %d: %llu slices failed verification without injection\n", rank,
              (unsigned long long)(after.detected - before.detected));
    int ok = !failed && clean && (!check || std::memcmp(outRg.data(), outMpi.data(), n) == 0), allRanks = 0;
    MPI_Allreduce(&ok, &allRanks, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    allOk = allOk && allRanks;
    const double algRg = double(n) / tRg / 1e9, algMpi = double(n) / tMpi / 1e9;
    const double busFactor = size > 1 ? 2.0 * (size - 1) / size : 1.0;
    lastRatio = tMpi / tRg;
    lastBytes = n;
    if (rank == 0) {
      printf("%12zu %12zu | %10.1f %9.3f %9.3f | %10.1f %9.3f %9.3f | %7.3f %6s\n", n, count, tRg * 1e6,
             algRg, algRg * busFactor, tMpi * 1e6, algMpi, algMpi * busFactor, lastRatio,
             !check ? "-" : (allRanks ? "ok" : "FAIL"));
      printBreakdown(before, after, warmup + iters);
      if (tP2p > 0) {
        printf("%68s p2p ring (transfers only): %.1f us, busbw %.3f GB/s, p2p_ring_vs_nccl=%.3f\n", "",
               tP2p * 1e6, double(n) / tP2p / 1e9 * busFactor, tMpi / tP2p);
      }
#if RINGGUARD_BENCH_NCCL
      if (tP2pSliced > 0) {
        printf(
            "%68s p2p ring in %zu-byte groups over %zu lane(s): %.1f us, busbw %.3f GB/s, "
            "p2p_sliced_vs_nccl=%.3f\n",
            "", comm->options().sliceBytes, lanes.size(), tP2pSliced * 1e6,
            double(n) / tP2pSliced / 1e9 * busFactor, tMpi / tP2pSliced);
      }
#endif
    }
    lastP2p = tP2p > 0 ? tMpi / tP2p : 0;
  }
  Counters c = comm->counters();
  if (rank == 0) {
    printf("# rank 0 counters: %s\n", c.toString().c_str());
    const char* key = !device                                        ? "ringguard_vs_mpi"
                      : std::string(comm->transportName()) == "nccl" ? "ringguard_vs_nccl"
                                                                     : "ringguard_vs_mpi_staged";
    printf("summary: bytes=%zu np=%d %s=%.3f", lastBytes, size, key, lastRatio);
    if (lastP2p > 0) printf(" p2p_ring_vs_nccl=%.3f", lastP2p);
    printf("\n");
  }
  comm.reset();
#if RINGGUARD_BENCH_NCCL
  for (size_t l = 1; l < lanes.size(); ++l) {
    ncclCommDestroy(lanes[l].comm);
    cudaStreamDestroy(lanes[l].stream);
  }
  if (nccl) ncclCommDestroy(nccl);
#endif
  MPI_Finalize();
  return allOk ? 0 : 1;
}
