#pragma once
// The bootstrap of a group of MPI_COMM_WORLD's ranks for its host communicator, as the torch backend's groups
// take it under mpirun: no MPI type here (the group is a list of world ranks).
#include <chrono>
#include <memory>
#include <vector>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/settings.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace mpi {

// Group rank i is world rank worldRanks[i] (empty: the world's first groupSize ranks in order); this process
// must be group rank `groupRank`. A group that does not fit the world, or whose ranks are not this process's
// MPI rank, is kInvalidArgument on every rank, saying how to start the job. Then MPI_Comm_create_group:
// collective over the group's ranks only (as torch's new_group is over its members). The host transport
// goes through shared memory as RINGGUARD_CPU_TRANSPORT (through `lookup`; auto when the ranks share a host,
// shm insists, mpi keeps MPI alone) says; `timeout`: the communicator's.
Status createHostGroupBootstrap(const std::vector<int>& worldRanks, int groupRank, int groupSize,
                                const SettingLookup& lookup, std::chrono::milliseconds timeout,
                                std::unique_ptr<Bootstrap>* out);

}  // namespace mpi
}  // namespace ringguard
