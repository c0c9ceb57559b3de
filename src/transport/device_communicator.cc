#include "ringguard/cuda/device_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/cuda_check.h"
#include "ringguard/core/env.h"
#include "ringguard/cuda/device_executor.h"
#include "ringguard/cuda/memory_pool.h"
#include "ringguard/mpi/mpi_communicator.h"
#include "transport/mpi/mpi_check.h"
#include "transport/mpi/mpi_transport.h"
#include "transport/staged/staged_transport.h"
#if RINGGUARD_HAVE_NCCL
#include "transport/nccl/nccl_transport.h"
#endif

namespace ringguard {
namespace cuda {

namespace {

// What a device communicator owns besides its transport and executor; released after both.
struct DeviceResources {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<DevicePool> pool;
  std::unique_ptr<PinnedHostPool> pinned;
  ~DeviceResources() {
    pinned.reset();
    pool.reset();
    if (stream) {
      cudaSetDevice(device);
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
  }
};

Status localRankAndSize(MPI_Comm comm, int* localRank, int* localSize) {
  MPI_Comm node = MPI_COMM_NULL;
  RINGGUARD_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, localRank);
  MPI_Comm_size(node, localSize);
  MPI_Comm_free(&node);
  return Status::ok();
}

// The communicator over `host` staged through pinned memory; or, when `ncclId` is set, over NCCL from that
// id with `host` as the control channel; or (host == nullptr) over NCCL bootstrapped from `comm`.
Status build(MPI_Comm comm, std::unique_ptr<Transport> host, const std::vector<uint8_t>* ncclId,
             const Options& options, const DeviceOptions& device, int gpu,
             std::unique_ptr<Communicator>* out) {
  auto res = std::make_shared<DeviceResources>();
  res->device = gpu;
  RINGGUARD_CUDA_CHECK(cudaSetDevice(res->device));
  RINGGUARD_CUDA_CHECK(cudaStreamCreateWithFlags(&res->stream, cudaStreamNonBlocking));
  RINGGUARD_RETURN_IF_ERROR(DevicePool::create(res->device, device.poolReleaseThreshold, &res->pool));
  res->pinned = std::make_unique<PinnedHostPool>();

  std::unique_ptr<Transport> transport;
  if (host && !ncclId) {
    transport = std::make_unique<StagedTransport>(std::move(host), res->pinned.get(), res->stream);
  } else {
#if RINGGUARD_HAVE_NCCL
    if (ncclId) {
      ncclUniqueId id;
      if (ncclId->size() != sizeof(id)) {
        return Status(StatusCode::kInvalidArgument, "NCCL unique id of " + std::to_string(ncclId->size()) +
                                                        " bytes, expected " + std::to_string(sizeof(id)));
      }
      std::memcpy(&id, ncclId->data(), sizeof(id));
      RINGGUARD_RETURN_IF_ERROR(NcclTransport::create(id, std::move(host), res->stream, options.timeout,
                                                      device.ncclLanes, &transport));
    } else {
      RINGGUARD_RETURN_IF_ERROR(
          NcclTransport::create(comm, res->stream, options.timeout, device.ncclLanes, &transport));
    }
#else
    return Status(StatusCode::kInvalidArgument,
                  "the NCCL transport was asked for, but this build has no NCCL");
#endif
  }
  auto executor =
      std::make_unique<DeviceExecutor>(res->device, res->pool.get(), res->pinned.get(), res->stream);
  out->reset(new Communicator(std::move(transport), options, std::move(executor), res));
  return Status::ok();
}

}  // namespace

bool haveNccl() { return RINGGUARD_HAVE_NCCL != 0; }

Status DeviceOptions::fromEnv(DeviceOptions* out) { return fromLookup(envLookup, out); }

Status DeviceOptions::fromLookup(const std::function<const char*(const char*)>& lookup, DeviceOptions* out) {
  DeviceOptions o;
  if (const char* v = lookup("RINGGUARD_DEVICE_TRANSPORT")) {
    std::string s(v);
    if (s == "auto") {
      o.transport = DeviceTransportKind::kAuto;
    } else if (s == "nccl") {
      o.transport = DeviceTransportKind::kNccl;
    } else if (s == "staged") {
      o.transport = DeviceTransportKind::kStaged;
    } else {
      return Status(StatusCode::kInvalidArgument,
                    "RINGGUARD_DEVICE_TRANSPORT='" + s + "': expected auto, nccl or staged");
    }
  }
  if (const char* v = lookup("RINGGUARD_POOL_RELEASE_BYTES")) {
    char* end = nullptr;
    unsigned long long n = std::strtoull(v, &end, 10);
    if (*v == '\0' || *v == '-' || *end != '\0') {
      return Status(StatusCode::kInvalidArgument,
                    std::string("RINGGUARD_POOL_RELEASE_BYTES='") + v + "': expected a byte count");
    }
    o.poolReleaseThreshold = n;
  }
  if (const char* v = lookup("RINGGUARD_NCCL_LANES")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || n < 1 || n > 8) {
      return Status(StatusCode::kInvalidArgument,
                    std::string("RINGGUARD_NCCL_LANES='") + v + "': expected an integer in [1, 8]");
    }
    o.ncclLanes = static_cast<int>(n);
  }
  *out = o;
  return Status::ok();
}

Status createDeviceCommunicator(MPI_Comm comm, const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out) {
  RINGGUARD_RETURN_IF_ERROR(options.validate());
  RINGGUARD_RETURN_IF_ERROR(mpi::ensureInitialized());
  int devices = 0;
  RINGGUARD_CUDA_CHECK(cudaGetDeviceCount(&devices));
  int localRank = 0, localSize = 1;
  RINGGUARD_RETURN_IF_ERROR(localRankAndSize(comm, &localRank, &localSize));

  // NCCL refuses two ranks on one GPU; every rank must pick the same transport, so agree on it.
  DeviceTransportKind kind = device.transport;
  if (kind == DeviceTransportKind::kAuto) {
    int ncclUsable = (haveNccl() && localSize <= devices) ? 1 : 0, all = 0;
    RINGGUARD_MPI_CHECK(MPI_Allreduce(&ncclUsable, &all, 1, MPI_INT, MPI_MIN, comm));
    kind = all ? DeviceTransportKind::kNccl : DeviceTransportKind::kStaged;
  }
  if (kind == DeviceTransportKind::kNccl && !haveNccl()) {
    return Status(StatusCode::kInvalidArgument,
                  "the NCCL transport was asked for, but this build has no NCCL");
  }

  std::unique_ptr<Transport> host;
  if (kind == DeviceTransportKind::kStaged) RINGGUARD_RETURN_IF_ERROR(MpiTransport::create(comm, &host));
  return build(comm, std::move(host), nullptr, options, device,
               device.device >= 0 ? device.device : localRank % devices, out);
}

Status createStagedCommunicator(std::unique_ptr<Transport> host, const Options& options,
                                const DeviceOptions& device, std::unique_ptr<Communicator>* out) {
  RINGGUARD_RETURN_IF_ERROR(options.validate());
  if (!host) return Status(StatusCode::kInvalidArgument, "createStagedCommunicator: no host transport");
  if (device.device < 0)
    return Status(StatusCode::kInvalidArgument, "createStagedCommunicator: no device given");
  return build(MPI_COMM_NULL, std::move(host), nullptr, options, device, device.device, out);
}

Status newNcclUniqueId(std::vector<uint8_t>* out) {
#if RINGGUARD_HAVE_NCCL
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return Status(StatusCode::kTransportError, std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  }
  out->assign(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof(id));
  return Status::ok();
#else
  return Status(StatusCode::kInvalidArgument, "this build has no NCCL");
#endif
}

Status createNcclCommunicator(const std::vector<uint8_t>& ncclId, std::unique_ptr<Transport> control,
                              const Options& options, const DeviceOptions& device,
                              std::unique_ptr<Communicator>* out) {
  RINGGUARD_RETURN_IF_ERROR(options.validate());
  if (!control) return Status(StatusCode::kInvalidArgument, "createNcclCommunicator: no control transport");
  if (device.device < 0)
    return Status(StatusCode::kInvalidArgument, "createNcclCommunicator: no device given");
  return build(MPI_COMM_NULL, std::move(control), &ncclId, options, device, device.device, out);
}

}  // namespace cuda
}  // namespace ringguard
