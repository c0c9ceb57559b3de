#include "transport/peer/peer_window.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>

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
  unsigned char device[16];  // the window's GPU (its UUID)
};

}  // namespace

Status PeerWindows::create(Bootstrap& bootstrap, int device, size_t capacity,
                           std::unique_ptr<PeerWindows>* out) {
  const int n = bootstrap.size();
  int localRank = 0, localSize = 0;
  RINGGUARD_RETURN_IF_ERROR(nodeLocalRank(bootstrap, &localRank, &localSize));
  Status local;
  if (localSize != n) {
    local = Status(StatusCode::kInvalidArgument,
                   "peer windows need every rank on one host: " + std::to_string(n - localSize) + " of " +
                       std::to_string(n) + " ranks are on other hosts");
  } else if (n > kMaxRanks) {
    local = Status(StatusCode::kInvalidArgument, "peer windows map at most " + std::to_string(kMaxRanks) +
                                                     " ranks, not " + std::to_string(n));
  } else if (capacity == 0) {
    local = Status(StatusCode::kInvalidArgument, "peer window capacity must be positive");
  } else {
    local = driver().status;
  }
  std::unique_ptr<PeerWindows> w(new PeerWindows());
  w->rank_ = bootstrap.rank();
  w->device_ = device;
  w->layout_ = makeWindowLayout(capacity);
  w->mappings_.resize(size_t(n));
  w->bases_.assign(size_t(n), nullptr);

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
    RINGGUARD_CUDA_CHECK(
        cudaHostAlloc(reinterpret_cast<void**>(&w->record_), sizeof(ErrorRecord), cudaHostAllocMapped));
    std::memset(w->record_, 0, sizeof(ErrorRecord));
    w->record_->peer = -1;
    RINGGUARD_CUDA_CHECK(
        cudaHostGetDevicePointer(reinterpret_cast<void**>(&w->recordDevice_), w->record_, 0));
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
  Exported mine{int32_t(getpid()), fd, uint64_t(w->allocated_), {}};
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) == cudaSuccess) std::memcpy(mine.device, &props.uuid, 16);
  const unsigned char unknown[16] = {};  // no UUID: take the windows as on different GPUs (system scope)
  const bool known = std::memcmp(mine.device, unknown, 16) != 0;
  std::vector<uint8_t> bytes(sizeof mine);
  std::memcpy(bytes.data(), &mine, sizeof mine);
  std::vector<std::vector<uint8_t>> all;
  Status st = bootstrap.allgather(bytes, &all);
  auto mapAll = [&]() -> Status {
    RINGGUARD_RETURN_IF_ERROR(st);
    w->oneDevice_ = known;
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
      if (std::memcmp(e.device, mine.device, 16) != 0) w->oneDevice_ = false;
      Mapping& m = w->mappings_[size_t(r)];
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
  if (!agreed.isOk()) return agreed;
  *out = std::move(w);
  return Status::ok();
}

void PeerWindows::release() {
  if (mappings_.empty()) return;
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (Mapping& m : mappings_) {
    if (m.mapped) driver().unmap(CUdeviceptr(m.address), m.bytes);
    if (m.address != 0) driver().addressFree(CUdeviceptr(m.address), m.bytes);
    if (m.handle != 0) driver().releaseHandle(CUmemGenericAllocationHandle(m.handle));
    m = Mapping{};
  }
  mappings_.clear();
  if (record_ != nullptr) cudaFreeHost(record_);
  record_ = nullptr;
}

PeerWindows::~PeerWindows() { release(); }

}  // namespace peer
}  // namespace ringguard
