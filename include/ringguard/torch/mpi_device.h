#pragma once
// For mpirun-launched libtorch programs (examples/train_mlp, bench/bench_train_step): choose the device
// every rank trains on and create the matching communicator over MPI_COMM_WORLD. Header-only; needs MPI and
// libtorch (and the device layer when ringguard_torch is built with CUDA: RINGGUARD_TORCH_CUDA).
#include <mpi.h>
#include <torch/torch.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "ringguard/core/options.h"
#include "ringguard/mpi/mpi_communicator.h"
#include "ringguard/runtime/communicator.h"
#if RINGGUARD_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>

#include "ringguard/runtime/mpi_device_communicator.h"
#endif

namespace ringguard {

// Whether every rank can run on a GPU (so that all ranks pick the same device kind), and why not.
// Collective over MPI_COMM_WORLD.
inline bool cudaOnEveryRank(std::string* why) {
  int mine = 0;
#if RINGGUARD_TORCH_CUDA
  mine = torch::cuda::is_available() ? 1 : 0;
  *why = "torch::cuda::is_available() is false on some rank";
#else
  *why = "this build of ringguard has no CUDA support (RINGGUARD_WITH_CUDA)";
#endif
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all != 0;
}

// `kind` is "cpu", "cuda" or "auto" (cuda when every rank has a GPU). Sets *useCuda the same on every rank;
// false (with *why) only for "cuda" when some rank has no GPU. Collective over MPI_COMM_WORLD.
inline bool chooseCuda(const std::string& kind, bool* useCuda, std::string* why) {
  *useCuda = kind != "cpu" && cudaOnEveryRank(why);
  return kind != "cuda" || *useCuda;
}

// The communicator over MPI_COMM_WORLD for the chosen device, and the device: the MPI host communicator
// on the CPU, or the device communicator (NCCL or host-staged) on the node-local GPU
// (OMPI_COMM_WORLD_LOCAL_RANK, else the world rank, modulo the visible GPUs), which it makes current.
// Collective over MPI_COMM_WORLD.
inline Status createWorldCommunicator(bool useCuda, const Options& options, torch::Device* device,
                                      std::unique_ptr<Communicator>* comm) {
  *device = torch::kCPU;
  if (!useCuda) return mpi::createCommunicator(options, comm);
#if RINGGUARD_TORCH_CUDA
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int gpus = int(torch::cuda::device_count());
  const int gpu = gpus > 0 ? (local != nullptr ? std::atoi(local) : rank) % gpus : 0;
  c10::cuda::set_device(c10::DeviceIndex(gpu));
  *device = torch::Device(torch::kCUDA, c10::DeviceIndex(gpu));
  cuda::DeviceOptions deviceOptions;
  RINGGUARD_RETURN_IF_ERROR(cuda::DeviceOptions::fromEnv(&deviceOptions));
  deviceOptions.device = gpu;
  return cuda::createDeviceCommunicator(options, deviceOptions, comm);
#else
  return Status(StatusCode::kInvalidArgument, "this build of ringguard has no CUDA support");
#endif
}

}  // namespace ringguard
