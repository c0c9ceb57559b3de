#include "ringguard/bootstrap/bootstrap.h"

#include <unistd.h>

namespace ringguard {

Status nodeLocalRank(Bootstrap& bootstrap, int* localRank, int* localSize) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  const std::string me(host);
  std::vector<std::vector<uint8_t>> all;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.allgather(std::vector<uint8_t>(me.begin(), me.end()), &all));
  int before = 0, same = 0;
  for (int r = 0; r < int(all.size()); ++r) {
    if (std::string(all[size_t(r)].begin(), all[size_t(r)].end()) != me) continue;
    if (r < bootstrap.rank()) ++before;
    ++same;
  }
  *localRank = before;
  *localSize = same;
  return Status::ok();
}

}  // namespace ringguard
