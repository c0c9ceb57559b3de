// The Bootstrap helpers and the host factory over an in-memory bootstrap: N ranks on threads, the
// exchanges through one shared board, the host transports from one loopback fabric.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "loopback_util.h"
#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/runtime/factories.h"

namespace ringguard {
namespace {

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

TEST(Bootstrap, NodeLocalRankOnOneHostIsTheRank) {
  for (int n : {1, 3}) {
    Board board(n);
    testing::runRanks(n, [&](int rank) {
      MemoryBootstrap b(&board, rank);
      int local = -1, localSize = -1;
      ASSERT_TRUE(nodeLocalRank(b, &local, &localSize).isOk());
      EXPECT_EQ(local, rank);
      EXPECT_EQ(localSize, n);
    });
  }
}

TEST(Factories, HostCommunicatorFromABootstrapReduces) {
  const int n = 3;
  Board board(n);
  std::vector<std::unique_ptr<Communicator>> comms(n);
  testing::runRanks(n, [&](int rank) {
    MemoryBootstrap b(&board, rank);
    ASSERT_TRUE(createHostCommunicator(b, Options(), &comms[size_t(rank)]).isOk());
  });
  testing::runRanks(n, [&](int rank) {
    Communicator& c = *comms[size_t(rank)];
    EXPECT_EQ(c.rank(), rank);
    EXPECT_EQ(c.size(), n);
    std::vector<float> v(1000, float(rank + 1));
    ASSERT_TRUE(c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).isOk());
    for (float x : v) ASSERT_EQ(x, 6.0f);
  });
}

TEST(Factories, HostCommunicatorRejectsBadOptions) {
  Board board(1);
  MemoryBootstrap b(&board, 0);
  Options o;
  o.slots = 1;
  std::unique_ptr<Communicator> c;
  EXPECT_EQ(createHostCommunicator(b, o, &c).code(), StatusCode::kInvalidArgument);
}

// A fault-schedule entry for a rank the group does not have could never fire: an error at creation.
TEST(Factories, HostCommunicatorRejectsAScheduleThatCannotFire) {
  Board board(1);
  MemoryBootstrap b(&board, 0);
  Options o;
  o.fault.schedule = {{0, 0, 0, 1}};
  std::unique_ptr<Communicator> c;
  Status st = createHostCommunicator(b, o, &c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 1 does not exist"), std::string::npos) << st.message();
  EXPECT_EQ(c, nullptr);
}

}  // namespace
}  // namespace ringguard
