#include "ringguard/mpi/mpi_communicator.h"

#include <cstdlib>
#include <string>

#include "transport/mpi/mpi_check.h"
#include "transport/mpi/mpi_transport.h"

namespace ringguard {
namespace mpi {

namespace {
void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
}  // namespace

Status ensureInitialized() {
  int initialized = 0;
  RINGGUARD_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = 0;
  if (!initialized) {
    RINGGUARD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::atexit(finalizeAtExit);
  } else {
    RINGGUARD_MPI_CHECK(MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    return Status(StatusCode::kInvalidArgument,
                  "MPI provides thread level " + std::to_string(provided) +
                      "; ringguard needs MPI_THREAD_MULTIPLE (initialise MPI with MPI_Init_thread)");
  }
  return Status::ok();
}

Status createCommunicator(MPI_Comm comm, const Options& options, std::unique_ptr<Communicator>* out) {
  RINGGUARD_RETURN_IF_ERROR(options.validate());
  RINGGUARD_RETURN_IF_ERROR(ensureInitialized());
  std::unique_ptr<Transport> transport;
  RINGGUARD_RETURN_IF_ERROR(MpiTransport::create(comm, &transport));
  out->reset(new Communicator(std::move(transport), options));
  return Status::ok();
}

Status createCommunicator(std::unique_ptr<Communicator>* out) {
  Options options;
  RINGGUARD_RETURN_IF_ERROR(Options::fromEnv(&options));
  return createCommunicator(MPI_COMM_WORLD, options, out);
}

}  // namespace mpi
}  // namespace ringguard
