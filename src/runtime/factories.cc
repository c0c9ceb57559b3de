#include "ringguard/runtime/factories.h"

namespace ringguard {

Status createHostCommunicator(Bootstrap& bootstrap, const Options& options,
                              std::unique_ptr<Communicator>* out) {
  RINGGUARD_RETURN_IF_ERROR(options.validateFor(bootstrap.size()));
  std::unique_ptr<Transport> transport;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.createHostTransport(&transport));
  out->reset(new Communicator(std::move(transport), options));
  return Status::ok();
}

}  // namespace ringguard
