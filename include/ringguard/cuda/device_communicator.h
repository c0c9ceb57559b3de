#pragma once
// Device communicators over MPI: the short form of mpi::createBootstrap + cuda::createDeviceCommunicator
// (ringguard/runtime/device_factory.h). This header joins the device and MPI layers; like
// ringguard/mpi/mpi_communicator.h it names no MPI type and works over MPI_COMM_WORLD.
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

}  // namespace cuda
}  // namespace ringguard
