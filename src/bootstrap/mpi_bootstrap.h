#pragma once
// The bootstrap over an MPI communicator (a duplicate of the caller's, so its collectives never match the
// application's). Private: MPI types stay out of the public headers; users name a communicator by its
// Fortran handle (ringguard/mpi/mpi_communicator.h), which commFromFortran below turns back into one.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/settings.h"
#include "transport/shm/shm_transport.h"

namespace ringguard {

class MpiBootstrap final : public Bootstrap {
 public:
  // Duplicates `comm`; MPI must be initialised. With `sharedMemory`, the host transport is connected
  // through shared memory as that says (connectSharedMemory: collective).
  static Status create(MPI_Comm comm, std::optional<SharedMemoryChoice> sharedMemory,
                       std::unique_ptr<Bootstrap>* out);
  ~MpiBootstrap() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status broadcast(int root, std::vector<uint8_t>* bytes) override;
  Status allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override;
  Status createHostTransport(std::unique_ptr<Transport>* out) override;

 private:
  MpiBootstrap(MPI_Comm comm, int rank, int size, std::optional<SharedMemoryChoice> sharedMemory)
      : comm_(comm), rank_(rank), size_(size), sharedMemory_(std::move(sharedMemory)) {}

  MPI_Comm comm_;
  int rank_;
  int size_;
  const std::optional<SharedMemoryChoice> sharedMemory_;
};

namespace mpi {

// RINGGUARD_CPU_TRANSPORT (through `lookup`) for a group over MPI: auto connects through shared memory when
// every rank can map every other's segment (else MPI carries everything), shm insists on it, mpi keeps MPI
// alone; gloo (the torch backend's Gloo helper) and values that do not parse come back in `invalid`, which
// connectSharedMemory publishes so that every rank fails with it. `timeout`: the communicator's. The waits
// poll for kMpiPollBeforeBlocking before they sleep: under mpirun each rank owns a core, and MPI's own waits
// poll.
inline constexpr std::chrono::microseconds kMpiPollBeforeBlocking{50};
SharedMemoryChoice mpiSharedMemory(const SettingLookup& lookup, std::chrono::milliseconds timeout);

// mpi::createBootstrap over any communicator (the torch process group's sub-groups): MPI initialised first
// (mpi::ensureInitialized), then MpiBootstrap::create. Collective over `comm`. Without `sharedMemory`, its
// host transport reads RINGGUARD_CPU_TRANSPORT and the timeout from the environment when it is made.
Status createBootstrap(MPI_Comm comm, std::unique_ptr<Bootstrap>* out,
                       std::optional<SharedMemoryChoice> sharedMemory = std::nullopt);

// This process's rank and the size of MPI_COMM_WORLD, MPI initialised first (mpi::ensureInitialized).
Status worldPosition(int* rank, int* size);

// mpi::createBootstrap over exactly `worldRanks` (ranks of MPI_COMM_WORLD, in the group's order):
// MPI_Comm_create_group, collective over those ranks only (as torch's new_group is over its members), on a
// communicator of its own that the bootstrap duplicates and this frees. Every rank must be in the world.
Status createGroupBootstrap(const std::vector<int>& worldRanks, std::unique_ptr<Bootstrap>* out,
                            std::optional<SharedMemoryChoice> sharedMemory);

// The communicator behind a Fortran handle (what MPI_Comm_c2f gave the caller), MPI initialised first
// (mpi::ensureInitialized). kInvalidArgument for a value no MPI_Fint holds, for MPI_COMM_NULL (a rank left
// out by MPI_Comm_split) and, where the MPI library can tell, for a handle it never issued.
Status commFromFortran(int64_t fortranComm, MPI_Comm* out);

}  // namespace mpi

}  // namespace ringguard
