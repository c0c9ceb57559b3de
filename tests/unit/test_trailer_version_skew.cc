// Issue 17, defect 7: a trailer of another format version (ranks of two builds that passed the handshake)
// ends the collective with "protocol version mismatch", not "malformed trailer": the verdict code travels
// between ranks (kVersionSkew, accepted from peers up to kLastSliceCheck).
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>

#include "loopback_util.h"

namespace ringguard {
namespace {

// Rank 1 of another build: every trailer it sends is intact, in format version 2 ("RGT2"). A test transport
// of our own over the loopback one (no MPI, NCCL, torch or Gloo involved).
class SkewedTransport final : public Transport {
 public:
  explicit SkewedTransport(std::unique_ptr<Transport> inner)
      : Transport(inner->rank(), inner->size()), inner_(std::move(inner)) {}
  const char* name() const override { return "skewed"; }
  ControlChannel* control() override { return inner_->control(); }

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override {
    if (channel == Channel::kTrailer) {
      auto t = std::make_unique<Trailer>(*static_cast<const Trailer*>(data));
      t->magic = kTrailerMagicFamily | (uint32_t('2') << 24);
      sealTrailer(t.get());
      data = t.get();
      sent_.push_back(std::move(t));  // alive until the transport goes: the send may complete later
    }
    return innerPostSend(inner_.get(), peer, channel, data, bytes, out);
  }
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override {
    return innerPostRecv(inner_.get(), peer, channel, data, bytes, out);
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::deque<std::unique_ptr<Trailer>> sent_;
};

TEST(TrailerVersionSkew, ACollectiveEndsInProtocolVersionMismatchOnEveryRank) {
  const int n = 2;
  auto transports = makeLoopbackTransports(n);
  transports[1] = std::make_unique<SkewedTransport>(std::move(transports[1]));
  Options o;
  o.sliceBytes = 256;
  o.maxRetries = 1;
  o.timeout = std::chrono::milliseconds(20000);
  o.logLevel = "off";
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : transports) comms.push_back(makeCommunicator(std::move(t), o));
  const size_t count = 100;
  std::vector<Status> got{size_t(n)};
  testing::runRanks(n, [&](int r) {
    std::vector<uint8_t> in = testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, count),
                         res(in.size());
    got[size_t(r)] =
        comms[size_t(r)]->allreduce(in.data(), res.data(), count, DataType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < n; ++r) {
    const Status& st = got[size_t(r)];
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << "rank " << r << ": " << st.toString();
    EXPECT_NE(st.message().find("link 1 -> 0"), std::string::npos) << "rank " << r << ": " << st.toString();
    EXPECT_NE(st.message().find(": protocol version mismatch: a trailer of another format version (ranks of "
                                "different ringguard builds)"),
              std::string::npos)
        << "rank " << r << ": " << st.toString();
    EXPECT_EQ(st.message().find("malformed trailer"), std::string::npos)
        << "rank " << r << ": " << st.toString();
  }
}

}  // namespace
}  // namespace ringguard
