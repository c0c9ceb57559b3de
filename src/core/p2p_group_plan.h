#pragma once
// The rounds of a grouped point-to-point call (Communicator::sendRecvGroupAsync, what ncclGroupStart/End do
// for ncclSend/ncclRecv; docs/design/protocol.md, "Grouped send/recv"). A send that waits for its receiver
// (the peer path's rendezvous, a pipelined message's slots) cannot be issued alone in the caller's order: in
// a ring where every rank lists its send first, every send waits for a receive queued behind the peer's own
// send. The plan pairs the ops into sendRecv calls that cannot deadlock, whatever order each rank listed
// them in:
//
//   an op's key is (s, k): s = (peer - rank) mod size for a send, (rank - peer) mod size for a receive, and
//   k its occurrence among this rank's ops of the same direction and peer, in list order;
//   round (s, k) is ONE sendRecv of the send to rank + s and the receive from rank - s of that key (either
//   may be absent); every rank runs its rounds in ascending (s, k).
//
// Messages of one (peer, direction) match in call order, so the k-th send of r to r + s meets the k-th
// receive of r + s from r, which rank r + s keys (s, k) too: every wait of a round is on a round of the same
// key, and every rank reaches the keys in one global order, so no cycle of waits can form. s = 0 is the
// rank's messages to itself (a local copy: its send and receive must pair). Pure; tested on CI
// (tests/unit/test_p2p_group_plan.cc).
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace ringguard {

// One op of the group as the plan sees it: a send to or a receive from `peer` (in [0, size)).
struct P2pGroupEnd {
  bool send = false;
  int peer = -1;
};

// One sendRecv of the plan: the indices (into the ops) of its send to rank + shift and its receive from
// rank - shift, -1 where absent.
struct P2pGroupRound {
  uint32_t shift = 0;       // s
  uint32_t occurrence = 0;  // k
  int send = -1;
  int recv = -1;
};

// The rounds of `ops` on `rank` of `size` (every peer in range: the caller checks), in ascending (s, k).
inline std::vector<P2pGroupRound> planP2pGroup(int rank, int size, const std::vector<P2pGroupEnd>& ops) {
  std::map<std::pair<uint32_t, uint32_t>, P2pGroupRound> rounds;
  // Occurrences so far per (direction, peer): [0, size) sends, [size, 2 size) receives.
  std::vector<uint32_t> seen(2 * size_t(size), 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pGroupEnd& op = ops[i];
    const uint32_t s = uint32_t(op.send ? (op.peer - rank + size) % size : (rank - op.peer + size) % size);
    const uint32_t k = seen[size_t(op.send ? 0 : size) + size_t(op.peer)]++;
    P2pGroupRound& r = rounds[{s, k}];
    r.shift = s;
    r.occurrence = k;
    (op.send ? r.send : r.recv) = int(i);
  }
  std::vector<P2pGroupRound> plan;
  plan.reserve(rounds.size());
  for (const auto& entry : rounds) plan.push_back(entry.second);
  return plan;
}

}  // namespace ringguard
