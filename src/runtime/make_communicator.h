#pragma once
// The runtime's private constructor of communicators: from a transport and an executor, the internal types
// that the public factories (ringguard/runtime/factories.h, device_factory.h) keep out of the API. Used by
// those factories and by the tests that run communicators over in-process transports.
#include <memory>

#include "executor/executor.h"
#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"
#include "runtime/direct_path.h"
#include "transport/transport.h"

namespace ringguard {

// Takes ownership of the transport and starts the progress thread. `options` must be valid. Without an
// executor, buffers are host memory (HostExecutor). `resources` (pools, streams the executor and the
// transport use) are released last, after the transport and the executor.
// `direct` (may be null) takes the collectives it accepts without host work (runtime/direct_path.h).
std::unique_ptr<Communicator> makeCommunicator(std::unique_ptr<Transport> transport, const Options& options,
                                               std::unique_ptr<Executor> executor = nullptr,
                                               std::shared_ptr<void> resources = nullptr,
                                               std::unique_ptr<DirectPath> direct = nullptr);

}  // namespace ringguard
