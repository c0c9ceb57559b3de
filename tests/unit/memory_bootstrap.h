#pragma once
// A Bootstrap with N ranks on threads of one process: the exchanges go through one shared board, the host
// transports come from one loopback fabric. What the factories are tested over without MPI or torch: the
// host factory here (test_bootstrap.cc), the device factory in tests/gpu.
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ringguard/bootstrap/bootstrap.h"
#include "transport/loopback/loopback_transport.h"

namespace ringguard {
namespace testing {

// What the ranks of one in-memory bootstrap share: the contributions to each exchange, by exchange number.
struct Board {
  explicit Board(int n) : size(n), transports(makeLoopbackTransports(n)) {}
  const int size;
  std::mutex mutex;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<std::vector<uint8_t>>> posts;
  std::map<uint64_t, int> arrived;
  std::vector<std::unique_ptr<Transport>> transports;
};

class MemoryBootstrap final : public Bootstrap {
 public:
  MemoryBootstrap(Board* board, int rank) : board_(board), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return board_->size; }
  Status broadcast(int root, std::vector<uint8_t>* bytes) override {
    std::vector<std::vector<uint8_t>> all;
    RINGGUARD_RETURN_IF_ERROR(allgather(*bytes, &all));
    *bytes = all[size_t(root)];
    return Status::ok();
  }
  Status allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override {
    const uint64_t n = exchanges_++;
    std::unique_lock<std::mutex> lock(board_->mutex);
    auto& posts = board_->posts[n];
    posts.resize(size_t(board_->size));
    posts[size_t(rank_)] = mine;
    ++board_->arrived[n];
    board_->cv.notify_all();
    board_->cv.wait(lock, [&] { return board_->arrived[n] == board_->size; });
    *all = posts;
    return Status::ok();
  }
  Status createHostTransport(std::unique_ptr<Transport>* out) override {
    std::lock_guard<std::mutex> lock(board_->mutex);
    *out = std::move(board_->transports[size_t(rank_)]);
    return *out ? Status::ok() : Status(StatusCode::kInternal, "MemoryBootstrap: one transport per rank");
  }

 private:
  Board* board_;
  const int rank_;
  uint64_t exchanges_ = 0;
};

}  // namespace testing
}  // namespace ringguard
