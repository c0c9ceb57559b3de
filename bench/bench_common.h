#pragma once
// What the MPI benchmarks share: nccl-tests-style flags (sizes: bench_sizes.h), MPI and NCCL types, the
// slowest rank's time, verifiable inputs and the progress thread's time breakdown.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>

#include "../tests/unit/verifiable.h"  // testing::store
#include "bench_sizes.h"
#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "ringguard/core/types.h"
#include "ringguard/mpi/mpi_communicator.h"
#if RINGGUARD_BENCH_DEVICE
#include <cuda_runtime_api.h>

#include "ringguard/runtime/mpi_device_communicator.h"
#endif
#if RINGGUARD_BENCH_NCCL
#include <nccl.h>
#endif

namespace ringguard {
namespace bench {

inline MPI_Datatype mpiType(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUint8:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;  // f16/bf16: MPI has no sum for them
  }
}

// Slowest rank's time of `iters` calls after `warmup` calls.
template <typename F>
inline double timeIt(int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) f();
  double mine = (MPI_Wtime() - t0) / iters, worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

// Rank `rank`'s input: small integers, exact in every dtype, so every rank's sums come out the same in any
// order (the results are checkable); u8 shifted to stay non-negative. Stored by the tests' one writer of a
// value as any dtype.
inline void fill(DataType t, void* buf, size_t count, int rank) {
  const double shift = t == DataType::kUint8 ? 16 : 0;
  for (size_t i = 0; i < count; ++i) {
    testing::store(t, buf, i, double(int((i * 13 + size_t(rank) * 7) % 32) - 16) + shift);
  }
}

inline void printBreakdown(const Counters& before, const Counters& after, int calls) {
  auto ms = [calls](uint64_t a, uint64_t b) { return double(b - a) / 1e6 / calls; };
  printf("%68s breakdown/call: transfer_wait=%.3f ms apply=%.3f ms executor_wait=%.3f ms\n", "",
         ms(before.transferWaitNs, after.transferWaitNs), ms(before.applyNs, after.applyNs),
         ms(before.executorWaitNs, after.executorWaitNs));
}

#if RINGGUARD_BENCH_DEVICE
#define BENCH_CUDA(call)                                                                              \
  do {                                                                                                \
    cudaError_t e_ = (call);                                                                          \
    if (e_ != cudaSuccess) {                                                                          \
      fprintf(stderr, "%s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 4);                                                                   \
    }                                                                                                 \
  } while (0)
#endif

#if RINGGUARD_BENCH_NCCL
inline ncclDataType_t ncclType(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    default:
      return ncclUint8;
  }
}
#endif

// The flags every benchmark takes (nccl-tests' -b -e -f -n -w -c -d, plus -s and -D) and their parsing.
struct BenchArgs {
  std::string minBytes = "1K", maxBytes = "64M", dtypeName = "f32";
  double factor = 4;
  int iters = 10, warmup = 3, check = 1;
  size_t sliceBytes = 0;
  bool device = false;
  // After parse():
  size_t minB = 0, maxB = 0;
  DataType dtype{};

  void addTo(CLI::App& app, const char* deviceHelp) {
    app.add_option("-b,--minbytes", minBytes, "smallest size (K/M/G suffixes)");
    app.add_option("-e,--maxbytes", maxBytes, "largest size");
    app.add_option("-f,--stepfactor", factor, "size multiplier between rows")
        ->check(CLI::Range(1.01, 1024.0));
    app.add_option("-n,--iters", iters, "timed iterations per size")
        ->check(CLI::Range(1, std::numeric_limits<int>::max()));
    app.add_option("-w,--warmup_iters", warmup, "untimed iterations per size")
        ->check(CLI::Range(0, std::numeric_limits<int>::max()));
    app.add_option("-c,--check", check, "1: check both results against each other at every size");
    app.add_option("-d,--datatype", dtypeName, "f32, f64, i32, i64 or u8");
    app.add_option("-s,--slice-bytes", sliceBytes, "ringguard slice size (default: RINGGUARD_SLICE_BYTES)");
    app.add_flag("-D,--device", device, deviceHelp);
  }
  // Sizes and dtype, after app.parse (throws CLI::ValidationError).
  void finish() {
    minB = parseBytes("--minbytes", minBytes);
    maxB = parseBytes("--maxbytes", maxBytes);
    if (minB > maxB) {
      throw CLI::ValidationError("--minbytes",
                                 minBytes + " is above --maxbytes " + maxBytes + ": no size to run");
    }
    if (!parseDataType(dtypeName, &dtype) || mpiType(dtype) == MPI_DATATYPE_NULL) {
      throw CLI::ValidationError("--datatype", "'" + dtypeName + "' is not one of f32, f64, i32, i64, u8");
    }
  }
};

// False, after rank 0 said why, when no size up to maxB holds `unit` bytes (the smallest size the benchmark
// runs: one element, or one per rank).
inline bool sizesFit(const BenchArgs& args, size_t unit, int rank) {
  if (args.maxB >= unit) return true;
  if (rank == 0) {
    fprintf(stderr, "--maxbytes %s is below the smallest size this run can time: %zu bytes of %s\n",
            args.maxBytes.c_str(), unit, args.dtypeName.c_str());
  }
  return false;
}

// Parses the command line after MPI_Init (`more` checks what the benchmark adds). -1: go on; otherwise the
// exit code, after rank 0 printed the help or the error and MPI was finalised.
inline int parseOrExit(CLI::App& app, int argc, char** argv, BenchArgs* args,
                       const std::function<void()>& more) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    app.parse(argc, argv);
    args->finish();
    if (more) more();
  } catch (const CLI::Error& e) {
    int rc = rank == 0 ? app.exit(e) : 1;
    MPI_Finalize();
    return rc;
  }
  return -1;
}

// Options from the RINGGUARD_* environment, -s over them; aborts the job on a bad setting, which the rank
// that has it prints (it may be any rank: MPMD launches give ranks different environments).
inline Options benchOptions(const BenchArgs& args) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Options options;
  if (Status st = Options::fromEnv(&options); !st.isOk()) {
    fprintf(stderr, "rank %d: %s\n", rank, st.toString().c_str());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (args.sliceBytes) options.sliceBytes = args.sliceBytes;
  return options;
}

// The communicator under test over MPI_COMM_WORLD: host memory, or device memory with -D (then
// *deviceOptions gets what RINGGUARD_DEVICE_* said). nullptr (after MPI_Finalize) when -D was asked of a
// build without CUDA; any other failure aborts the job.
inline std::unique_ptr<Communicator> benchCommunicator(const BenchArgs& args, const Options& options,
                                                       void* deviceOptions = nullptr) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::unique_ptr<Communicator> comm;
  Status created;
  if (args.device) {
#if RINGGUARD_BENCH_DEVICE
    cuda::DeviceOptions dopt;
    created = cuda::DeviceOptions::fromEnv(&dopt);
    if (created.isOk()) created = cuda::createDeviceCommunicator(options, dopt, &comm);
    if (deviceOptions != nullptr) *static_cast<cuda::DeviceOptions*>(deviceOptions) = dopt;
#else
    if (rank == 0) fprintf(stderr, "-D needs a build with CUDA\n");
    MPI_Finalize();
    return nullptr;
#endif
  } else {
    created = mpi::createCommunicator(options, &comm);
  }
  if (!created.isOk()) {
    fprintf(stderr, "rank %d: %s\n", rank, created.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return comm;
}

#if RINGGUARD_BENCH_NCCL
// An NCCL communicator of its own over MPI_COMM_WORLD (the peer's, or a p2p ceiling's lane).
inline ncclComm_t newNcclComm() {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, size, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  return comm;
}
#endif

}  // namespace bench
}  // namespace ringguard
