#include <cstdlib>
#include <string>
#include <vector>

#include "ringguard/bootstrap/host_bootstrap.h"
#include "transport/shm/shm_transport.h"

namespace ringguard {

bool startedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

Status chooseHostBootstrap(const SettingLookup& lookup, bool underMpirun, bool haveMpi,
                           HostBootstrapKind* out) {
  *out = HostBootstrapKind::kStore;
  std::string kind;  // choices and default: the setting's declaration (core/settings.cc)
  if (!parseSetting("RINGGUARD_CPU_TRANSPORT", lookup, &kind).isOk()) return Status::ok();
  if (!haveMpi) {
    if (kind == "mpi") {
      return Status(StatusCode::kInvalidArgument, "RINGGUARD_CPU_TRANSPORT=mpi, but this build has no MPI");
    }
    return Status::ok();
  }
  if (kind == "mpi" || (kind == "auto" && underMpirun)) *out = HostBootstrapKind::kMpi;
  return Status::ok();
}

Status agreeOnCpuTransport(Bootstrap& exchange, const SettingLookup& lookup) {
  std::string mine;
  if (!parseSetting("RINGGUARD_CPU_TRANSPORT", lookup, &mine).isOk()) {
    const char* text = lookup("RINGGUARD_CPU_TRANSPORT");
    mine = text != nullptr ? text : "";
  }
  std::vector<std::vector<uint8_t>> all;
  const Status st = exchange.allgather(std::vector<uint8_t>(mine.begin(), mine.end()), &all);
  if (!st.isOk()) {
    return Status(st.code(), "comparing RINGGUARD_CPU_TRANSPORT between ranks: " + st.toString());
  }
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string theirs(all[r].begin(), all[r].end());
    if (theirs != mine) return cpuTransportDiffers(exchange.rank(), mine, int(r), theirs);
  }
  return Status::ok();
}

}  // namespace ringguard
