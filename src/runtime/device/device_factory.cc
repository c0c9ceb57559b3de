#include "ringguard/runtime/device_factory.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/logging.h"
#include "cuda/cuda_check.h"
#include "cuda/memory_pool.h"
#include "executor/device/device_executor.h"
#include "runtime/device/one_rank_path.h"
#include "runtime/device/peer_path.h"
#include "runtime/make_communicator.h"
#include "runtime/peer_path_agreement.h"
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

// The GPU's stream and pools: local to this rank, made before the group's collective steps so that a
// failure here is agreed on (agreeToProceed) instead of leaving the others in them.
Status prepareResources(int gpu, const DeviceOptions& device, std::shared_ptr<DeviceResources>* out) {
  auto res = std::make_shared<DeviceResources>();
  res->device = gpu;
  RINGGUARD_CUDA_CHECK(cudaSetDevice(res->device));
  RINGGUARD_CUDA_CHECK(cudaStreamCreateWithFlags(&res->stream, cudaStreamNonBlocking));
  RINGGUARD_RETURN_IF_ERROR(DevicePool::create(res->device, device.poolReleaseThreshold, &res->pool));
  res->pinned = std::make_unique<PinnedHostPool>();
  *out = std::move(res);
  return Status::ok();
}

// The communicator on `res`'s GPU over NCCL from `ncclId` with `host` as its control channel, or (ncclId
// null) over `host` staged through pinned memory.
Status build(std::unique_ptr<Transport> host, const std::vector<uint8_t>* ncclId, const Options& options,
             const DeviceOptions& device, std::shared_ptr<DeviceResources> res,
             std::unique_ptr<DirectPath> direct, std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Transport> transport;
  if (!ncclId) {
    transport = std::make_unique<StagedTransport>(std::move(host), res->pinned.get(), res->stream);
  } else {
#if RINGGUARD_HAVE_NCCL
    RINGGUARD_RETURN_IF_ERROR(NcclTransport::create(*ncclId, std::move(host), res->stream, options.timeout,
                                                    device.ncclLanes, &transport));
#else
    return Status(StatusCode::kInvalidArgument,
                  "the NCCL transport was asked for, but this build has no NCCL");
#endif
  }
  auto executor =
      std::make_unique<DeviceExecutor>(res->device, res->pool.get(), res->pinned.get(), res->stream);
  *out = makeCommunicator(std::move(transport), options, std::move(executor), res, std::move(direct));
  return Status::ok();
}

// MPS lets the processes sharing a GPU run at once; its control daemon listens on a pipe in
// $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps). A heuristic for the warning only: nothing depends on
// it.
bool mpsLikelyRunning() {
  const char* dir = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string control =
      std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp/nvidia-mps") + "/control";
  return access(control.c_str(), F_OK) == 0;
}

// Every rank's record gathered and decided (what is agreed and why: runtime/peer_path_agreement.h); every
// rank gets the same answer. Collective over `bootstrap`.
Status agreeOnPeerPath(Bootstrap& bootstrap, uint64_t twoShotBytes, NanCheck nanCheck, size_t scheduled,
                       PeerPathAgreement* out) {
  std::vector<std::vector<uint8_t>> all;
  RINGGUARD_RETURN_IF_ERROR(
      bootstrap.allgather(peerPathRecord(twoShotBytes, nanCheck, long(getpid()), scheduled), &all));
  return decidePeerPath(all, out);
}

// The peer-window path when asked for (kPeer: its failure is the factory's) or allowed (kAuto, every rank
// on one host: its failure is a warning naming the reason, the same on every rank since the windows'
// creation agrees on every step).
Status makePeerPath(Bootstrap& bootstrap, const DeviceOptions& device, int gpu, int localSize,
                    const Options& options, std::unique_ptr<DirectPath>* out) {
  // One rank has no peer to map. Where the path was asked for or allowed, its collectives are copies on the
  // caller's stream (one_rank_path.h), with no thread hand-off and inside CUDA graphs as on the windows,
  // unless the NaN/Inf scan (a host step) is on; the communicator is still named by its own transport
  // ("nccl", "staged"), as before the path existed (test_ddp.py's cuda-np1-nccl-transport).
  if (bootstrap.size() < 2) {
    const bool wanted =
        device.transport == DeviceTransportKind::kAuto || device.transport == DeviceTransportKind::kPeer;
    if (wanted && options.nanCheck == NanCheck::kOff) *out = makeOneRankPath(gpu);
    return Status::ok();
  }
  const bool oneHost = localSize == bootstrap.size();
  if (device.transport == DeviceTransportKind::kPeer && !oneHost) {
    return Status(StatusCode::kInvalidArgument,
                  "RINGGUARD_DEVICE_TRANSPORT=peer needs every rank on one host: " +
                      std::to_string(bootstrap.size() - localSize) + " of " +
                      std::to_string(bootstrap.size()) + " ranks are on other hosts");
  }
  if (device.transport != DeviceTransportKind::kPeer &&
      (device.transport != DeviceTransportKind::kAuto || !oneHost)) {
    return Status::ok();
  }
  // Ranks that are threads of one process share its CUDA context: one rank's device-wide synchronisation
  // (cudaDeviceSynchronize, cudaFree) waits for another's spinning peer kernel, which waits for the first
  // rank to launch its own: a deadlock until the deadline (seen on the H200, 2026-12-05, three in-process
  // ranks of tests/gpu/test_device_factory.cc). The path is for one process per rank, as NCCL's is.
  PeerPathAgreement agreed;
  RINGGUARD_RETURN_IF_ERROR(agreeOnPeerPath(bootstrap, device.peerTwoShotBytes, options.nanCheck,
                                            options.fault.schedule.size(), &agreed));
  const std::pair<int, int> shared = agreed.sameProcess;
  const int scheduleRank = agreed.scheduleRank;
  if (shared.first >= 0) {
    if (device.transport != DeviceTransportKind::kPeer) return Status::ok();
    return Status(StatusCode::kInvalidArgument,
                  "RINGGUARD_DEVICE_TRANSPORT=peer needs one process per rank: ranks " +
                      std::to_string(shared.first) + " and " + std::to_string(shared.second) +
                      " are threads of one process (their spinning kernels would wait on each other)");
  }
  // The NaN/Inf scan of RINGGUARD_NAN_CHECK is a step of the host-driven path (runCollective); the path's
  // collectives are kernels with no host step, so they would run unscanned. auto leaves every collective
  // to the host-driven path; peer asked by name cannot keep its promise and says so.
  if (options.nanCheck != NanCheck::kOff) {
    if (device.transport != DeviceTransportKind::kPeer) {
      if (bootstrap.rank() == 0) {
        logInfo(
            Subsys::kRuntime,
            "device communicator: RINGGUARD_NAN_CHECK={} scans every collective's input on the host-driven "
            "path; the peer windows are not used",
            nanCheckName(options.nanCheck));
      }
      return Status::ok();
    }
    return Status(
        StatusCode::kInvalidArgument,
        std::string("RINGGUARD_DEVICE_TRANSPORT=peer runs no NaN/Inf scan (RINGGUARD_NAN_CHECK=") +
            nanCheckName(options.nanCheck) +
            "): its collectives are kernels with no host step; use RINGGUARD_DEVICE_TRANSPORT=auto, "
            "staged or nccl, or RINGGUARD_NAN_CHECK=off");
  }
  // A fault schedule (exact injections by collective, step, slice and rank) is applied by the host-driven
  // path, whose steps and slices it names; the path's kernels take the fault probability and mode only. So
  // that a schedule is never silently ignored, auto leaves every collective to the host-driven path while
  // any rank has one; peer asked by name says so.
  if (scheduleRank >= 0) {
    if (device.transport != DeviceTransportKind::kPeer) {
      if (bootstrap.rank() == 0) {
        logInfo(Subsys::kRuntime,
                "device communicator: rank {} has a fault schedule, which the host-driven path applies; the "
                "peer windows are not used",
                scheduleRank);
      }
      return Status::ok();
    }
    return Status(
        StatusCode::kInvalidArgument,
        "RINGGUARD_DEVICE_TRANSPORT=peer applies no fault schedule (rank " + std::to_string(scheduleRank) +
            " has RINGGUARD_FAULT_SCHEDULE or Options::fault.schedule): its kernels take the fault "
            "probability and mode only; use RINGGUARD_DEVICE_TRANSPORT=auto, staged or nccl for exact "
            "injections, or RINGGUARD_FAULT_PROB");
  }
  PeerPathOptions peer;
  peer.capacity = size_t(device.peerBytes);
  peer.twoShotBytes = size_t(device.peerTwoShotBytes);
  peer.arrivalBytes = size_t(device.peerArrivalBytes);
  // What can fail on the windows where the host-driven path succeeds comes only with peer asked by name:
  // send/recv (orders of lone ops the windows cannot serve and a pipeline or NCCL's stream per pair does,
  // docs/TORCH.md "Point-to-point"; a receive from any source) and the split all-to-all (a rank's blocks
  // above the window fail every rank, kBlockTable, where the pipeline carries any size).
  const bool byName = device.transport == DeviceTransportKind::kPeer;
  peer.p2pBytes = byName ? size_t(device.peerP2pBytes) : 0;
  peer.splitAlltoall = byName;
  peer.handles = device.peerHandles == DeviceOptions::PeerHandles::kVmm   ? peer::PeerHandles::kVmm
                 : device.peerHandles == DeviceOptions::PeerHandles::kIpc ? peer::PeerHandles::kIpc
                                                                          : peer::PeerHandles::kAuto;
  Status st = createPeerPath(bootstrap, gpu, peer, options, out);
  if (st.isOk() || device.transport == DeviceTransportKind::kPeer) return st;
  if (bootstrap.rank() == 0) {
    logWarn(Subsys::kRuntime,
            "device communicator: no peer-window path ({}); every collective takes the host-driven path. "
            "RINGGUARD_DEVICE_TRANSPORT=staged or nccl silences this.",
            st.message());
  }
  out->reset();
  return Status::ok();
}

}  // namespace

bool haveNccl() { return RINGGUARD_HAVE_NCCL != 0; }

Status DeviceOptions::fromEnv(DeviceOptions* out) { return fromLookup(envLookup, out); }

Status DeviceOptions::fromLookup(const std::function<const char*(const char*)>& lookup, DeviceOptions* out) {
  // Parsed in core (DeviceSettings), where CPU-only jobs check the same values when their group is made.
  DeviceSettings settings;
  RINGGUARD_RETURN_IF_ERROR(DeviceSettings::fromLookup(lookup, &settings));
  DeviceOptions o;
  o.transport = settings.transport == "nccl"     ? DeviceTransportKind::kNccl
                : settings.transport == "staged" ? DeviceTransportKind::kStaged
                : settings.transport == "peer"   ? DeviceTransportKind::kPeer
                                                 : DeviceTransportKind::kAuto;
  o.peerBytes = settings.peerBytes;
  o.peerTwoShotBytes = settings.peerTwoShotBytes;
  o.peerArrivalBytes = settings.peerArrivalBytes;
  o.peerP2pBytes = settings.peerP2pBytes;
  o.peerHandles = settings.peerHandles == "vmm"   ? DeviceOptions::PeerHandles::kVmm
                  : settings.peerHandles == "ipc" ? DeviceOptions::PeerHandles::kIpc
                                                  : DeviceOptions::PeerHandles::kAuto;
  o.poolReleaseThreshold = settings.poolReleaseBytes;
  o.ncclLanes = settings.ncclLanes;
  *out = o;
  return Status::ok();
}

// The device transport, agreed: every rank contributes its requested kind and `identity` (host, GPU UUID).
// Ranks that asked for different kinds all fail naming both; kAuto takes NCCL only when every rank has a GPU
// of its own (NCCL refuses two ranks on one GPU), deciding from the same list on every rank.
static Status agreeOnNccl(Bootstrap& bootstrap, DeviceTransportKind kind, const std::string& identity,
                          bool* nccl, bool* sharedGpu) {
  auto name = [](uint8_t k) {
    return k == uint8_t(DeviceTransportKind::kNccl)     ? std::string("nccl")
           : k == uint8_t(DeviceTransportKind::kStaged) ? std::string("staged")
           : k == uint8_t(DeviceTransportKind::kAuto)   ? std::string("auto")
           : k == uint8_t(DeviceTransportKind::kPeer)   ? std::string("peer")
                                                        : "an unknown kind " + std::to_string(k);
  };
  std::vector<uint8_t> mine(1 + identity.size());  // the kind, then the identity's bytes
  mine[0] = uint8_t(kind);
  std::copy(identity.begin(), identity.end(), mine.begin() + 1);
  std::vector<std::vector<uint8_t>> all;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.allgather(mine, &all));
  std::set<std::vector<uint8_t>> seen;
  for (size_t r = 0; r < all.size(); ++r) {
    const uint8_t theirs = all[r].empty() ? 0xFF : all[r][0];
    if (theirs != mine[0]) {
      return Status(StatusCode::kInvalidArgument,
                    "RINGGUARD_DEVICE_TRANSPORT differs between ranks: rank " +
                        std::to_string(bootstrap.rank()) + " has " + name(mine[0]) + ", rank " +
                        std::to_string(r) + " has " + name(theirs) + " (every rank must set the same)");
    }
    seen.insert(all[r]);
  }
  *sharedGpu = int(seen.size()) < bootstrap.size();
  *nccl = kind == DeviceTransportKind::kNccl ||
          ((kind == DeviceTransportKind::kAuto || kind == DeviceTransportKind::kPeer) && haveNccl() &&
           int(seen.size()) == bootstrap.size());
  return Status::ok();
}

// What this rank alone can tell before the group's collective steps: its options, its GPU (`*gpu`: the one
// asked for, else the local rank's turn among the visible ones), NCCL in this build when asked for, and
// (`*identity`) the host and GPU UUID that agreeOnNccl compares.
static Status checkLocal(const Options& options, const DeviceOptions& device, int worldSize, int localRank,
                         int* gpu, std::string* identity) {
  RINGGUARD_RETURN_IF_ERROR(options.validateFor(worldSize));
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  // No driver (a machine without a GPU) reads as cudaErrorInsufficientDriver or cudaErrorNoDevice: say
  // that no GPU is usable first, CUDA's words after.
  if (err != cudaSuccess || devices < 1) {
    (void)cudaGetLastError();
    return Status(StatusCode::kInvalidArgument,
                  std::string("createDeviceCommunicator: no usable GPU on this rank (cudaGetDeviceCount: ") +
                      (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") + ")");
  }
  *gpu = device.device >= 0 ? device.device : localRank % devices;
  if (*gpu >= devices) {
    return Status(StatusCode::kInvalidArgument, "createDeviceCommunicator: device " + std::to_string(*gpu) +
                                                    " asked for, but this rank sees " +
                                                    std::to_string(devices) + " GPU" +
                                                    (devices == 1 ? "" : "s"));
  }
  if (device.transport == DeviceTransportKind::kNccl && !haveNccl()) {
    return Status(StatusCode::kInvalidArgument,
                  "the NCCL transport was asked for, but this build has no NCCL");
  }
  cudaDeviceProp prop;
  RINGGUARD_CUDA_CHECK(cudaGetDeviceProperties(&prop, *gpu));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  *identity = std::string(host) + "/" + std::string(prop.uuid.bytes, sizeof(prop.uuid.bytes));
  return Status::ok();
}

Status createDeviceCommunicator(Bootstrap& bootstrap, const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out) {
  // Every rank takes the same collective steps, whatever it finds on its own: a rank that returned early
  // would leave the others waiting in the next one (MPI's have no timeout).
  int localRank = 0, localSize = 1;
  RINGGUARD_RETURN_IF_ERROR(nodeLocalRank(bootstrap, &localRank, &localSize));
  int gpu = 0;
  std::string identity;
  std::shared_ptr<DeviceResources> res;
  Status local = checkLocal(options, device, bootstrap.size(), localRank, &gpu, &identity);
  if (local.isOk()) local = prepareResources(gpu, device, &res);
  RINGGUARD_RETURN_IF_ERROR(agreeToProceed(bootstrap, local));
  bool nccl = false, sharedGpu = false;
  RINGGUARD_RETURN_IF_ERROR(agreeOnNccl(bootstrap, device.transport, identity, &nccl, &sharedGpu));

  std::unique_ptr<DirectPath> direct;
  RINGGUARD_RETURN_IF_ERROR(makePeerPath(bootstrap, device, gpu, localSize, options, &direct));
  if (direct && sharedGpu && !mpsLikelyRunning() && bootstrap.rank() == 0) {
    logWarn(Subsys::kRuntime,
            "device communicator: ranks share a GPU and no MPS control daemon was found: their peer-window "
            "kernels run time-sliced (a cross-process round trip takes milliseconds instead of a "
            "microsecond). Start it first: nvidia-cuda-mps-control -d");
  }

  // The staged transport's data path, or NCCL's control channel.
  std::unique_ptr<Transport> host;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.createHostTransport(&host));
  if (!nccl) return build(std::move(host), nullptr, options, device, std::move(res), std::move(direct), out);
  // As ProcessGroupNCCL does: rank 0 makes the id, the bootstrap hands it to the others.
  // Rank 0 broadcasts even when making the id failed: the others then fail on the empty id's size
  // instead of waiting for an id that never comes.
  std::vector<uint8_t> id;
  Status made = Status::ok();
#if RINGGUARD_HAVE_NCCL
  if (bootstrap.rank() == 0) made = NcclTransport::newUniqueId(&id);
#endif
  RINGGUARD_RETURN_IF_ERROR(bootstrap.broadcast(0, &id));
  RINGGUARD_RETURN_IF_ERROR(made);
  return build(std::move(host), &id, options, device, std::move(res), std::move(direct), out);
}

}  // namespace cuda
}  // namespace ringguard
