#include "bootstrap/mpi_group_check.h"

#include <algorithm>
#include <string>

namespace ringguard {
namespace mpi {

Status checkGroupInWorld(const std::vector<int>& worldRanks, int groupRank, int groupSize, int worldRank,
                         int worldSize) {
  std::vector<int> ranks = worldRanks;
  if (ranks.empty()) {
    for (int r = 0; r < groupSize; ++r) ranks.push_back(r);
  }
  const int highest = ranks.empty() ? -1 : *std::max_element(ranks.begin(), ranks.end());
  if (highest >= worldSize) {  // every rank of the group sees this, whatever its own rank
    return Status(StatusCode::kInvalidArgument,
                  "the group has torch rank " + std::to_string(highest) + " but MPI_COMM_WORLD has " +
                      std::to_string(worldSize) + " process" + (worldSize == 1 ? "" : "es") +
                      ": RINGGUARD_CPU_TRANSPORT=mpi needs the job started by mpirun (a launcher such as "
                      "torchrun starts each rank as an MPI job of its own); set RINGGUARD_CPU_TRANSPORT=gloo "
                      "or auto");
  }
  if (int(ranks.size()) != groupSize || ranks[size_t(groupRank)] != worldRank) {
    return Status(StatusCode::kInvalidArgument,
                  "group rank " + std::to_string(groupRank) + " is torch rank " +
                      std::to_string(ranks.size() == size_t(groupSize) ? ranks[size_t(groupRank)] : -1) +
                      " but MPI rank " + std::to_string(worldRank) +
                      ": under mpirun torch's ranks must be MPI's (call ringguard.init_from_mpi() before "
                      "init_process_group), or set RINGGUARD_CPU_TRANSPORT=gloo");
  }
  return Status::ok();
}

}  // namespace mpi
}  // namespace ringguard
