// The legacy CUDA IPC way to share the peer windows (transport/peer/peer_window.h): where pidfd_getfd is
// refused or the driver has no VMM. Each rank cudaMallocs its window and sends its IPC handle (64 opaque
// bytes) with its pid over the Bootstrap; every other rank opens it. A handle opens only in another process
// (CUDA refuses one's own), and the driver checks nothing else, so the handles travel only between the
// ranks of this bootstrap, like the VMM descriptors.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "cuda/cuda_check.h"
#include "transport/peer/peer_window.h"

namespace ringguard {
namespace peer {
namespace {

struct IpcRecord {
  int32_t pid;
  uint32_t reserved;
  uint64_t bytes;
  cudaIpcMemHandle_t handle;
};

}  // namespace

Status PeerWindows::mapIpc(Bootstrap& bootstrap) {
  const int n = int(mappings_.size());
  handles_ = PeerHandles::kIpc;
  IpcRecord mine{};
  auto allocate = [&]() -> Status {
    RINGGUARD_CUDA_CHECK(cudaSetDevice(device_));
    allocated_ = layout_.bytes;
    Mapping& m = mappings_[size_t(rank_)];
    RINGGUARD_CUDA_CHECK(cudaMalloc(&m.ipc, allocated_));
    m.bytes = allocated_;
    // Zeroed before any peer can open it (the open below follows an agreement).
    RINGGUARD_CUDA_CHECK(cudaMemset(m.ipc, 0, allocated_));
    RINGGUARD_CUDA_CHECK(cudaDeviceSynchronize());
    RINGGUARD_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, m.ipc));
    bases_[size_t(rank_)] = m.ipc;
    mine.pid = int32_t(getpid());
    mine.bytes = allocated_;
    return Status::ok();
  };
  RINGGUARD_RETURN_IF_ERROR(agreeToProceed(bootstrap, allocate()));

  std::vector<uint8_t> bytes(sizeof mine);
  std::memcpy(bytes.data(), &mine, sizeof mine);
  std::vector<std::vector<uint8_t>> all;
  Status st = bootstrap.allgather(bytes, &all);
  auto openAll = [&]() -> Status {
    RINGGUARD_RETURN_IF_ERROR(st);
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      IpcRecord e;
      if (all[size_t(r)].size() != sizeof e) {
        return Status(StatusCode::kTransportError,
                      "peer window of rank " + std::to_string(r) + ": bad record");
      }
      std::memcpy(&e, all[size_t(r)].data(), sizeof e);
      if (e.bytes != allocated_) {
        return Status(StatusCode::kInvalidArgument, "peer window of rank " + std::to_string(r) + " is " +
                                                        std::to_string(e.bytes) + " bytes, this rank's " +
                                                        std::to_string(allocated_) +
                                                        ": every rank must ask the same capacity");
      }
      if (e.pid == mine.pid) {
        return Status(StatusCode::kInvalidArgument,
                      "legacy CUDA IPC handles open only in another process: ranks " + std::to_string(rank_) +
                          " and " + std::to_string(r) + " are one process (pid " + std::to_string(e.pid) +
                          ")");
      }
      Mapping& m = mappings_[size_t(r)];
      const cudaError_t err = cudaIpcOpenMemHandle(&m.ipc, e.handle, cudaIpcMemLazyEnablePeerAccess);
      if (err != cudaSuccess) {
        m.ipc = nullptr;
        return Status(StatusCode::kTransportError, "cudaIpcOpenMemHandle of rank " + std::to_string(r) +
                                                       "'s window: " + cudaGetErrorString(err));
      }
      m.bytes = allocated_;
      bases_[size_t(r)] = m.ipc;
    }
    return Status::ok();
  };
  // Every peer's pid first: a peer whose open failed is still waited for (or seen gone) at release.
  for (int r = 0; r < n && st.isOk(); ++r) {
    IpcRecord e;
    if (r == rank_ || all[size_t(r)].size() != sizeof e) continue;
    std::memcpy(&e, all[size_t(r)].data(), sizeof e);
    mappings_[size_t(r)].pid = e.pid;
  }
  const Status opened = openAll();
  // Which windows each rank opened, so a release waits only for the peers that did: where an open failed
  // (and so every rank fails below), the others would otherwise wait the full 5 s for a close flag that
  // never comes from a peer that is still alive. An exchange that fails leaves every peer counted as
  // having opened (the wait is bounded, the memory kept only if the peer still runs).
  std::vector<uint8_t> mask(size_t(n), 0);
  for (int r = 0; r < n; ++r) mask[size_t(r)] = mappings_[size_t(r)].ipc != nullptr && r != rank_ ? 1 : 0;
  std::vector<std::vector<uint8_t>> masks;
  const bool known = bootstrap.allgather(mask, &masks).isOk();  // every rank calls it, whatever st is
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    mappings_[size_t(r)].openedMine =
        !known || (masks[size_t(r)].size() == size_t(n) && masks[size_t(r)][size_t(rank_)] != 0);
  }
  return agreeToProceed(bootstrap, opened);
}

void PeerWindows::releaseIpc() {
  Mapping& own = mappings_[size_t(rank_)];
  for (int r = 0; r < int(mappings_.size()); ++r) {
    Mapping& m = mappings_[size_t(r)];
    if (r == rank_ || m.ipc == nullptr) continue;
    const uint32_t closed = 1;
    cudaMemcpy(static_cast<char*>(m.ipc) + kClosedOffset + 4 * size_t(rank_), &closed, sizeof closed,
               cudaMemcpyHostToDevice);
    cudaIpcCloseMemHandle(m.ipc);
    m.ipc = nullptr;
  }
  if (own.ipc == nullptr) return;
  // Every peer that may have opened this window: closed it (its flag) or gone (its process ended).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string open;
  for (;;) {
    uint32_t flags[kMaxRanks] = {};
    cudaMemcpy(flags, static_cast<char*>(own.ipc) + kClosedOffset, sizeof flags, cudaMemcpyDeviceToHost);
    open.clear();
    for (int r = 0; r < int(mappings_.size()); ++r) {
      const int pid = mappings_[size_t(r)].pid;
      const bool gone = pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH);
      if (r != rank_ && mappings_[size_t(r)].openedMine && flags[r] == 0 && !gone)
        open += (open.empty() ? "" : ", ") + std::to_string(r);
    }
    if (open.empty() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (open.empty()) {
    cudaFree(own.ipc);
  } else {
    logWarn(Subsys::kTransport,
            "peer window of rank {}: ranks {} still have it open after 5 s; its {} bytes stay allocated "
            "(freeing memory another process has open is undefined)",
            rank_, open, own.bytes);
  }
  own.ipc = nullptr;
}

}  // namespace peer
}  // namespace ringguard
