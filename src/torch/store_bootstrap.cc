#include "torch/store_bootstrap.h"

#include <exception>

#include "ringguard/transport/c10d_transport.h"

namespace ringguard {

namespace {
// The Store throws (a timeout, a closed connection); the factories want a Status.
template <typename F>
Status storeCall(const char* what, F&& f) {
  try {
    f();
    return Status::ok();
  } catch (const std::exception& e) {
    return Status(StatusCode::kTransportError, std::string("c10d Store ") + what + ": " + e.what());
  }
}
}  // namespace

StoreBootstrap::StoreBootstrap(c10::intrusive_ptr<c10d::Store> store,
                               c10::intrusive_ptr<c10d::Backend> backend, std::string prefix, int tagBase)
    : store_(std::move(store)),
      backend_(std::move(backend)),
      prefix_(std::move(prefix)),
      tagBase_(tagBase),
      rank_(backend_->getRank()),
      size_(backend_->getSize()) {}

std::string StoreBootstrap::nextKey() { return prefix_ + "/" + std::to_string(exchanges_++); }

Status StoreBootstrap::broadcast(int root, std::vector<uint8_t>* bytes) {
  const std::string key = nextKey();
  if (rank_ == root) return storeCall("set", [&] { store_->set(key, *bytes); });
  return storeCall("get", [&] { *bytes = store_->get(key); });
}

Status StoreBootstrap::allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) {
  const std::string key = nextKey() + "/";
  RINGGUARD_RETURN_IF_ERROR(storeCall("set", [&] { store_->set(key + std::to_string(rank_), mine); }));
  all->assign(size_t(size_), {});
  return storeCall("get", [&] {
    for (int r = 0; r < size_; ++r) (*all)[size_t(r)] = store_->get(key + std::to_string(r));
  });
}

Status StoreBootstrap::createHostTransport(std::unique_ptr<Transport>* out) {
  if (transportMade_) {
    return Status(StatusCode::kInternal, "StoreBootstrap: its tag range already carries a host transport");
  }
  transportMade_ = true;
  return createC10dTransport(backend_, tagBase_, out);
}

}  // namespace ringguard
