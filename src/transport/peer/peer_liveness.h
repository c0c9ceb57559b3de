#pragma once
// Which peers' processes have exited, for the one-sided path's watchdog (docs/design/protocol.md, "Deadlines,
// errors, abort"). A kernel waiting on a peer's window has no connection that closes when the peer dies, and
// the peer's window stays mapped (this process holds its own reference to the allocation), so without this a
// wait on a dead rank ends only at its deadline. Each watched rank's process is held as a pidfd
// (pidfd_open(2), Linux 5.3), which polls readable once the process has terminated; nothing signals it and
// nothing is reaped.
#include <cstdint>
#include <vector>

namespace ringguard {
namespace peer {

class PeerLiveness {
 public:
  // pids[r]: rank r's process. Ranks with pid <= 0, this process's own and those whose pidfd cannot be
  // opened (already gone at start, another pid namespace) are not watched; the kernels' deadlines still
  // bound every wait on them.
  explicit PeerLiveness(const std::vector<int>& pids);
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  // The watched ranks whose process has exited, bit r for rank r (ranks below 32). Non-blocking: one poll(2)
  // with a zero timeout.
  uint32_t exited() const;
  // How many ranks are watched.
  int watched() const;

 private:
  std::vector<int> fds_;  // per rank, -1 when not watched
};

}  // namespace peer
}  // namespace ringguard
