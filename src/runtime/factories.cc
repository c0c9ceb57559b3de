#include "ringguard/runtime/factories.h"

#include "runtime/make_communicator.h"
#include "transport/transport.h"

namespace ringguard {

Status createHostCommunicator(Bootstrap& bootstrap, const Options& options,
                              std::unique_ptr<Communicator>* out) {
  // Every rank learns of one whose options are invalid, instead of waiting for it in the transport's setup.
  RINGGUARD_RETURN_IF_ERROR(agreeToProceed(bootstrap, options.validateFor(bootstrap.size())));
  std::unique_ptr<Transport> transport;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.createHostTransport(&transport));
  *out = makeCommunicator(std::move(transport), options);
  return Status::ok();
}

}  // namespace ringguard
