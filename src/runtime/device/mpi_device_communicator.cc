#include "ringguard/cuda/device_communicator.h"
#include "ringguard/mpi/mpi_communicator.h"

namespace ringguard {
namespace cuda {

Status createDeviceCommunicator(const Options& options, const DeviceOptions& device,
                                std::unique_ptr<Communicator>* out) {
  RINGGUARD_RETURN_IF_ERROR(options.validate());
  std::unique_ptr<Bootstrap> bootstrap;
  RINGGUARD_RETURN_IF_ERROR(mpi::createBootstrap(&bootstrap));
  return createDeviceCommunicator(*bootstrap, options, device, out);
}

}  // namespace cuda
}  // namespace ringguard
