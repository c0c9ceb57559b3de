#pragma once
// The bootstrap of the c10d backend: exchanges go through the group's c10d Store (as ProcessGroupNCCL's
// unique id does), the host transport over the group's Gloo backend (ringguard/transport/c10d_transport.h).
// Private to the torch layer: it needs torch types. Shared memory is the bootstrap layer's business:
// withSharedMemory (ringguard/bootstrap/host_bootstrap.h) wraps one of these.
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ringguard/bootstrap/bootstrap.h"

namespace ringguard {

class StoreBootstrap final : public Bootstrap {
 public:
  // `store` and `backend` span the same ranks (rank and size are the backend's). Keys live under
  // `prefix` (one per bootstrap of a store); the host transport takes the backend's tags [tagBase,
  // tagBase + 3), so it can be made once.
  StoreBootstrap(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Backend> backend,
                 std::string prefix, int tagBase);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status broadcast(int root, std::vector<uint8_t>* bytes) override;
  Status allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override;
  Status createHostTransport(std::unique_ptr<Transport>* out) override;

 private:
  std::string nextKey();  // a fresh key per exchange: Store keys are never reused

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  const std::string prefix_;
  const int tagBase_;
  const int rank_;
  const int size_;
  uint64_t exchanges_ = 0;
  bool transportMade_ = false;
};

}  // namespace ringguard
