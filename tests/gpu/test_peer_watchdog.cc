// The direct path's watchdog on the GPU (runtime/direct_watchdog.h): a peer-path collective that fails while
// no one waits for it (the last rank never launches its part) poisons and aborts the communicator of every
// rank that launched, within the timeout and a few watchdog intervals, with the stopped rank named; no call,
// wait or stream synchronisation on the communicator is needed for it.
#include <chrono>
#include <string>
#include <thread>

#include "peer_test_util.h"

namespace ringguard {
namespace {

using namespace std::chrono_literals;

TEST(PeerWatchdog, AbortsTheCommunicatorAfterAnErrorNoOneWaitedFor) {
  if (!peer::everyRankHasAGpu()) GTEST_SKIP() << "no CUDA device on some rank";
  Options o;
  o.timeout = std::chrono::milliseconds(1000);
  cuda::DeviceOptions d;
  d.peerBytes = 1u << 20;
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Communicator> c;
  ASSERT_NO_FATAL_FAILURE(peer::makePeerCommunicator(o, d, &bootstrap, &c));
  Status st;
  const int stopped = c->size() - 1;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const size_t count = 1024;
  peer::DeviceBuffer buf(count * 4);
  ASSERT_EQ(peer::fill(buf.get(), 0, count * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (c->rank() != stopped) {
    st = c->allreduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum, s);
    EXPECT_TRUE(st.isOk()) << st.toString();  // launched; the kernel waits for the stopped rank
    const auto start = std::chrono::steady_clock::now();
    Status seen;
    while ((seen = c->firstError()).isOk() && std::chrono::steady_clock::now() - start < 20s) {
      std::this_thread::sleep_for(10ms);
    }
    const double s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_FALSE(seen.isOk()) << "no error after " << s_ << " s";
    // The timeout (1 s) and a few 100 ms intervals, not the 20 s bound.
    EXPECT_LT(s_, 5.0) << seen.toString();
    // A timeout naming the stopped rank, or a peer that failed first (3 and 4 ranks).
    const bool names = seen.message().find("rank " + std::to_string(stopped)) != std::string::npos;
    EXPECT_TRUE(seen.code() == StatusCode::kTimeout || names) << seen.toString();
    // Poisoned: the next call returns the error without launching.
    st = c->allreduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum, s);
    EXPECT_FALSE(st.isOk());
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);  // the kernel ended at its deadline: nothing spins
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (c->rank() == stopped) c->abort("the test's stopped rank is done");
  c.reset();
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace ringguard
