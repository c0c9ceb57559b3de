// The loopback transport's own contracts: post-order matching per (peer, channel), rendezvous completion,
// a message larger than its receive an error naming both sizes, cancelled receives withdrawn, released
// sends delivered from a copy.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "loopback_util.h"

namespace ringguard {
namespace {

// The test reaches the protected hooks the way a transport built on another one does.
class Probe : public Transport {
 public:
  Probe() : Transport(0, 1) {}
  static Status send(Transport* t, int peer, const void* data, size_t bytes,
                     std::unique_ptr<TransportOp>* op) {
    return innerPostSend(t, peer, Channel::kPayload, data, bytes, op);
  }
  static Status recv(Transport* t, int peer, void* data, size_t bytes, std::unique_ptr<TransportOp>* op) {
    return innerPostRecv(t, peer, Channel::kPayload, data, bytes, op);
  }
  static Status sendTrailerChannel(Transport* t, int peer, const void* data, size_t bytes,
                                   std::unique_ptr<TransportOp>* op) {
    return innerPostSend(t, peer, Channel::kTrailer, data, bytes, op);
  }
  const char* name() const override { return "probe"; }
  ControlChannel* control() override { return nullptr; }

 protected:
  Status doPostSend(int, Channel, const void*, size_t, std::unique_ptr<TransportOp>*) override {
    return Status::ok();
  }
  Status doPostRecv(int, Channel, void*, size_t, std::unique_ptr<TransportOp>*) override {
    return Status::ok();
  }
};

bool done(TransportOp* op, Status* st = nullptr) {
  bool d = false;
  Status s = op->test(&d);
  if (st != nullptr) *st = s;
  return d;
}

TEST(LoopbackTransportTest, MatchesInPostOrderAndCompletesOnlyWhenCopied) {
  std::shared_ptr<LoopbackFabric> fabric;
  auto t = makeLoopbackTransports(2, &fabric);
  const std::string a = "first message", b = "second";
  std::unique_ptr<TransportOp> s1, s2, s3, r1, r2, r3;
  ASSERT_TRUE(Probe::send(t[0].get(), 1, a.data(), a.size(), &s1).isOk());
  ASSERT_TRUE(Probe::send(t[0].get(), 1, b.data(), b.size(), &s2).isOk());
  // Another channel of the same pair is a queue of its own.
  ASSERT_TRUE(Probe::sendTrailerChannel(t[0].get(), 1, "T", 1, &s3).isOk());
  EXPECT_FALSE(done(s1.get())) << "a send completes only when a receive took its bytes";
  EXPECT_EQ(fabric->unmatched(), 3u);
  std::vector<char> x(32, '.'), y(32, '.');
  ASSERT_TRUE(Probe::recv(t[1].get(), 0, x.data(), x.size(), &r1).isOk());  // larger than sent: fine
  ASSERT_TRUE(Probe::recv(t[1].get(), 0, y.data(), b.size(), &r2).isOk());
  EXPECT_TRUE(done(s1.get()) && done(s2.get()) && done(r1.get()) && done(r2.get()));
  EXPECT_EQ(std::string(x.data(), a.size()), a);
  EXPECT_EQ(x[a.size()], '.') << "nothing written past the message";
  EXPECT_EQ(std::string(y.data(), b.size()), b);
  EXPECT_FALSE(done(s3.get()));
  EXPECT_EQ(fabric->unmatched(), 1u);
  // Receive first, then the send: the same.
  char c = 0;
  ASSERT_TRUE(Probe::recv(t[0].get(), 1, &c, 1, &r3).isOk());
  EXPECT_FALSE(done(r3.get()));
  std::unique_ptr<TransportOp> s4;
  ASSERT_TRUE(Probe::send(t[1].get(), 0, "z", 1, &s4).isOk());
  EXPECT_TRUE(done(r3.get()));
  EXPECT_EQ(c, 'z');
}

TEST(LoopbackTransportTest, AMessageLargerThanItsReceiveIsAnErrorNamingBothSizes) {
  auto t = makeLoopbackTransports(3);
  std::vector<uint8_t> big(4096, 7), slot(1024 + 1, 0);
  std::unique_ptr<TransportOp> s, r;
  ASSERT_TRUE(Probe::send(t[2].get(), 1, big.data(), big.size(), &s).isOk());
  ASSERT_TRUE(Probe::recv(t[1].get(), 2, slot.data(), 1024, &r).isOk());
  const std::string msg =
      "loopback: a payload message of 4096 bytes from rank 2 does not fit the receive of 1024 bytes posted "
      "by "
      "rank 1";
  Status st;
  EXPECT_TRUE(done(r.get(), &st));
  EXPECT_EQ(st.code(), StatusCode::kTransportError);
  EXPECT_EQ(st.message(), msg);
  EXPECT_TRUE(done(s.get(), &st));
  EXPECT_EQ(st.message(), msg);
  EXPECT_EQ(slot, std::vector<uint8_t>(1025, 0)) << "not a byte written";
}

TEST(LoopbackTransportTest, CancelWithdrawsReceivesAndReleasesSendsWithACopy) {
  std::shared_ptr<LoopbackFabric> fabric;
  auto t = makeLoopbackTransports(2, &fabric);
  char first = 0, second = 0;
  std::unique_ptr<TransportOp> r1, r2;
  ASSERT_TRUE(Probe::recv(t[1].get(), 0, &first, 1, &r1).isOk());
  r1->cancel();  // withdrawn: the next message goes to the next receive
  ASSERT_TRUE(Probe::recv(t[1].get(), 0, &second, 1, &r2).isOk());
  {
    std::vector<char> buffer(1, 'q');
    std::unique_ptr<TransportOp> s;
    ASSERT_TRUE(Probe::send(t[0].get(), 1, buffer.data(), 1, &s).isOk());
    EXPECT_TRUE(done(r2.get()));
    EXPECT_EQ(second, 'q');
    EXPECT_EQ(first, 0);
  }
  // A send released before anyone took it: the caller frees its buffer, the message still arrives.
  {
    std::vector<char> buffer(3, 'w');
    std::unique_ptr<TransportOp> s;
    ASSERT_TRUE(Probe::send(t[0].get(), 1, buffer.data(), 3, &s).isOk());
    s.reset();  // ~TransportOp cancels
    buffer.assign(3, 'X');
  }
  char late[3] = {0, 0, 0};
  std::unique_ptr<TransportOp> r3;
  ASSERT_TRUE(Probe::recv(t[1].get(), 0, late, 3, &r3).isOk());
  EXPECT_TRUE(done(r3.get()));
  EXPECT_EQ(std::string(late, 3), "www");
  EXPECT_EQ(fabric->unmatched(), 0u);
}

// Many threads on one fabric: each pair streams numbered messages; every byte lands where it should.
TEST(LoopbackTransportTest, ConcurrentRanksKeepPerLinkOrder) {
  const int n = 6, messages = 200;
  auto t = makeLoopbackTransports(n);
  testing::runRanks(n, [&](int r) {
    std::vector<uint32_t> out(messages), in(messages, 0xFFFFFFFFu);
    std::vector<std::unique_ptr<TransportOp>> ops;
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int i = 0; i < messages; ++i) {
      out[size_t(i)] = uint32_t(r * 100000 + i);
      std::unique_ptr<TransportOp> s, v;
      ASSERT_TRUE(Probe::recv(t[size_t(r)].get(), left, &in[size_t(i)], 4, &v).isOk());
      ASSERT_TRUE(Probe::send(t[size_t(r)].get(), right, &out[size_t(i)], 4, &s).isOk());
      ops.push_back(std::move(s));
      ops.push_back(std::move(v));
    }
    for (auto& op : ops) {
      while (!done(op.get())) std::this_thread::yield();
    }
    for (int i = 0; i < messages; ++i) EXPECT_EQ(in[size_t(i)], uint32_t(left * 100000 + i));
  });
}

}  // namespace
}  // namespace ringguard
