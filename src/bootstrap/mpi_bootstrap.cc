#include "bootstrap/mpi_bootstrap.h"

#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

#include "core/env.h"
#include "core/logging.h"
#include "ringguard/mpi/mpi_communicator.h"
#include "transport/mpi/mpi_check.h"
#include "transport/mpi/mpi_transport.h"

namespace ringguard {

Status MpiBootstrap::create(MPI_Comm comm, std::optional<SharedMemoryChoice> sharedMemory,
                            std::unique_ptr<Bootstrap>* out) {
  MPI_Comm dup = MPI_COMM_NULL;
  RINGGUARD_MPI_CHECK(MPI_Comm_dup(comm, &dup));
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(dup, &rank);
  MPI_Comm_size(dup, &size);
  out->reset(new MpiBootstrap(dup, rank, size, std::move(sharedMemory)));
  return Status::ok();
}

MpiBootstrap::~MpiBootstrap() {
  // Its collectives are blocking, so nothing of ours is in flight on the duplicate any more.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

Status MpiBootstrap::broadcast(int root, std::vector<uint8_t>* bytes) {
  unsigned long long n = bytes->size();
  RINGGUARD_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, comm_));
  bytes->resize(size_t(n));
  RINGGUARD_MPI_CHECK(MPI_Bcast(bytes->data(), int(n), MPI_BYTE, root, comm_));
  return Status::ok();
}

Status MpiBootstrap::allgather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>* all) {
  int n = int(mine.size());
  std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
  RINGGUARD_MPI_CHECK(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_));
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    displs[size_t(r)] = total;
    total += counts[size_t(r)];
  }
  std::vector<uint8_t> flat(static_cast<size_t>(total));
  RINGGUARD_MPI_CHECK(
      MPI_Allgatherv(mine.data(), n, MPI_BYTE, flat.data(), counts.data(), displs.data(), MPI_BYTE, comm_));
  all->assign(size_t(size_), {});
  for (int r = 0; r < size_; ++r) {
    (*all)[size_t(r)].assign(flat.begin() + displs[size_t(r)],
                             flat.begin() + displs[size_t(r)] + counts[size_t(r)]);
  }
  return Status::ok();
}

Status MpiBootstrap::createHostTransport(std::unique_ptr<Transport>* out) {
  RINGGUARD_RETURN_IF_ERROR(MpiTransport::create(comm_, out));
  if (sharedMemory_) return connectSharedMemory(*this, *sharedMemory_, out);
  // Made without a choice (mpi::createBootstrap): the environment's, read only now, so a bootstrap used for
  // exchanges alone never reads the transport settings.
  uint64_t timeoutMs = 0;
  const Status timeout = parseSetting("RINGGUARD_TIMEOUT_MS", envLookup, &timeoutMs);
  SharedMemoryChoice choice = mpi::mpiSharedMemory(envLookup, std::chrono::milliseconds(timeoutMs));
  if (choice.invalid.isOk()) choice.invalid = timeout;
  return connectSharedMemory(*this, choice, out);
}

namespace mpi {

namespace {
// MPI initialised here is ended here. After a failed collective left a request of ours in flight,
// MPI_Finalize may wait forever for a stopped peer or crash (torch under mpirun segfaulted in it 2 of 3
// times after a timeout): the job ends through MPI_Abort instead, the documented exit after a fatal error.
void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  std::string why;
  if (!safeToFinalize(&why)) {
    logError(Subsys::kTransport, "{}; MPI cannot be finalized safely: ending the job with MPI_Abort", why);
    MPI_Abort(MPI_COMM_WORLD, kAbortExitCode);
  }
  MPI_Finalize();
}
}  // namespace

bool safeToFinalize(std::string* why) {
  std::string what;
  if (mpiRequestsLeftInFlight(&what)) {
    if (why != nullptr) *why = "a failed collective left MPI traffic in flight (" + what + ")";
    return false;
  }
  if (mpiPeerStalled(&what)) {
    if (why != nullptr)
      *why = "a rank stopped making progress, and MPI_Finalize would wait for it (" + what + ")";
    return false;
  }
  return true;
}

Status ensureInitialized() {
  int initialized = 0;
  RINGGUARD_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = 0;
  if (!initialized) {
    RINGGUARD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    // The logger first: statics are destroyed in the reverse order of their atexit registration, so it
    // then outlives the handler that may log (a logger made later was gone when it ran: a crash at exit).
    (void)logger();
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

SharedMemoryChoice mpiSharedMemory(const SettingLookup& lookup, std::chrono::milliseconds timeout) {
  SharedMemoryChoice c = readSharedMemoryChoice(lookup, "mpi", timeout);
  c.spin = kMpiPollBeforeBlocking;
  if (c.invalid.isOk() && c.setting == "gloo") {
    c.invalid = Status(StatusCode::kInvalidArgument,
                       "RINGGUARD_CPU_TRANSPORT=gloo: the Gloo helper belongs to the torch backend's groups "
                       "over a Store; a group over MPI takes auto, shm or mpi");
  }
  return c;
}

Status createBootstrap(MPI_Comm comm, std::unique_ptr<Bootstrap>* out,
                       std::optional<SharedMemoryChoice> sharedMemory) {
  RINGGUARD_RETURN_IF_ERROR(ensureInitialized());
  return MpiBootstrap::create(comm, std::move(sharedMemory), out);
}

Status createBootstrap(std::unique_ptr<Bootstrap>* out) { return createBootstrap(MPI_COMM_WORLD, out); }

Status worldPosition(int* rank, int* size) {
  RINGGUARD_RETURN_IF_ERROR(ensureInitialized());
  RINGGUARD_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
  RINGGUARD_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, size));
  return Status::ok();
}

Status createGroupBootstrap(const std::vector<int>& worldRanks, std::unique_ptr<Bootstrap>* out,
                            std::optional<SharedMemoryChoice> sharedMemory) {
  int rank = -1, size = 0;
  RINGGUARD_RETURN_IF_ERROR(worldPosition(&rank, &size));
  for (int r : worldRanks) {
    if (r < 0 || r >= size) {
      return Status(StatusCode::kInvalidArgument, "MPI group: rank " + std::to_string(r) +
                                                      " is not a rank of MPI_COMM_WORLD (size " +
                                                      std::to_string(size) + ")");
    }
  }
  MPI_Group world = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  RINGGUARD_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  const int rc = MPI_Group_incl(world, int(worldRanks.size()), worldRanks.data(), &group);
  MPI_Group_free(&world);
  RINGGUARD_MPI_CHECK(rc);
  const int created = MPI_Comm_create_group(MPI_COMM_WORLD, group, /*tag=*/0x52470, &comm);
  MPI_Group_free(&group);
  RINGGUARD_MPI_CHECK(created);
  Status st = createBootstrap(comm, out, std::move(sharedMemory));  // over a duplicate of comm
  MPI_Comm_free(&comm);
  return st;
}

namespace {
// Open MPI's MPI_Comm is a pointer, MPICH's an int: only the first can be null (a template, so that the
// comparison is not compiled for an int).
template <typename Handle>
bool isNullPointer(Handle handle) {
  if constexpr (std::is_pointer<Handle>::value) return handle == nullptr;
  return false;
}
}  // namespace

Status commFromFortran(int64_t fortranComm, MPI_Comm* out) {
  RINGGUARD_RETURN_IF_ERROR(ensureInitialized());  // MPI_Comm_f2c needs MPI
  const std::string what = "the Fortran communicator handle " + std::to_string(fortranComm);
  // int64_t in the API holds MPI_Fint at any width (it is 64-bit under -fdefault-integer-8 builds).
  if (fortranComm < std::numeric_limits<MPI_Fint>::min() ||
      fortranComm > std::numeric_limits<MPI_Fint>::max()) {
    return Status(StatusCode::kInvalidArgument, what + " does not fit an MPI_Fint: pass MPI_Comm_c2f(comm)");
  }
  const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(fortranComm));
  // MPI_Comm_f2c raises no error for a handle it never issued (MPI-2 4.12.4) but returns an invalid C
  // handle: Open MPI's is a null pointer, which MPI_Comm_dup would crash on.
  if (comm == MPI_COMM_NULL || isNullPointer(comm)) {
    return Status(StatusCode::kInvalidArgument,
                  what + " names no communicator (MPI_COMM_NULL: is this rank outside the group?)");
  }
  *out = comm;
  return Status::ok();
}

Status createBootstrap(int64_t fortranComm, std::unique_ptr<Bootstrap>* out) {
  MPI_Comm comm = MPI_COMM_NULL;
  RINGGUARD_RETURN_IF_ERROR(commFromFortran(fortranComm, &comm));
  return createBootstrap(comm, out);
}

}  // namespace mpi
}  // namespace ringguard
