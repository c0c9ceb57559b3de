// A consumer of one layer's target, ringguard::runtime (ctest: install_consumer builds it): the host factory
// over a bootstrap of the consumer's own links with nothing else named, the layers under the runtime coming
// with it. The bootstrap has no host transport to give (a consumer cannot make one), so the factory must run
// its agreement and then return that error.
#include <ringguard/bootstrap/bootstrap.h>
#include <ringguard/core/options.h>
#include <ringguard/core/status.h>
#include <ringguard/runtime/communicator.h>
#include <ringguard/runtime/factories.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

namespace {

class OneRankBootstrap final : public ringguard::Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  ringguard::Status broadcast(int, std::vector<uint8_t>*) override { return ringguard::Status::ok(); }
  ringguard::Status allgather(const std::vector<uint8_t>& mine,
                              std::vector<std::vector<uint8_t>>* all) override {
    all->assign(1, mine);
    return ringguard::Status::ok();
  }
  ringguard::Status createHostTransport(std::unique_ptr<ringguard::Transport>*) override {
    return ringguard::Status(ringguard::StatusCode::kTransportError, "consumer: no host transport");
  }
};

}  // namespace

int main() {
  OneRankBootstrap bootstrap;
  std::unique_ptr<ringguard::Communicator> comm;
  const ringguard::Status st = ringguard::createHostCommunicator(bootstrap, ringguard::Options(), &comm);
  if (st.code() != ringguard::StatusCode::kTransportError || st.message() != "consumer: no host transport") {
    std::fprintf(stderr, "ringguard runtime consumer: expected the bootstrap's error, got %s\n",
                 st.toString().c_str());
    return 1;
  }
  std::printf("ringguard runtime consumer: createHostCommunicator returned the bootstrap's error\n");
  return 0;
}
