#pragma once
// Bootstrapping from MPI, and the host communicator over it, for programs launched by mpirun. No MPI type
// here (the API stays free of third-party headers): the plain forms work over MPI_COMM_WORLD, and a
// sub-communicator is named by its Fortran handle, an integer (the caller passes MPI_Comm_c2f(comm)). The
// communicators themselves are built by the runtime's factories (ringguard/runtime/factories.h);
// createCommunicator below is the short form of createBootstrap + createHostCommunicator that most MPI
// programs want.
#include <cstdint>
#include <memory>
#include <string>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {
namespace mpi {

// Initialises MPI with MPI_THREAD_MULTIPLE unless the application already did (then it must have asked
// for MPI_THREAD_MULTIPLE: the progress thread calls MPI while the application may too). MPI initialised
// here is finalised at process exit, unless safeToFinalize() says no: then the exit handler logs why and
// calls MPI_Abort(MPI_COMM_WORLD, kAbortExitCode), ending the whole job.
Status ensureInitialized();

// The exit code of that MPI_Abort.
constexpr int kAbortExitCode = 70;

// False once a failed collective (timeout, a stopped or departed peer, an error mid-transfer) left an MPI
// request of ringguard's in flight, or a collective over MPI timed out (a rank stopped making progress);
// `why` then names the first. MPI_Finalize is not safe after that: it may wait forever for the stopped
// peer or crash. An application that initialised MPI itself ends the job
// with MPI_Abort instead of MPI_Finalize when this is false. Never turns true again in a process.
bool safeToFinalize(std::string* why = nullptr);

// A bootstrap over a duplicate of MPI_COMM_WORLD (MPI initialised first, as above): its host transport is
// the MPI transport. Collective over MPI_COMM_WORLD.
Status createBootstrap(std::unique_ptr<Bootstrap>* out);

// The same over a duplicate of any communicator: the caller passes MPI_Comm_c2f(comm). kInvalidArgument
// (before any collective) for MPI_COMM_NULL, which MPI_Comm_split gives the ranks it leaves out, or a
// handle that names no communicator. Collective over `comm`.
Status createBootstrap(int64_t fortranComm, std::unique_ptr<Bootstrap>* out);

// A communicator over a duplicate of MPI_COMM_WORLD (MPI_Comm_dup, MPI_ERRORS_RETURN on the copies), so our
// traffic never matches the application's. Collective over MPI_COMM_WORLD.
Status createCommunicator(const Options& options, std::unique_ptr<Communicator>* out);

// The same over a duplicate of any communicator: the caller passes MPI_Comm_c2f(comm) (errors as for
// createBootstrap(fortranComm, ...)). Collective over `comm`.
Status createCommunicator(int64_t fortranComm, const Options& options, std::unique_ptr<Communicator>* out);

// Same with Options::fromEnv().
Status createCommunicator(std::unique_ptr<Communicator>* out);

}  // namespace mpi
}  // namespace ringguard
