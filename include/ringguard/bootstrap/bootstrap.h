#pragma once
// How the ranks of a future communicator find each other before it exists: rank, size, a few small
// exchanges (a unique id from a root, agreement on a setting) and the host transport of the group. The
// runtime's factories (ringguard/runtime/factories.h) build every communicator from one; implementations
// live with what they bootstrap from: MPI (mpi::createBootstrap, ringguard/mpi/mpi_communicator.h) and, in
// the torch layer, a c10d Store. As NCCL's bootstrap.cc, nothing here is verified: it carries only what
// ranks need to open verified channels, and runs before any collective.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

// The data-plane interface (src/transport/transport.h): internal, so only named here. Callers hand a
// Bootstrap to the factories, which call createHostTransport; implementing one is the library's business.
class Transport;

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Root's `bytes` replace every other rank's (whose size need not match). Collective.
  virtual Status broadcast(int root, std::vector<uint8_t>* bytes) = 0;
  // Every rank's `mine` (small: a host name, a GPU id), in rank order. Collective.
  virtual Status allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) = 0;
  // A fresh host transport over these ranks (data plane and control channel). Collective where the
  // implementation needs it (MPI duplicates its communicator); call it on every rank the same number of
  // times.
  virtual Status createHostTransport(std::unique_ptr<Transport>* out) = 0;
};

// Whether every rank can go on making the communicator: each passes its own verdict (`mine`: the options it
// validated, the device it needs), and every rank returns the same answer, OK when all are, else the error
// of the lowest failing rank as "rank R: ..." (a failing rank returns its own `mine` unchanged). A rank that
// failed on its own and left would keep the others waiting in the next collective step (MPI's have no
// timeout); it takes part in this one instead. Collective over `bootstrap`.
Status agreeToProceed(Bootstrap& bootstrap, const Status& mine);

// This rank's index among the ranks of its host (by host name) and how many ranks that host runs.
// Collective over `bootstrap`.
Status nodeLocalRank(Bootstrap& bootstrap, int* localRank, int* localSize);

}  // namespace ringguard
