#pragma once
// Device communicators over MPI: the short form of mpi::createBootstrap + cuda::createDeviceCommunicator
// (ringguard/runtime/device_factory.h). This header joins the device and MPI layers: it exposes MPI types.
#include <mpi.h>

#include <memory>

#include "ringguard/core/options.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/device_factory.h"

namespace ringguard {
namespace cuda {

// A device communicator (see createDeviceCommunicator(Bootstrap&, ...)) over a duplicate of `comm`.
// Collective over `comm`.
Status createDeviceCommunicator(MPI_Comm comm, const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out);

}  // namespace cuda
}  // namespace ringguard
