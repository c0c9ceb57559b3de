#include "transport/peer/peer_window.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "core/logging.h"
#include "cuda/cuda_check.h"

namespace ringguard {
namespace peer {
namespace {

// The driver API through the runtime's entry-point lookup: nothing links libcuda, so the binaries still
// load (and their CPU tests run) on machines without a driver.
struct Driver {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemExportToShareableHandle) exportHandle = nullptr;
  decltype(&cuMemImportFromShareableHandle) importHandle = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemSetAccess) setAccess = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemAddressFree) addressFree = nullptr;
  decltype(&cuMemRelease) releaseHandle = nullptr;
  decltype(&cuGetErrorName) errorName = nullptr;
  Status status;
};

template <typename Fn>
Status lookup(const char* name, Fn* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    return Status(StatusCode::kTransportError, std::string("peer windows need the CUDA driver's ") + name +
                                                   " (VMM): not found (" + cudaGetErrorString(err) + ")");
  }
  *fn = reinterpret_cast<Fn>(p);
  return Status::ok();
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    Status st;
    auto get = [&](const char* name, auto* fn) {
      if (st.isOk()) st = lookup(name, fn);
    };
    get("cuMemGetAllocationGranularity", &x.granularity);
    get("cuMemCreate", &x.create);
    get("cuMemExportToShareableHandle", &x.exportHandle);
    get("cuMemImportFromShareableHandle", &x.importHandle);
    get("cuMemAddressReserve", &x.reserve);
    get("cuMemMap", &x.map);
    get("cuMemSetAccess", &x.setAccess);
    get("cuMemUnmap", &x.unmap);
    get("cuMemAddressFree", &x.addressFree);
    get("cuMemRelease", &x.releaseHandle);
    get("cuGetErrorName", &x.errorName);
    x.status = st;
    return x;
  }();
  return d;
}

Status driverError(CUresult r, const char* what) {
  const char* name = "unknown";
  if (driver().errorName != nullptr) driver().errorName(r, &name);
  return Status(StatusCode::kTransportError, std::string(what) + " failed: " + name);
}

#define RINGGUARD_CU_CHECK(expr, what)                            \
  do {                                                            \
    const CUresult _rg_cu = (expr);                               \
    if (_rg_cu != CUDA_SUCCESS) return driverError(_rg_cu, what); \
  } while (0)

struct Exported {
  int32_t pid;
  int32_t fd;
  uint64_t bytes;
};

}  // namespace

const char* peerHandlesName(PeerHandles h) {
  switch (h) {
    case PeerHandles::kAuto:
      return "auto";
    case PeerHandles::kVmm:
      return "vmm";
    case PeerHandles::kIpc:
      return "ipc";
  }
  return "?";
}

Status PeerWindows::create(Bootstrap& bootstrap, int device, size_t capacity, size_t p2pBytes,
                           PeerHandles handles, std::unique_ptr<PeerWindows>* out) {
  const int n = bootstrap.size();
  int localRank = 0, localSize = 0;
  RINGGUARD_RETURN_IF_ERROR(nodeLocalRank(bootstrap, &localRank, &localSize));
  // Every rank's handle kind and layout (payload bytes per half and per send/recv slot, whole chunks), so
  // ranks that ask differently all fail naming both (never half the ranks on one kind waiting for records of
  // the other, nor a kernel reading a peer's window at offsets of another layout: equal allocation sizes do
  // not make equal layouts).
  const WindowLayout layout = makeWindowLayout(capacity, p2pBytes, n);
  struct Asked {
    uint8_t handles;
    uint8_t reserved[7];
    uint64_t capacity;
    uint64_t p2pBytes;
  };
  const Asked asked{uint8_t(handles), {}, uint64_t(layout.capacity), uint64_t(layout.p2pBytes)};
  std::vector<uint8_t> askedBytes(sizeof asked);
  std::memcpy(askedBytes.data(), &asked, sizeof asked);
  std::vector<std::vector<uint8_t>> kinds;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.allgather(askedBytes, &kinds));
  auto check = [&]() -> Status {
    for (int r = 0; r < n; ++r) {
      Asked theirs{};
      if (kinds[size_t(r)].size() != sizeof theirs) {
        return Status(StatusCode::kTransportError, "peer windows: rank " + std::to_string(r) +
                                                       "'s request is " +
                                                       std::to_string(kinds[size_t(r)].size()) +
                                                       " bytes, not " + std::to_string(sizeof theirs));
      }
      std::memcpy(&theirs, kinds[size_t(r)].data(), sizeof theirs);
      if (theirs.handles != asked.handles) {
        return Status(StatusCode::kInvalidArgument,
                      std::string("RINGGUARD_PEER_HANDLES differs between ranks: rank ") +
                          std::to_string(bootstrap.rank()) + " has " + peerHandlesName(handles) + ", rank " +
                          std::to_string(r) + " has " +
                          (theirs.handles <= 2 ? peerHandlesName(PeerHandles(theirs.handles)) : "?"));
      }
      if (theirs.capacity != asked.capacity || theirs.p2pBytes != asked.p2pBytes) {
        return Status(StatusCode::kInvalidArgument,
                      "peer window layouts differ between ranks: rank " + std::to_string(bootstrap.rank()) +
                          " has " + std::to_string(asked.capacity) + " bytes per collective and " +
                          std::to_string(asked.p2pBytes) + " per send/recv slot, rank " + std::to_string(r) +
                          " has " + std::to_string(theirs.capacity) + " and " +
                          std::to_string(theirs.p2pBytes) +
                          " (RINGGUARD_PEER_BYTES, RINGGUARD_PEER_P2P_BYTES and RINGGUARD_DEVICE_TRANSPORT, "
                          "whose send/recv slots exist only with 'peer': every rank must set the same)");
      }
    }
    if (localSize != n) {
      return Status(StatusCode::kInvalidArgument,
                    "peer windows need every rank on one host: " + std::to_string(n - localSize) + " of " +
                        std::to_string(n) + " ranks are on other hosts");
    }
    if (n > kMaxRanks) {
      return Status(StatusCode::kInvalidArgument, "peer windows map at most " + std::to_string(kMaxRanks) +
                                                      " ranks, not " + std::to_string(n));
    }
    if (capacity == 0) return Status(StatusCode::kInvalidArgument, "peer window capacity must be positive");
    return Status::ok();
  };
  const Status local = check();
  std::unique_ptr<PeerWindows> w(new PeerWindows());
  w->rank_ = bootstrap.rank();
  w->device_ = device;
  w->layout_ = layout;
  w->mappings_.resize(size_t(n));
  w->bases_.assign(size_t(n), nullptr);
  RINGGUARD_RETURN_IF_ERROR(agreeToProceed(bootstrap, local));
  RINGGUARD_RETURN_IF_ERROR(w->learnDevices(bootstrap));

  // Every step below is agreed, so every rank takes the same branch.
  Status mapped;
  if (handles == PeerHandles::kIpc) {
    mapped = w->mapIpc(bootstrap);
  } else {
    mapped = w->mapVmm(bootstrap);
    if (!mapped.isOk() && handles == PeerHandles::kAuto) {
      w->releaseMappings();
      const Status ipc = w->mapIpc(bootstrap);
      if (ipc.isOk() && bootstrap.rank() == 0) {
        logWarn(Subsys::kTransport,
                "peer windows: VMM handles could not be shared ({}); using the legacy CUDA IPC handles "
                "(RINGGUARD_PEER_HANDLES=ipc silences this)",
                mapped.message());
      }
      mapped = ipc.isOk() ? ipc
                          : Status(ipc.code(), "peer windows: VMM handles failed (" + mapped.message() +
                                                   "); the legacy CUDA IPC handles failed too (" +
                                                   ipc.message() + ")");
    }
  }
  RINGGUARD_RETURN_IF_ERROR(mapped);
  // The error record (mapped pinned memory), whichever way the windows are shared.
  auto record = [&]() -> Status {
    RINGGUARD_CUDA_CHECK(
        cudaHostAlloc(reinterpret_cast<void**>(&w->record_), sizeof(ErrorRecord), cudaHostAllocMapped));
    std::memset(w->record_, 0, sizeof(ErrorRecord));
    w->record_->peer = -1;
    RINGGUARD_CUDA_CHECK(
        cudaHostGetDevicePointer(reinterpret_cast<void**>(&w->recordDevice_), w->record_, 0));
    return Status::ok();
  };
  RINGGUARD_RETURN_IF_ERROR(agreeToProceed(bootstrap, record()));
  *out = std::move(w);
  return Status::ok();
}

Status PeerWindows::learnDevices(Bootstrap& bootstrap) {
  unsigned char mine[16] = {};
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device_) == cudaSuccess) std::memcpy(mine, &props.uuid, 16);
  const unsigned char unknown[16] = {};  // no UUID: take the windows as on different GPUs (system scope)
  std::vector<std::vector<uint8_t>> all;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.allgather(std::vector<uint8_t>(mine, mine + 16), &all));
  oneDevice_ = std::memcmp(mine, unknown, 16) != 0;
  for (const std::vector<uint8_t>& theirs : all) {
    if (theirs.size() != 16 || std::memcmp(theirs.data(), mine, 16) != 0) oneDevice_ = false;
  }
  return Status::ok();
}

// Each rank allocates with cuMemCreate and exports a descriptor; the others take it with pidfd_getfd,
// import and map it.
Status PeerWindows::mapVmm(Bootstrap& bootstrap) {
  const int n = int(mappings_.size());
  const int device = device_;
  PeerWindows* w = this;
  handles_ = PeerHandles::kVmm;
  Status local = driver().status;

  // 1. This rank's allocation, exported as a descriptor.
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  int fd = -1;
  auto allocate = [&]() -> Status {
    RINGGUARD_CUDA_CHECK(cudaSetDevice(device));
    size_t gran = 0;
    RINGGUARD_CU_CHECK(driver().granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                       "cuMemGetAllocationGranularity");
    w->allocated_ = roundUp(w->layout_.bytes, gran);
    Mapping& m = w->mappings_[size_t(w->rank_)];
    CUmemGenericAllocationHandle h = 0;
    RINGGUARD_CU_CHECK(driver().create(&h, w->allocated_, &prop, 0), "cuMemCreate");
    m.handle = h;
    m.bytes = w->allocated_;
    RINGGUARD_CU_CHECK(driver().exportHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                       "cuMemExportToShareableHandle");
    return Status::ok();
  };
  if (local.isOk()) local = allocate();
  Status agreed = agreeToProceed(bootstrap, local);
  if (!agreed.isOk()) {
    if (fd >= 0) close(fd);
    return agreed;
  }

  // 2. Every rank's (pid, descriptor): each takes the others' descriptors with pidfd_getfd, imports and
  // maps them. Only the ranks of this bootstrap learn the numbers; the kernel checks that the caller may
  // trace the exporter (same user), so no other process can take them.
  Exported mine{int32_t(getpid()), fd, uint64_t(w->allocated_)};
  std::vector<uint8_t> bytes(sizeof mine);
  std::memcpy(bytes.data(), &mine, sizeof mine);
  std::vector<std::vector<uint8_t>> all;
  Status st = bootstrap.allgather(bytes, &all);
  auto mapAll = [&]() -> Status {
    RINGGUARD_RETURN_IF_ERROR(st);
    for (int r = 0; r < n; ++r) {
      Exported e;
      if (all[size_t(r)].size() != sizeof e) {
        return Status(StatusCode::kTransportError,
                      "peer window of rank " + std::to_string(r) + ": bad record");
      }
      std::memcpy(&e, all[size_t(r)].data(), sizeof e);
      if (e.bytes != w->allocated_) {
        return Status(StatusCode::kInvalidArgument, "peer window of rank " + std::to_string(r) + " is " +
                                                        std::to_string(e.bytes) + " bytes, this rank's " +
                                                        std::to_string(w->allocated_) +
                                                        ": every rank must ask the same capacity");
      }
      Mapping& m = w->mappings_[size_t(r)];
      m.pid = e.pid;
      if (r != w->rank_) {
        const int pidfd = int(syscall(SYS_pidfd_open, pid_t(e.pid), 0));
        if (pidfd < 0) {
          return Status(StatusCode::kTransportError, "pidfd_open of rank " + std::to_string(r) + " (pid " +
                                                         std::to_string(e.pid) +
                                                         "): " + std::strerror(errno));
        }
        const int theirs = int(syscall(SYS_pidfd_getfd, pidfd, e.fd, 0));
        const int getErr = errno;
        close(pidfd);
        if (theirs < 0) {
          return Status(StatusCode::kTransportError,
                        "pidfd_getfd of rank " + std::to_string(r) +
                            "'s window descriptor: " + std::strerror(getErr) +
                            " (needs the same user and ptrace access, e.g. no "
                            "container without CAP_SYS_PTRACE and yama ptrace_scope <= 1)");
        }
        CUmemGenericAllocationHandle h = 0;
        const CUresult ir = driver().importHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(theirs)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(theirs);
        if (ir != CUDA_SUCCESS) return driverError(ir, "cuMemImportFromShareableHandle");
        m.handle = h;
        m.bytes = w->allocated_;
      }
      CUdeviceptr addr = 0;
      RINGGUARD_CU_CHECK(driver().reserve(&addr, m.bytes, 0, 0, 0), "cuMemAddressReserve");
      m.address = addr;
      RINGGUARD_CU_CHECK(driver().map(addr, m.bytes, 0, CUmemGenericAllocationHandle(m.handle), 0),
                         "cuMemMap");
      m.mapped = true;
      CUmemAccessDesc access = {};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = device;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      RINGGUARD_CU_CHECK(driver().setAccess(addr, m.bytes, &access, 1), "cuMemSetAccess");
      w->bases_[size_t(r)] = reinterpret_cast<void*>(addr);
    }
    // Zero this rank's own window (header, tables, data) before any peer reads it.
    RINGGUARD_CUDA_CHECK(cudaMemset(w->bases_[size_t(w->rank_)], 0, w->allocated_));
    RINGGUARD_CUDA_CHECK(cudaDeviceSynchronize());
    return Status::ok();
  };
  Status mapped = mapAll();
  // Every rank has its peers' descriptors (or failed): the exported one can go.
  agreed = agreeToProceed(bootstrap, mapped);
  close(fd);
  return agreed;
}

void PeerWindows::releaseMappings() {
  if (mappings_.empty()) return;
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  releaseIpc();
  for (Mapping& m : mappings_) {
    if (m.mapped) driver().unmap(CUdeviceptr(m.address), m.bytes);
    if (m.address != 0) driver().addressFree(CUdeviceptr(m.address), m.bytes);
    if (m.handle != 0) driver().releaseHandle(CUmemGenericAllocationHandle(m.handle));
    m = Mapping{};
  }
  bases_.assign(bases_.size(), nullptr);
}

void PeerWindows::release() {
  if (mappings_.empty()) return;
  releaseMappings();
  mappings_.clear();
  if (record_ != nullptr) cudaFreeHost(record_);
  record_ = nullptr;
}

PeerWindows::~PeerWindows() { release(); }

}  // namespace peer
}  // namespace ringguard
