#pragma once
// The bootstrap over an MPI communicator (a duplicate of the caller's, so its collectives never match the
// application's). Private: MPI types stay out of the public headers; users name a communicator by its
// Fortran handle (ringguard/mpi/mpi_communicator.h), which commFromFortran below turns back into one.
#include <mpi.h>

#include <cstdint>
#include <memory>

#include "ringguard/bootstrap/bootstrap.h"

namespace ringguard {

class MpiBootstrap final : public Bootstrap {
 public:
  // Duplicates `comm`; MPI must be initialised.
  static Status create(MPI_Comm comm, std::unique_ptr<Bootstrap>* out);
  ~MpiBootstrap() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status broadcast(int root, std::vector<uint8_t>* bytes) override;
  Status allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) override;
  Status createHostTransport(std::unique_ptr<Transport>* out) override;

 private:
  MpiBootstrap(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}

  MPI_Comm comm_;
  int rank_;
  int size_;
};

namespace mpi {

// mpi::createBootstrap over any communicator (the torch process group's sub-groups): MPI initialised first
// (mpi::ensureInitialized), then MpiBootstrap::create. Collective over `comm`.
Status createBootstrap(MPI_Comm comm, std::unique_ptr<Bootstrap>* out);

// The communicator behind a Fortran handle (what MPI_Comm_c2f gave the caller), MPI initialised first
// (mpi::ensureInitialized). kInvalidArgument for a value no MPI_Fint holds, for MPI_COMM_NULL (a rank left
// out by MPI_Comm_split) and, where the MPI library can tell, for a handle it never issued.
Status commFromFortran(int64_t fortranComm, MPI_Comm* out);

}  // namespace mpi

}  // namespace ringguard
