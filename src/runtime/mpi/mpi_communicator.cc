// mpi::createCommunicator: the short form of mpi::createBootstrap + createHostCommunicator
// (ringguard/mpi/mpi_communicator.h). Composition is the runtime's business, so it lives here beside the
// device twin (src/runtime/device/mpi_device_communicator.cc), not in the bootstrap; it compiles into
// ringguard::mpi, the target that has MPI.
#include "ringguard/mpi/mpi_communicator.h"

#include "bootstrap/mpi_bootstrap.h"  // mpi::createBootstrap(MPI_Comm), commFromFortran, mpiSharedMemory
#include "core/env.h"
#include "ringguard/runtime/factories.h"

namespace ringguard {
namespace mpi {

namespace {
// The host factory over a bootstrap of `comm`. The options are checked by the factory, whose agreement
// (agreeToProceed) every rank takes part in: a rank that returned before MPI_Comm_dup here left the
// others in it, and its next communicator's duplicate then matched theirs.
Status createHostCommunicatorOver(MPI_Comm comm, const Options& options, std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Bootstrap> bootstrap;
  RINGGUARD_RETURN_IF_ERROR(createBootstrap(comm, &bootstrap, mpiSharedMemory(envLookup, options.timeout)));
  return createHostCommunicator(*bootstrap, options, out);
}
}  // namespace

Status createCommunicator(const Options& options, std::unique_ptr<Communicator>* out) {
  return createHostCommunicatorOver(MPI_COMM_WORLD, options, out);
}

Status createCommunicator(int64_t fortranComm, const Options& options, std::unique_ptr<Communicator>* out) {
  MPI_Comm comm = MPI_COMM_NULL;
  RINGGUARD_RETURN_IF_ERROR(commFromFortran(fortranComm, &comm));
  return createHostCommunicatorOver(comm, options, out);
}

Status createCommunicator(std::unique_ptr<Communicator>* out) {
  Options options;
  RINGGUARD_RETURN_IF_ERROR(Options::fromEnv(&options));
  return createCommunicator(options, out);
}

}  // namespace mpi
}  // namespace ringguard
