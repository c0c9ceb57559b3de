// nccl-tests-style benchmark of every verified collective against its peer on the same buffers, in the
// same run:
//
//   mpirun -np 2 build/bench/bench_collectives -o allgather -b 1K -e 64M -f 4 -n 10 -w 3
//
// -o allreduce | reduce_scatter | allgather | broadcast | alltoall | sendrecv. Sizes are nccl-tests'
// (allreduce, broadcast, sendrecv: the buffer; reduce_scatter, alltoall: the send buffer; allgather: the
// receive buffer); busbw uses nccl-tests' factor per collective. Host memory: the peer is the matching MPI
// collective (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Alltoall,
// MPI_Sendrecv to the right neighbour). With -D (device buffers, CUDA builds) the peer is what a user
// would do without ringguard: copy to pinned host memory, the MPI collective, copy back
// (ringguard_vs_mpi_staged); over NCCL (2+ GPUs) it is the matching NCCL collective on the same buffers
// (ringguard_vs_nccl). Every row checks both results against each other and reports the control frames
// each verified collective sent (ctl/coll, this rank's).
//
// --staged-chunk BYTES (with -D, allreduce or allgather): ringguard's side is the downgrade engine's
// `staged_chunked` variant instead of the device ring: stagedAllreduce / stagedAllgather, the buffers staged
// BYTES at a time through pinned host memory and reduced or gathered by a host (MPI) communicator's verified
// ring (docs/DOWNGRADE.md). The peer is the same.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "ringguard/runtime/staged_allgather.h"
#include "ringguard/runtime/staged_allreduce.h"
#if RINGGUARD_BENCH_DEVICE
#include "ringguard/runtime/device_stager.h"
#endif

using namespace ringguard;
using namespace ringguard::bench;

namespace {

enum class Op { kAllreduce, kReduceScatter, kAllgather, kBroadcast, kAlltoall, kSendRecv };

struct Shape {
  size_t count = 0;      // the count argument of the call (elements)
  size_t sendElems = 0;  // elements of the send buffer
  size_t recvElems = 0;  // elements of the receive buffer
};

// nccl-tests' size (bytes) -> the call's count and buffers.
Shape shapeOf(Op op, size_t bytes, size_t esize, int n) {
  const size_t elems = bytes / esize;
  switch (op) {
    case Op::kReduceScatter:
      return {elems / n, elems / n * n, elems / n};
    case Op::kAllgather:
      return {elems / n, elems / n, elems / n * n};
    case Op::kAlltoall:
      return {elems / n, elems / n * n, elems / n * n};
    default:
      return {elems, elems, elems};
  }
}

// nccl-tests' bus bandwidth factor.
double busFactor(Op op, int n) {
  if (n == 1) return 1.0;
  switch (op) {
    case Op::kAllreduce:
      return 2.0 * (n - 1) / n;
    case Op::kReduceScatter:
    case Op::kAllgather:
    case Op::kAlltoall:
      return double(n - 1) / n;
    default:
      return 1.0;
  }
}

bool parseOp(const std::string& s, Op* op) {
  const std::pair<const char*, Op> names[] = {
      {"allreduce", Op::kAllreduce}, {"reduce_scatter", Op::kReduceScatter},
      {"allgather", Op::kAllgather}, {"broadcast", Op::kBroadcast},
      {"alltoall", Op::kAlltoall},   {"sendrecv", Op::kSendRecv}};
  for (const auto& [name, value] : names) {
    if (s == name) {
      *op = value;
      return true;
    }
  }
  return false;
}

// The verified collective on `in` -> `out`.
Status runRingguard(Communicator& c, Op op, const void* in, void* out, const Shape& s, DataType t,
                    void* stream) {
  const int n = c.size(), me = c.rank();
  switch (op) {
    case Op::kAllreduce:
      return c.allreduce(in, out, s.count, t, ReduceOp::kSum, stream);
    case Op::kReduceScatter:
      return c.reduceScatter(in, out, s.count, t, ReduceOp::kSum, stream);
    case Op::kAllgather:
      return c.allgather(in, out, s.count, t, stream);
    case Op::kBroadcast:
      return c.broadcast(out, out, s.count, t, 0, stream);  // in place on root's filled out
    case Op::kAlltoall:
      return c.alltoall(in, out, s.count, t, stream);
    case Op::kSendRecv:
      return c.sendRecv(in, s.count, (me + 1) % n, out, s.count, (me + n - 1) % n, t, stream);
  }
  return Status::ok();
}

// The MPI collective on host buffers.
void runMpi(Op op, const void* in, void* out, const Shape& s, DataType t) {
  const MPI_Datatype mt = mpiType(t);
  int me = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int count = int(s.count);
  switch (op) {
    case Op::kAllreduce:
      MPI_Allreduce(in, out, count, mt, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Op::kReduceScatter:
      MPI_Reduce_scatter_block(in, out, count, mt, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Op::kAllgather:
      MPI_Allgather(in, count, mt, out, count, mt, MPI_COMM_WORLD);
      break;
    case Op::kBroadcast:
      MPI_Bcast(out, count, mt, 0, MPI_COMM_WORLD);
      break;
    case Op::kAlltoall:
      MPI_Alltoall(in, count, mt, out, count, mt, MPI_COMM_WORLD);
      break;
    case Op::kSendRecv:
      MPI_Sendrecv(in, count, mt, (me + 1) % n, 7, out, count, mt, (me + n - 1) % n, 7, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
      break;
  }
}

#if RINGGUARD_BENCH_NCCL
void runNccl(Op op, const void* in, void* out, const Shape& s, DataType t, ncclComm_t comm,
             cudaStream_t stream) {
  int me = 0, n = 1;
  ncclCommUserRank(comm, &me);
  ncclCommCount(comm, &n);
  const ncclDataType_t nt = ncclType(t);
  const size_t esize = dataTypeSize(t);
  switch (op) {
    case Op::kAllreduce:
      ncclAllReduce(in, out, s.count, nt, ncclSum, comm, stream);
      break;
    case Op::kReduceScatter:
      ncclReduceScatter(in, out, s.count, nt, ncclSum, comm, stream);
      break;
    case Op::kAllgather:
      ncclAllGather(in, out, s.count, nt, comm, stream);
      break;
    case Op::kBroadcast:
      ncclBroadcast(out, out, s.count, nt, 0, comm, stream);
      break;
    case Op::kAlltoall:
      ncclGroupStart();
      for (int p = 0; p < n; ++p) {
        ncclSend(static_cast<const uint8_t*>(in) + p * s.count * esize, s.count, nt, p, comm, stream);
        ncclRecv(static_cast<uint8_t*>(out) + p * s.count * esize, s.count, nt, p, comm, stream);
      }
      ncclGroupEnd();
      break;
    case Op::kSendRecv:
      ncclGroupStart();
      ncclSend(in, s.count, nt, (me + 1) % n, comm, stream);
      ncclRecv(out, s.count, nt, (me + n - 1) % n, comm, stream);
      ncclGroupEnd();
      break;
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_collectives: every ringguard verified collective vs its MPI / NCCL peer"};
  std::string opName = "allreduce";
  BenchArgs args;
  app.add_option("-o,--op", opName, "allreduce, reduce_scatter, allgather, broadcast, alltoall or sendrecv");
  args.addTo(app, "device buffers (CUDA builds): against copy + MPI + copy, or NCCL");
  std::string stagedChunk;
  app.add_option("--staged-chunk", stagedChunk,
                 "with -D, allreduce or allgather: run the staged_chunked variant (chunks of this many bytes "
                 "through pinned host memory and a host communicator) instead of the device ring");
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Op op{};
  size_t chunkBytes = 0;
  if (int rc = parseOrExit(
          app, argc, argv, &args,
          [&] {
            if (!parseOp(opName, &op))
              throw CLI::ValidationError("--op", "'" + opName + "' is not a collective");
            if (!stagedChunk.empty() && (!args.device || (op != Op::kAllreduce && op != Op::kAllgather)))
              throw CLI::ValidationError("--staged-chunk", "needs -D and -o allreduce or -o allgather");
            if (!stagedChunk.empty()) chunkBytes = parseBytes("--staged-chunk", stagedChunk);
          });
      rc >= 0) {
    return rc;
  }
  if (!sizesFit(args, dataTypeSize(args.dtype) * size_t(size), rank)) {
    MPI_Finalize();
    return 2;
  }
  const Options options = benchOptions(args);
  const size_t minB = args.minB, maxB = args.maxB;
  const DataType dtype = args.dtype;
  const double factor = args.factor;
  const int iters = args.iters, warmup = args.warmup, check = args.check;
  const bool device = args.device;
  std::unique_ptr<Communicator> comm = benchCommunicator(args, options);
  if (!comm) return 2;
  // The staged_chunked variant: a host communicator and a device stager (the c10d backend keeps the same
  // pair).
  std::unique_ptr<Communicator> host;
#if RINGGUARD_BENCH_DEVICE
  std::unique_ptr<cuda::DeviceStager> stager;
  if (chunkBytes > 0) {
    int gpu = 0;
    BENCH_CUDA(cudaGetDevice(&gpu));
    Status made = mpi::createCommunicator(options, &host);
    if (made.isOk()) made = cuda::makeDeviceStager(gpu, &stager);
    if (!made.isOk()) {
      fprintf(stderr, "rank %d: %s\n", rank, made.toString().c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
#endif
  Communicator& counted = host ? *host : *comm;  // the communicator whose counters the rows report
  void* stream = nullptr;
#if RINGGUARD_BENCH_DEVICE
  cudaStream_t cudaStream = nullptr;
  if (device) BENCH_CUDA(cudaStreamCreateWithFlags(&cudaStream, cudaStreamNonBlocking));
  stream = cudaStream;
#if RINGGUARD_BENCH_NCCL
  ncclComm_t nccl = nullptr;
  if (device && std::string(comm->transportName()) == "nccl") nccl = newNcclComm();
#endif
#endif
  const bool overNccl = device && std::string(comm->transportName()) == "nccl";
  const char* peer = !device ? "mpi" : overNccl ? "nccl" : "mpi_staged";
  const size_t esize = dataTypeSize(dtype);
  if (rank == 0) {
    printf(
        "# ringguard bench_collectives: op=%s np=%d dtype=%s slice=%zu slots=%d iters=%d warmup=%d memory=%s "
        "transport=%s peer=%s path=%s\n",
        opName.c_str(), size, dataTypeName(dtype), counted.options().sliceBytes, counted.options().slots,
        iters, warmup, device ? "device" : "host", counted.transportName(), peer,
        host ? ("staged_chunked chunk=" + std::to_string(chunkBytes)).c_str()
        : std::string(counted.transportName()) == "peer" ? "peer_windows(ring above RINGGUARD_PEER_BYTES)"
                                                         : "ring");
    printf(
        "# busbw = algbw * (nccl-tests factor %.3f). ratio = peer time / ringguard time (> 1: ringguard "
        "faster). ctl/coll: control frames sent per collective (rank 0)\n",
        busFactor(op, size));
    printf("%12s %12s | %10s %9s %9s | %10s %9s %9s | %7s %8s %6s\n", "bytes", "count", "rg_us", "rg_algbw",
           "rg_busbw", "peer_us", "peer_alg", "peer_bus", "ratio", "ctl/coll", "check");
  }
  double lastRatio = 0;
  size_t lastBytes = 0;
  bool allOk = true;
  const size_t unit = esize * size_t(size);
  for (size_t bytes = std::max(minB, unit); bytes <= maxB;
       bytes = std::max(bytes + unit, size_t(bytes * factor))) {
    const Shape s = shapeOf(op, bytes, esize, size);
    const size_t inBytes = s.sendElems * esize, outBytes = s.recvElems * esize;
    std::vector<uint8_t> in(inBytes + 1), outRg(outBytes + 1, 0), outPeer(outBytes + 1, 0);
    fill(dtype, in.data(), s.sendElems, rank);
    // Broadcast runs in place on the output: the root's holds the data, the others' garbage.
    auto prepareOut = [&](std::vector<uint8_t>& out) {
      if (op == Op::kBroadcast && rank == 0) std::memcpy(out.data(), in.data(), outBytes);
    };
    bool failed = false;
    // The first error of a size only: a failure poisons the communicator, so every later call of the loop
    // returns the same error (a stopped peer's timeout printed it once per remaining iteration).
    auto report = [&](const Status& st) {
      if (!st.isOk()) {
        if (!failed) fprintf(stderr, "rank %d: %s\n", rank, st.toString().c_str());
        failed = true;
      }
    };
    double tRg = 0, tPeer = 0;
    const Counters before = counted.counters();
    if (!device) {
      prepareOut(outRg);
      tRg = timeIt(warmup, iters,
                   [&] { report(runRingguard(*comm, op, in.data(), outRg.data(), s, dtype, nullptr)); });
      prepareOut(outPeer);
      tPeer = timeIt(warmup, iters, [&] { runMpi(op, in.data(), outPeer.data(), s, dtype); });
    }
#if RINGGUARD_BENCH_DEVICE
    if (device) {
      void *dIn = nullptr, *dOut = nullptr, *pinIn = nullptr, *pinOut = nullptr;
      BENCH_CUDA(cudaMalloc(&dIn, inBytes + 1));
      BENCH_CUDA(cudaMalloc(&dOut, outBytes + 1));
      BENCH_CUDA(cudaMallocHost(&pinIn, inBytes + 1));
      BENCH_CUDA(cudaMallocHost(&pinOut, outBytes + 1));
      BENCH_CUDA(cudaMemcpy(dIn, in.data(), inBytes, cudaMemcpyHostToDevice));
      auto resetOut = [&](std::vector<uint8_t>& out) {
        prepareOut(out);
        BENCH_CUDA(cudaMemcpy(dOut, out.data(), outBytes, cudaMemcpyHostToDevice));
      };
      resetOut(outRg);
      tRg = timeIt(warmup, iters, [&] {
        if (stager) {
          stager->setStream(stream);
          report(op == Op::kAllreduce
                     ? stagedAllreduce(*host, *stager, dIn, dOut, s.count, dtype, ReduceOp::kSum, chunkBytes)
                     : stagedAllgather(*host, *stager, dIn, dOut, s.count, dtype, chunkBytes));
        } else {
          report(runRingguard(*comm, op, dIn, dOut, s, dtype, stream));
        }
        BENCH_CUDA(cudaStreamSynchronize(cudaStream));
      });
      BENCH_CUDA(cudaMemcpy(outRg.data(), dOut, outBytes, cudaMemcpyDeviceToHost));
      resetOut(outPeer);
      tPeer = timeIt(warmup, iters, [&] {
#if RINGGUARD_BENCH_NCCL
        if (nccl) {
          runNccl(op, dIn, dOut, s, dtype, nccl, cudaStream);
          BENCH_CUDA(cudaStreamSynchronize(cudaStream));
          return;
        }
#endif
        BENCH_CUDA(cudaMemcpyAsync(pinIn, dIn, inBytes, cudaMemcpyDeviceToHost, cudaStream));
        if (op == Op::kBroadcast)
          BENCH_CUDA(cudaMemcpyAsync(pinOut, dOut, outBytes, cudaMemcpyDeviceToHost, cudaStream));
        BENCH_CUDA(cudaStreamSynchronize(cudaStream));
        runMpi(op, pinIn, pinOut, s, dtype);
        BENCH_CUDA(cudaMemcpyAsync(dOut, pinOut, outBytes, cudaMemcpyHostToDevice, cudaStream));
        BENCH_CUDA(cudaStreamSynchronize(cudaStream));
      });
      BENCH_CUDA(cudaMemcpy(outPeer.data(), dOut, outBytes, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaFree(dIn));
      BENCH_CUDA(cudaFree(dOut));
      BENCH_CUDA(cudaFreeHost(pinIn));
      BENCH_CUDA(cudaFreeHost(pinOut));
    }
#endif
    const Counters after = counted.counters();
    // Without fault injection nothing may fail verification: a detection is a real bug or a real bad link.
    const bool clean = after.detected - before.detected == after.injected - before.injected;
    if (!clean) fprintf(stderr, "rank %d: slices failed verification without injection\n", rank);
    int ok = !failed && clean && (!check || std::memcmp(outRg.data(), outPeer.data(), outBytes) == 0),
        allRanks = 0;
    MPI_Allreduce(&ok, &allRanks, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    allOk = allOk && allRanks;
    const double algRg = double(bytes) / tRg / 1e9, algPeer = double(bytes) / tPeer / 1e9;
    const double bus = busFactor(op, size);
    const double ctl = double(after.controlFrames - before.controlFrames) / double(warmup + iters);
    lastRatio = tPeer / tRg;
    lastBytes = bytes;
    if (rank == 0) {
      printf("%12zu %12zu | %10.1f %9.3f %9.3f | %10.1f %9.3f %9.3f | %7.3f %8.2f %6s\n", bytes, s.count,
             tRg * 1e6, algRg, algRg * bus, tPeer * 1e6, algPeer, algPeer * bus, lastRatio, ctl,
             !check ? "-" : (allRanks ? "ok" : "FAIL"));
      printBreakdown(before, after, warmup + iters);
    }
  }
  if (rank == 0) {
    printf("# rank 0 counters: %s\n", counted.counters().toString().c_str());
    printf("summary: op=%s bytes=%zu np=%d ringguard_vs_%s=%.3f\n", opName.c_str(), lastBytes, size, peer,
           lastRatio);
  }
  host.reset();
  comm.reset();
#if RINGGUARD_BENCH_NCCL
  if (nccl) ncclCommDestroy(nccl);
#endif
  MPI_Finalize();
  return allOk ? 0 : 1;
}
