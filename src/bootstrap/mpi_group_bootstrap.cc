// mpi::createHostGroupBootstrap (ringguard/mpi/group_bootstrap.h): the group checked against the world,
// then MpiBootstrap over exactly its ranks.
#include "bootstrap/mpi_bootstrap.h"
#include "bootstrap/mpi_group_check.h"
#include "ringguard/mpi/group_bootstrap.h"

namespace ringguard {
namespace mpi {

Status createHostGroupBootstrap(const std::vector<int>& worldRanks, int groupRank, int groupSize,
                                const SettingLookup& lookup, std::chrono::milliseconds timeout,
                                std::unique_ptr<Bootstrap>* out) {
  int worldRank = -1, worldSize = 0;
  RINGGUARD_RETURN_IF_ERROR(worldPosition(&worldRank, &worldSize));
  RINGGUARD_RETURN_IF_ERROR(checkGroupInWorld(worldRanks, groupRank, groupSize, worldRank, worldSize));
  std::vector<int> ranks = worldRanks;
  if (ranks.empty()) {
    for (int r = 0; r < groupSize; ++r) ranks.push_back(r);
  }
  return createGroupBootstrap(ranks, out, mpiSharedMemory(lookup, timeout));
}

}  // namespace mpi
}  // namespace ringguard
