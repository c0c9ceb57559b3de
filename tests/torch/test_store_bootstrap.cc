// The c10d Store bootstrap's exchanges: ranks on threads over one in-process HashStore (the Store the
// c10d backend gets is a PrefixStore over a TCPStore; both key/value). The host transport is Gloo's and is
// exercised by tests/python.
#include <gtest/gtest.h>

#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "torch/store_bootstrap.h"

namespace ringguard {
namespace {

// Only rank and size: the exchanges never touch the backend.
class RankOnlyBackend final : public c10d::Backend {
 public:
  using c10d::Backend::Backend;
  const std::string getBackendName() const override { return "rank-only"; }
};

void runRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

TEST(StoreBootstrap, BroadcastAndAllgatherOverTheStore) {
  const int n = 3;
  auto store = c10::make_intrusive<c10d::HashStore>();
  runRanks(n, [&](int rank) {
    StoreBootstrap b(store, c10::make_intrusive<RankOnlyBackend>(rank, n), "test", /*tagBase=*/1);
    ASSERT_EQ(b.rank(), rank);
    ASSERT_EQ(b.size(), n);
    std::vector<uint8_t> bytes(size_t(rank), 9);
    if (rank == 1) bytes = {4, 5, 6};
    ASSERT_TRUE(b.broadcast(1, &bytes).isOk());
    EXPECT_EQ(bytes, (std::vector<uint8_t>{4, 5, 6}));
    // A second exchange gets keys of its own: nothing of the first is read again.
    std::vector<std::vector<uint8_t>> all;
    ASSERT_TRUE(b.allgather(std::vector<uint8_t>(size_t(rank), uint8_t(rank)), &all).isOk());
    ASSERT_EQ(int(all.size()), n);
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[size_t(r)], std::vector<uint8_t>(size_t(r), uint8_t(r)));
    int local = -1, localSize = -1;
    ASSERT_TRUE(nodeLocalRank(b, &local, &localSize).isOk());
    EXPECT_EQ(local, rank);
    EXPECT_EQ(localSize, n);
  });
}

TEST(StoreBootstrap, AStoreTimeoutIsAStatus) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(std::chrono::milliseconds(50));
  StoreBootstrap b(store, c10::make_intrusive<RankOnlyBackend>(1, 2), "test", /*tagBase=*/1);
  std::vector<uint8_t> bytes;
  Status st = b.broadcast(0, &bytes);  // rank 0 never publishes
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.toString();
  EXPECT_NE(st.message().find("c10d Store get"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ringguard
