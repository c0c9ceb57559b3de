#pragma once
// Device communicators over MPI: the short form of mpi::createBootstrap + cuda::createDeviceCommunicator
// (ringguard/runtime/device_factory.h). This header joins the device and MPI layers (ringguard::device has
// it when the build has MPI); like ringguard/mpi/mpi_communicator.h it names no MPI type: MPI_COMM_WORLD,
// or a sub-communicator by its Fortran handle (the caller passes MPI_Comm_c2f(comm)).
#include <cstdint>
#include <memory>

#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/device_factory.h"

namespace ringguard {
namespace cuda {

// A device communicator (see createDeviceCommunicator(Bootstrap&, ...)) over a duplicate of MPI_COMM_WORLD.
// Collective over MPI_COMM_WORLD.
Status createDeviceCommunicator(const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out);

// The same over a duplicate of any communicator: the caller passes MPI_Comm_c2f(comm) (errors as for
// mpi::createBootstrap(fortranComm, ...)). Collective over `comm`.
Status createDeviceCommunicator(int64_t fortranComm, const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out);

}  // namespace cuda
}  // namespace ringguard
