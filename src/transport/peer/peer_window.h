#pragma once
// Peer windows: device memory of the ranks of one host, mapped into each other (docs/design/protocol.md,
// "The one-sided protocol", "Windows"). Two ways to share a window, chosen alike on every rank:
//   vmm  each rank allocates with the CUDA VMM API (cuMemCreate with a POSIX file descriptor handle), the
//        descriptors move between the ranks' processes with pidfd_getfd (the exporter's pid and descriptor
//        number travel over the communicator's Bootstrap, as PyTorch's SymmetricMemory does), and every
//        rank maps every peer's window read/write;
//   ipc  the legacy CUDA IPC handles (cudaMalloc, cudaIpcGetMemHandle, cudaIpcOpenMemHandle), for where
//        pidfd_getfd is refused (a container without CAP_SYS_PTRACE, yama ptrace_scope 3) or the driver has
//        no VMM; the handle is 64 opaque bytes sent over the Bootstrap.
// `auto` takes vmm and, when any rank cannot, ipc on every rank, with a warning naming the reason. Several
// processes on one GPU and GPUs with peer access (NVLink, PCIe P2P) work the same way.
//
// Created collectively; every step that one rank can fail is agreed over the bootstrap (agreeToProceed),
// so a rank that cannot map fails every rank with its reason instead of leaving the others waiting.
// The destructor unmaps and releases everything, on every exit path.
#include <cstddef>
#include <memory>
#include <vector>

#include "core/peer_window_layout.h"
#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace peer {

// How the windows are shared (RINGGUARD_PEER_HANDLES): every rank must ask for the same.
enum class PeerHandles { kAuto, kVmm, kIpc };
const char* peerHandlesName(PeerHandles h);

class PeerWindows {
 public:
  // Collective over every rank of `bootstrap`, all on this host (kInvalidArgument naming the ranks that are
  // not) and at most kMaxRanks of them. `device` is this rank's CUDA device; `capacity` the payload bytes
  // per half (rounded up to whole chunks); `p2pBytes` the payload bytes per slot of each send/recv channel
  // (0: no channels; docs/design/protocol.md, "Send/recv"). Every rank must ask the same layout (ranks that
  // differ all fail naming both). The windows come zeroed.
  static Status create(Bootstrap& bootstrap, int device, size_t capacity, size_t p2pBytes,
                       PeerHandles handles, std::unique_ptr<PeerWindows>* out);
  static Status create(Bootstrap& bootstrap, int device, size_t capacity, PeerHandles handles,
                       std::unique_ptr<PeerWindows>* out) {
    return create(bootstrap, device, capacity, 0, handles, out);
  }
  static Status create(Bootstrap& bootstrap, int device, size_t capacity, std::unique_ptr<PeerWindows>* out) {
    return create(bootstrap, device, capacity, 0, PeerHandles::kAuto, out);
  }
  ~PeerWindows();
  PeerWindows(const PeerWindows&) = delete;
  PeerWindows& operator=(const PeerWindows&) = delete;

  int rank() const { return rank_; }
  int size() const { return int(bases_.size()); }
  int device() const { return device_; }
  const WindowLayout& layout() const { return layout_; }
  // Rank r's window as this process maps it (r == rank(): its own).
  void* window(int r) const { return bases_[size_t(r)]; }
  // Every rank's window, in rank order (what the kernels take).
  const std::vector<void*>& windows() const { return bases_; }
  // Every rank's window is on one GPU (several processes on one device, as under MPS): the kernels then order
  // their window accesses at GPU scope, not system scope (PeerWindowArgs::oneDevice).
  bool oneDevice() const { return oneDevice_; }
  // How they were shared: kVmm or kIpc.
  PeerHandles handles() const { return handles_; }
  // Every rank's process id (this rank's own included), for the watchdog's liveness check
  // (transport/peer/peer_liveness.h).
  std::vector<int> pids() const {
    std::vector<int> out;
    for (const Mapping& m : mappings_) out.push_back(m.pid);
    return out;
  }
  // This rank's error record: pinned host memory the kernels write through its device mapping.
  ErrorRecord* errorRecord() const { return record_; }
  ErrorRecord* errorRecordDevice() const { return recordDevice_; }

 private:
  PeerWindows() = default;
  struct Mapping {
    unsigned long long handle = 0;   // CUmemGenericAllocationHandle (vmm)
    unsigned long long address = 0;  // CUdeviceptr (vmm)
    size_t bytes = 0;
    bool mapped = false;
    void* ipc = nullptr;      // cudaMalloc'd (this rank) or cudaIpcOpenMemHandle'd (a peer) base (ipc)
    int pid = 0;              // the rank's process: gone, it has closed its mappings (ipc) and the
                              // kernels stop waiting for it (peer_liveness.h)
    bool openedMine = false;  // the rank opened this rank's window (ipc): only those are waited for
  };
  // The two ways (peer_window_vmm.cc, peer_window_ipc.cc): map every rank's window into bases_, agreed.
  Status mapVmm(Bootstrap& bootstrap);
  Status mapIpc(Bootstrap& bootstrap);
  // Every rank's device UUID against this rank's (oneDevice_); false if any differs or one is unknown.
  Status learnDevices(Bootstrap& bootstrap);
  // Every window unmapped and released (the record kept): before a fallback, and by release().
  void releaseMappings();
  // The ipc mappings (peer_window_ipc.cc): every peer's handle closed (and this rank's close flagged in its
  // window), then this rank's allocation freed once every peer closed it or is gone (kept, with a
  // warning, if one still has it open after 5 s).
  void releaseIpc();
  void release();

  int rank_ = 0;
  int device_ = 0;
  bool oneDevice_ = false;
  PeerHandles handles_ = PeerHandles::kVmm;
  WindowLayout layout_;
  size_t allocated_ = 0;
  std::vector<Mapping> mappings_;
  std::vector<void*> bases_;
  ErrorRecord* record_ = nullptr;
  ErrorRecord* recordDevice_ = nullptr;
};

}  // namespace peer
}  // namespace ringguard
