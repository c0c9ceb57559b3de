// A rank stopped (SIGSTOP) in the middle of a large allreduce, resumed (SIGCONT) after its peers timed out
// and left: it must return from the collective with an error within a bound, never hang (issue 17,
// defect 1: MpiOp::cancel waited on a cancelled receive that a departed peer had half-delivered).
//
// Not a GoogleTest binary: the peers are gone when the resumed rank returns, so no collective (not even
// MPI_Finalize's) can follow. Each rank writes one line to $RINGGUARD_TEST_OUT/rank<r>.txt and
// tests/mpi/stopped_rank.sh judges them. Run with 3 ranks; the last one is stopped.
#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ringguard/mpi/mpi_communicator.h"
#include "stop_self.h"

using namespace ringguard;

namespace {

constexpr int kTimeoutMs = 1500;
constexpr int kStopAfterMs = 50;  // into the collective: slices are in flight both ways
constexpr int kStoppedForMs = 5000;

void report(int rank, const std::string& line) {
  const char* dir = std::getenv("RINGGUARD_TEST_OUT");
  const std::string path = std::string(dir ? dir : ".") + "/rank" + std::to_string(rank) + ".txt";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
  std::fprintf(stderr, "[rank %d] %s\n", rank, line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int stopped = size - 1;

  Options o;
  o.timeout = std::chrono::milliseconds(kTimeoutMs);
  o.sliceBytes = 1 << 20;  // rendezvous-sized messages: a receive can be matched and left half-full
  std::unique_ptr<Communicator> comm;
  Status st = mpi::createCommunicator(o, &comm);
  if (!st.isOk()) {
    report(rank, "create failed: " + st.toString());
    return 1;
  }
  // Warm up (and prove the setup works): one small allreduce every rank completes.
  std::vector<float> small(16, 1.0f);
  st = comm->allreduce(small.data(), small.data(), small.size(), DataType::kFloat32, ReduceOp::kSum);
  if (!st.isOk() || small[0] != float(size)) {
    report(rank, "warm-up failed: " + st.toString());
    return 1;
  }

  std::vector<float> big(size_t(16) << 20, float(rank));  // 64 MiB
  if (rank == stopped) test::stopSelfFor(kStopAfterMs, kStoppedForMs);

  const auto start = std::chrono::steady_clock::now();
  st = comm->allreduce(big.data(), big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report(rank, std::string(st.isOk() ? "ok" : "error") + " after " + std::to_string(seconds) +
                   " s: " + st.toString());
  if (rank != stopped) {
    // Leave, as the peers did: a receive the stopped rank had matched is never completed.
    if (std::getenv("RINGGUARD_TEST_PEERS_FINALIZE")) {
      MPI_Finalize();
      return 0;
    }
    // Or go quiet: no MPI progress from here.
    std::this_thread::sleep_for(std::chrono::seconds(30));
  } else {
    int ignored = 0;
    waitpid(-1, &ignored, WNOHANG);
  }
  // Nothing collective may follow (MPI_Finalize would wait for the peers); the buffers in flight stay
  // alive to the process's end, as docs/ARCHITECTURE.md ("Errors") says.
  std::_Exit(st.isOk() ? 1 : 0);
}
