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
#include <vector>

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

// Even and odd world ranks in two halves (MPI_Comm_split, keyed by world rank): half p = worldRank() % 2
// holds world ranks p, p + 2, ..., halfMembers() = ceil((N - p) / 2) of them.
inline MPI_Comm splitByParity() {
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, worldRank() % 2, worldRank(), &half);
  return half;
}
inline int halfMembers() { return (worldSize() - worldRank() % 2 + 1) / 2; }

// World rank r contributes r + 1 + (i mod 5) at index i...
inline std::vector<float> halfInput(size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = float(worldRank() + 1 + int(i % 5));
  return v;
}
// ... so the sum over half p (world ranks p + 2k, k < m) is m (p + 1) + m (m - 1) + m (i mod 5): integer
// valued (exact in any order) and, at 2 to 4 ranks, different from the world's sum and from the other
// half's at every index.
inline float halfSum(size_t i) {
  const int p = worldRank() % 2, m = halfMembers();
  return float(m * (p + 1) + m * (m - 1) + m * int(i % 5));
}

}  // namespace testing
}  // namespace ringguard
