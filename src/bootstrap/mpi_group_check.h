#pragma once
// Whether a group of world ranks can run over MPI_COMM_WORLD from this process, decided without MPI (the
// caller reads the world's size and its rank), so that the rule is tested on CI.
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {
namespace mpi {

// `worldRanks` (group rank i is world rank worldRanks[i]; empty: the identity over `groupSize` ranks) against
// a world of `worldSize` processes of which this is `worldRank`, as group rank `groupRank`. A group rank
// outside the world (a launcher such as torchrun starts each rank as an MPI job of its own) and a group whose
// ranks are not MPI's are kInvalidArgument naming both and what to do.
Status checkGroupInWorld(const std::vector<int>& worldRanks, int groupRank, int groupSize, int worldRank,
                         int worldSize);

}  // namespace mpi
}  // namespace ringguard
