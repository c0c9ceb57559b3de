#include "ringguard/runtime/mpi_device_communicator.h"

#include "bootstrap/mpi_bootstrap.h"  // mpi::createBootstrap(MPI_Comm), commFromFortran
#include "core/env.h"

namespace ringguard {
namespace cuda {

namespace {
// The device factory over a bootstrap of `comm`. The options are checked by the factory, whose agreement
// (agreeToProceed) every rank takes part in, as for mpi::createCommunicator: a rank that returned before
// MPI_Comm_dup here would leave the others in it.
Status createDeviceCommunicatorOver(MPI_Comm comm, const Options& options, const DeviceOptions& device,
                                    std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Bootstrap> bootstrap;
  RINGGUARD_RETURN_IF_ERROR(
      mpi::createBootstrap(comm, &bootstrap, mpi::mpiSharedMemory(envLookup, options.timeout)));
  return createDeviceCommunicator(*bootstrap, options, device, out);
}
}  // namespace

Status createDeviceCommunicator(const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out) {
  return createDeviceCommunicatorOver(MPI_COMM_WORLD, options, device, out);
}

Status createDeviceCommunicator(int64_t fortranComm, const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out) {
  MPI_Comm comm = MPI_COMM_NULL;
  RINGGUARD_RETURN_IF_ERROR(mpi::commFromFortran(fortranComm, &comm));
  return createDeviceCommunicatorOver(comm, options, device, out);
}

}  // namespace cuda
}  // namespace ringguard
