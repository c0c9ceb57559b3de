#pragma once
// The replica check's collectives over a ringguard Communicator (C++ training binaries: the gradient
// aggregator's communicator): a verified all-gather of the fingerprints and a verified broadcast of the
// tensors a repair sends.
#include <memory>

#include "ringguard/replicas/replica_check.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {

// The fingerprints travel over `host` (a host communicator: they are host words); the tensors a repair
// sends over `host` when they are host memory and over `device` (a device communicator of the same ranks,
// the stream passed on) when they are device memory. Both must outlive the exchange; `device` may be null
// when every tensor is host memory.
std::unique_ptr<ReplicaExchange> makeCommunicatorExchange(Communicator* host, Communicator* device = nullptr);

}  // namespace ringguard
