#pragma once
// Peer windows: device memory of the ranks of one host, mapped into each other (docs/design/protocol.md,
// "The one-sided protocol"). Each rank allocates its window with the CUDA VMM API (cuMemCreate with a POSIX
// file descriptor handle), the descriptors move between the ranks' processes with pidfd_getfd (the
// exporter's pid and descriptor number travel over the communicator's Bootstrap, as PyTorch's
// SymmetricMemory does), and every rank maps every peer's window read/write. Several processes on one GPU
// and GPUs with peer access (NVLink, PCIe P2P) work the same way.
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

class PeerWindows {
 public:
  // Collective over every rank of `bootstrap`, all on this host (kInvalidArgument naming the ranks that are
  // not) and at most kMaxRanks of them. `device` is this rank's CUDA device; `capacity` the payload bytes
  // per half (rounded up to whole chunks). The windows come zeroed.
  static Status create(Bootstrap& bootstrap, int device, size_t capacity, std::unique_ptr<PeerWindows>* out);
  ~PeerWindows();
  PeerWindows(const PeerWindows&) = delete;
  PeerWindows& operator=(const PeerWindows&) = delete;

  int rank() const { return rank_; }
  int size() const { return int(bases_.size()); }
  const WindowLayout& layout() const { return layout_; }
  // Rank r's window as this process maps it (r == rank(): its own).
  void* window(int r) const { return bases_[size_t(r)]; }
  // Every rank's window, in rank order (what the kernels take).
  const std::vector<void*>& windows() const { return bases_; }
  // Every rank's window is on one GPU (several processes on one device, as under MPS): the kernels then order
  // their window accesses at GPU scope, not system scope (PeerWindowArgs::oneDevice).
  bool oneDevice() const { return oneDevice_; }
  // This rank's error record: pinned host memory the kernels write through its device mapping.
  ErrorRecord* errorRecord() const { return record_; }
  ErrorRecord* errorRecordDevice() const { return recordDevice_; }

 private:
  PeerWindows() = default;
  struct Mapping {
    unsigned long long handle = 0;   // CUmemGenericAllocationHandle
    unsigned long long address = 0;  // CUdeviceptr
    size_t bytes = 0;
    bool mapped = false;
  };
  void release();

  int rank_ = 0;
  int device_ = 0;
  bool oneDevice_ = false;
  WindowLayout layout_;
  size_t allocated_ = 0;
  std::vector<Mapping> mappings_;
  std::vector<void*> bases_;
  ErrorRecord* record_ = nullptr;
  ErrorRecord* recordDevice_ = nullptr;
};

}  // namespace peer
}  // namespace ringguard
