#include "ringguard/bootstrap/bootstrap.h"

#include <unistd.h>

namespace ringguard {

Status agreeToProceed(Bootstrap& bootstrap, const Status& mine) {
  // Each rank's verdict: its status code, then its message.
  std::vector<uint8_t> record(1, uint8_t(mine.code()));
  const std::string text = mine.message();
  record.insert(record.end(), text.begin(), text.end());
  std::vector<std::vector<uint8_t>> all;
  RINGGUARD_RETURN_IF_ERROR(bootstrap.allgather(record, &all));
  if (!mine.isOk()) return mine;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty() || all[r][0] > uint8_t(StatusCode::kInternal)) {
      return Status(
          StatusCode::kTransportError,
          "rank " + std::to_string(r) + " sent no verdict that reads as a status in the creation agreement");
    }
    if (all[r][0] == uint8_t(StatusCode::kOk)) continue;
    const std::string theirs(all[r].begin() + 1, all[r].end());
    return Status(StatusCode(all[r][0]), "rank " + std::to_string(r) + ": " + theirs);
  }
  return Status::ok();
}

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
