#pragma once
// A host transport over the point-to-point send/recv of any c10d::Backend (torch's Gloo in practice): how
// CPU tensors move under torchrun, where there is no MPI. Payload and trailer ride as uint8 tensors over our
// own memory (no copies); control messages travel in fixed-size frames. See docs/design/protocol.md,
// "c10d transport".
//
// Gloo's works cannot be polled (only waited, and a timed-out wait closes every pair of the context), so a
// waiter thread per (peer, direction) waits each posted work in post order with a wait that never expires,
// and sets the flag TransportOp::test reads. Deadlines stay ours: the progress thread's timeouts decide,
// and markBroken() aborts every pending wait.
//
// The transport's public entry, for the torch layer's Store bootstrap: it names torch types, so it is not
// installed (as ringguard/torch/ is not), and Transport only by a declaration.
#include <memory>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "ringguard/core/status.h"

namespace ringguard {

// The data-plane interface (src/transport/transport.h): internal, so only named here.
class Transport;

// `backend` spans the same ranks as the communicator (its rank and size are ours). Tags
// [tagBase, tagBase + 3) of the backend are this transport's: give each transport over one backend its own
// base. Not collective; the first message to a peer connects lazily as Gloo does.
Status createC10dTransport(c10::intrusive_ptr<c10d::Backend> backend, int tagBase,
                           std::unique_ptr<Transport>* out);

}  // namespace ringguard
