#pragma once
// Which bootstrap carries a group's host (CPU) communicator, as the torch backend picks it: MPI when
// mpirun started the job (or RINGGUARD_CPU_TRANSPORT=mpi asks for it), else the group's own exchanges (the
// c10d Store) with a host transport that goes through shared memory where the ranks share a host. The
// choice and its agreement across ranks live here, beside the bootstraps; the caller makes the bootstrap
// chosen (the Store's is the torch layer's; MPI's: ringguard/mpi/group_bootstrap.h).
#include <chrono>
#include <memory>
#include <string>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/settings.h"
#include "ringguard/core/status.h"

namespace ringguard {

enum class HostBootstrapKind {
  kStore,  // the caller's exchanges, host transport through shared memory as RINGGUARD_CPU_TRANSPORT says
  kMpi,    // MPI over the group's world ranks
};

// Whether an MPI launcher started this process: Open MPI's OMPI_COMM_WORLD_SIZE or a PMI launcher's
// PMI_SIZE is in the environment.
bool startedByMpirun();

// RINGGUARD_CPU_TRANSPORT through `lookup`: mpi is kMpi, auto is kMpi when `underMpirun` and `haveMpi` (the
// build has MPI), every other value kStore. A value that does not parse is kStore too: the Store's setup
// publishes the error to every rank (withSharedMemory). kInvalidArgument for mpi in a build without MPI.
Status chooseHostBootstrap(const SettingLookup& lookup, bool underMpirun, bool haveMpi,
                           HostBootstrapKind* out);

// Under mpirun, RINGGUARD_CPU_TRANSPORT picks between two setups (over MPI or over the Store), and ranks
// whose values differ would each wait in the other's, MPI's without a timeout. So before either, the ranks
// compare their values (as parsed, or the text that does not parse) in one allgather over `exchange` (the
// Store's: bounded by its timeout). A difference is kInvalidArgument on every rank naming both values;
// a failed exchange keeps its code, its message saying what was compared. Collective over `exchange`.
Status agreeOnCpuTransport(Bootstrap& exchange, const SettingLookup& lookup);

// `inner`, whose host transport is connected through shared memory as RINGGUARD_CPU_TRANSPORT and
// RINGGUARD_SHM_RING_BYTES (through `lookup`) say: `offSetting` (the value that keeps inner's transport) is
// off, shm insists, every other value tries. Exchanges go to `inner`, which must outlive the result;
// making the host transport is collective (every rank must use such a bootstrap). A setting that does not
// parse fails every rank with its error there, instead of leaving the others waiting.
std::unique_ptr<Bootstrap> withSharedMemory(Bootstrap& inner, const SettingLookup& lookup,
                                            const std::string& offSetting, std::chrono::milliseconds timeout);

}  // namespace ringguard
