// withSharedMemory (ringguard/bootstrap/host_bootstrap.h): a bootstrap that hands out its inner one's host
// transport connected through shared memory, so the bootstrap that owns the exchanges (the c10d Store's)
// need not know the shared-memory transport.
#include <utility>

#include "ringguard/bootstrap/host_bootstrap.h"
#include "transport/shm/shm_transport.h"

namespace ringguard {

namespace {

class SharedMemoryBootstrap final : public Bootstrap {
 public:
  SharedMemoryBootstrap(Bootstrap& inner, SharedMemoryChoice choice)
      : inner_(inner), choice_(std::move(choice)) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Status broadcast(int root, std::vector<uint8_t>* bytes) override { return inner_.broadcast(root, bytes); }
  Status allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override {
    return inner_.allgather(mine, all);
  }
  Status createHostTransport(std::unique_ptr<Transport>* out) override {
    RINGGUARD_RETURN_IF_ERROR(inner_.createHostTransport(out));
    return connectSharedMemory(*this, choice_, out);
  }

 private:
  Bootstrap& inner_;
  const SharedMemoryChoice choice_;
};

}  // namespace

std::unique_ptr<Bootstrap> withSharedMemory(Bootstrap& inner, const SettingLookup& lookup,
                                            const std::string& offSetting,
                                            std::chrono::milliseconds timeout) {
  return std::make_unique<SharedMemoryBootstrap>(inner, readSharedMemoryChoice(lookup, offSetting, timeout));
}

}  // namespace ringguard
