#pragma once
// The one place that builds communicators: a bootstrap (MPI, c10d Store, ...) gives the ranks and the host
// transport, these compose it with an executor. Device communicators: ringguard/runtime/device_factory.h.
#include <memory>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {

// A communicator over host memory on `bootstrap`'s host transport. Collective over `bootstrap`.
Status createHostCommunicator(Bootstrap& bootstrap, const Options& options,
                              std::unique_ptr<Communicator>* out);

}  // namespace ringguard
