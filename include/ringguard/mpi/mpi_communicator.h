#pragma once
// Creating a communicator over MPI (host memory). This header is the MPI layer's own: it exposes MPI types.
#include <mpi.h>

#include <memory>

#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {
namespace mpi {

// Initialises MPI with MPI_THREAD_MULTIPLE unless the application already did (then it must have asked
// for MPI_THREAD_MULTIPLE: the progress thread calls MPI while the application may too). MPI initialised
// here is finalised at process exit.
Status ensureInitialized();

// A communicator over a duplicate of `comm` (MPI_Comm_dup, MPI_ERRORS_RETURN on the copies), so our
// traffic never matches the application's. Collective over `comm`.
Status createCommunicator(MPI_Comm comm, const Options& options, std::unique_ptr<Communicator>* out);

// Same over MPI_COMM_WORLD with Options::fromEnv().
Status createCommunicator(std::unique_ptr<Communicator>* out);

}  // namespace mpi
}  // namespace ringguard
