#pragma once
// What the mpirun suites share: ranks, the verifiable inputs of tests/unit/verifiable.h (small integer
// values, so every partial sum and product is exact and order-independent), a communicator over
// MPI_COMM_WORLD, sums of counters over the ranks.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "../unit/verifiable.h"
#include "ringguard/mpi/mpi_communicator.h"

namespace ringguard {
namespace testing {

inline int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int worldSize() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// RINGGUARD_TEST_SMOKE=1: the suite runs a subset (the np 5 entries).
inline bool smoke() {
  const char* s = std::getenv("RINGGUARD_TEST_SMOKE");
  return s && std::string(s) == "1";
}

inline std::unique_ptr<Communicator> makeComm(const Options& options) {
  std::unique_ptr<Communicator> comm;
  Status st = mpi::createCommunicator(options, &comm);
  if (!st.isOk()) {
    fprintf(stderr, "createCommunicator: %s\n", st.toString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return comm;
}

// Sum of a counter over all ranks.
inline uint64_t sumOverRanks(uint64_t v) {
  uint64_t out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

}  // namespace testing
}  // namespace ringguard
