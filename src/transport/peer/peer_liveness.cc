#include "transport/peer/peer_liveness.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ringguard {
namespace peer {

PeerLiveness::PeerLiveness(const std::vector<int>& pids) : fds_(pids.size(), -1) {
  const int self = int(getpid());
  for (size_t r = 0; r < pids.size() && r < 32; ++r) {
    if (pids[r] <= 0 || pids[r] == self) continue;
    fds_[r] = int(syscall(SYS_pidfd_open, pid_t(pids[r]), 0));
  }
}

PeerLiveness::~PeerLiveness() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

uint32_t PeerLiveness::exited() const {
  std::vector<pollfd> polls;
  std::vector<size_t> ranks;
  for (size_t r = 0; r < fds_.size(); ++r) {
    if (fds_[r] < 0) continue;
    polls.push_back({fds_[r], POLLIN, 0});
    ranks.push_back(r);
  }
  if (polls.empty() || poll(polls.data(), nfds_t(polls.size()), 0) <= 0) return 0;
  uint32_t mask = 0;
  for (size_t i = 0; i < polls.size(); ++i) {
    if (polls[i].revents & (POLLIN | POLLHUP | POLLERR)) mask |= 1u << ranks[i];
  }
  return mask;
}

int PeerLiveness::watched() const {
  int n = 0;
  for (int fd : fds_) n += fd >= 0;
  return n;
}

}  // namespace peer
}  // namespace ringguard
