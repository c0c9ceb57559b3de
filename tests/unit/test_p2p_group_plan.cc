// The rounds of a grouped point-to-point call (core/p2p_group_plan.h): rings, pipelines, all-to-all lists in
// different orders on different ranks, several messages to one peer, sizes 1 and 2, and random groups, each
// checked by matching every rank's rounds pairwise and by running them all with rendezvous semantics (a
// message moves only while both its ends sit in the call that holds it), which must finish; the same run of
// each op issued alone, in list order, must not (the deadlock the plan exists for).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/p2p_group_plan.h"

namespace ringguard {
namespace {

using Ops = std::vector<P2pGroupEnd>;

P2pGroupEnd sendTo(int peer) { return P2pGroupEnd{true, peer}; }
P2pGroupEnd recvFrom(int peer) { return P2pGroupEnd{false, peer}; }

// A message end inside one call: direction, peer and occurrence (the k-th message of that pair).
struct End {
  bool send;
  int peer;
  uint32_t k;
};
using Calls = std::vector<std::vector<End>>;  // one rank's calls, in issue order

// The k of every op: its occurrence among the rank's ops of the same direction and peer.
std::vector<uint32_t> occurrences(int size, const Ops& ops) {
  std::vector<uint32_t> seen(2 * size_t(size), 0), k;
  for (const P2pGroupEnd& op : ops) k.push_back(seen[size_t(op.send ? 0 : size) + size_t(op.peer)]++);
  return k;
}

Calls planCalls(int rank, int size, const Ops& ops) {
  const std::vector<uint32_t> k = occurrences(size, ops);
  Calls calls;
  for (const P2pGroupRound& r : planP2pGroup(rank, size, ops)) {
    std::vector<End> call;
    if (r.send >= 0) call.push_back({true, ops[size_t(r.send)].peer, k[size_t(r.send)]});
    if (r.recv >= 0) call.push_back({false, ops[size_t(r.recv)].peer, k[size_t(r.recv)]});
    calls.push_back(call);
  }
  return calls;
}

Calls aloneCalls(int size, const Ops& ops) {
  const std::vector<uint32_t> k = occurrences(size, ops);
  Calls calls;
  for (size_t i = 0; i < ops.size(); ++i) calls.push_back({{ops[i].send, ops[i].peer, k[i]}});
  return calls;
}

// Runs every rank's calls in order: a message (a -> b, k) moves when a's current call holds its send and b's
// current call its receive; a call ends when all its messages moved. True when every rank ends.
bool runsToTheEnd(const std::vector<Calls>& ranks) {
  const size_t n = ranks.size();
  std::vector<size_t> at(n, 0);
  std::vector<std::vector<bool>> moved(n);  // per rank, per end of its current call
  for (size_t r = 0; r < n; ++r) moved[r].assign(ranks[r].empty() ? 0 : ranks[r][0].size(), false);
  const auto holds = [&](size_t r, bool send, int peer, uint32_t k) -> int {
    if (at[r] >= ranks[r].size()) return -1;
    const std::vector<End>& call = ranks[r][at[r]];
    for (size_t e = 0; e < call.size(); ++e) {
      if (call[e].send == send && call[e].peer == peer && call[e].k == k) return int(e);
    }
    return -1;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < n; ++r) {
      if (at[r] >= ranks[r].size()) continue;
      const std::vector<End>& call = ranks[r][at[r]];
      for (size_t e = 0; e < call.size(); ++e) {
        if (!call[e].send || moved[r][e]) continue;
        const int there = holds(size_t(call[e].peer), false, int(r), call[e].k);
        if (there < 0) continue;
        moved[r][e] = true;
        moved[size_t(call[e].peer)][size_t(there)] = true;
        progress = true;
      }
    }
    for (size_t r = 0; r < n; ++r) {
      if (at[r] >= ranks[r].size()) continue;
      if (std::all_of(moved[r].begin(), moved[r].end(), [](bool m) { return m; })) {
        ++at[r];
        moved[r].assign(at[r] < ranks[r].size() ? ranks[r][at[r]].size() : 0, false);
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (at[r] < ranks[r].size()) return false;
  }
  return true;
}

// Every rank's rounds, checked: each op in exactly one round; rounds in ascending (s, k), each with its send
// to rank + s and receive from rank - s of occurrence k; one (direction, peer)'s ops in list order; the send
// of (r, s, k) meets the receive of (r + s, s, k) and the receive of (r, s, k) the send of (r - s, s, k); and
// the rounds run to the end.
void checkGroup(const std::vector<Ops>& ops, const std::string& what) {
  const int n = int(ops.size());
  std::vector<std::vector<P2pGroupRound>> plans;
  std::vector<Calls> calls;
  for (int r = 0; r < n; ++r) {
    plans.push_back(planP2pGroup(r, n, ops[size_t(r)]));
    calls.push_back(planCalls(r, n, ops[size_t(r)]));
  }
  for (int r = 0; r < n; ++r) {
    const Ops& mine = ops[size_t(r)];
    const std::vector<uint32_t> k = occurrences(n, mine);
    std::vector<int> placed(mine.size(), 0);
    std::vector<int> lastIndex(2 * size_t(n), -1);
    for (size_t i = 0; i < plans[size_t(r)].size(); ++i) {
      const P2pGroupRound& round = plans[size_t(r)][i];
      if (i > 0) {
        const P2pGroupRound& prev = plans[size_t(r)][i - 1];
        EXPECT_LT(std::make_pair(prev.shift, prev.occurrence), std::make_pair(round.shift, round.occurrence))
            << what << ": rank " << r << " round " << i;
      }
      ASSERT_TRUE(round.send >= 0 || round.recv >= 0) << what << ": an empty round";
      for (int idx : {round.send, round.recv}) {
        if (idx < 0) continue;
        const P2pGroupEnd& op = mine[size_t(idx)];
        ++placed[size_t(idx)];
        EXPECT_EQ(op.send, idx == round.send) << what << ": rank " << r << " op " << idx;
        EXPECT_EQ(k[size_t(idx)], round.occurrence) << what << ": rank " << r << " op " << idx;
        const int partner = op.send ? (r + int(round.shift)) % n : (r - int(round.shift) + n) % n;
        EXPECT_EQ(op.peer, partner) << what << ": rank " << r << " op " << idx;
        // List order kept within one (direction, peer).
        int& last = lastIndex[size_t(op.send ? 0 : n) + size_t(op.peer)];
        EXPECT_LT(last, idx) << what << ": rank " << r << " op " << idx << " overtook op " << last;
        last = idx;
        // The other end has the same key, with the matching op.
        bool met = false;
        for (const P2pGroupRound& theirs : plans[size_t(op.peer)]) {
          if (theirs.shift != round.shift || theirs.occurrence != round.occurrence) continue;
          const int j = op.send ? theirs.recv : theirs.send;
          ASSERT_GE(j, 0) << what << ": rank " << op.peer << " has no match for rank " << r << "'s op "
                          << idx;
          EXPECT_EQ(ops[size_t(op.peer)][size_t(j)].peer, r) << what;
          met = true;
        }
        EXPECT_TRUE(met) << what << ": rank " << r << " op " << idx << " (s " << round.shift << ", k "
                         << round.occurrence << ") has no round on rank " << op.peer;
      }
    }
    for (size_t i = 0; i < placed.size(); ++i)
      EXPECT_EQ(placed[i], 1) << what << ": rank " << r << " op " << i;
  }
  EXPECT_TRUE(runsToTheEnd(calls)) << what << ": the plan's rounds deadlock";
}

std::vector<Calls> alone(const std::vector<Ops>& ops) {
  std::vector<Calls> calls;
  for (const Ops& o : ops) calls.push_back(aloneCalls(int(ops.size()), o));
  return calls;
}

TEST(P2pGroupPlan, RingIsOneRoundWhateverTheOrder) {
  for (int n : {2, 3, 4, 7}) {
    std::vector<Ops> sendFirst, mixed;
    for (int r = 0; r < n; ++r) {
      sendFirst.push_back({sendTo((r + 1) % n), recvFrom((r + n - 1) % n)});
      mixed.push_back(r % 2 == 0 ? sendFirst.back() : Ops{recvFrom((r + n - 1) % n), sendTo((r + 1) % n)});
    }
    for (int r = 0; r < n; ++r) {
      const std::vector<P2pGroupRound> plan = planP2pGroup(r, n, sendFirst[size_t(r)]);
      ASSERT_EQ(plan.size(), 1u) << "np" << n;
      EXPECT_EQ(plan[0].shift, 1u);
      EXPECT_EQ(plan[0].send, 0);
      EXPECT_EQ(plan[0].recv, 1);
    }
    checkGroup(sendFirst, "ring send first np" + std::to_string(n));
    checkGroup(mixed, "ring mixed np" + std::to_string(n));
    // What the plan is for: each op alone in list order deadlocks the ring (every send waits for a
    // receive queued behind its peer's own send).
    EXPECT_FALSE(runsToTheEnd(alone(sendFirst))) << "np" << n;
  }
}

TEST(P2pGroupPlan, PipelineEndsAreOneSided) {
  for (int n : {2, 3, 5}) {
    std::vector<Ops> ops(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      if (r + 1 < n) ops[size_t(r)].push_back(sendTo(r + 1));
      if (r > 0) ops[size_t(r)].push_back(recvFrom(r - 1));
    }
    const std::vector<P2pGroupRound> first = planP2pGroup(0, n, ops[0]),
                                     last = planP2pGroup(n - 1, n, ops.back());
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0].recv, -1);
    EXPECT_EQ(first[0].send, 0);
    ASSERT_EQ(last.size(), 1u);
    EXPECT_EQ(last[0].send, -1);
    EXPECT_EQ(last[0].recv, 0);
    checkGroup(ops, "pipeline np" + std::to_string(n));
    // Backward too: gradients from the last stage to the first, in the same group.
    for (int r = 0; r < n; ++r) {
      if (r > 0) ops[size_t(r)].push_back(sendTo(r - 1));
      if (r + 1 < n) ops[size_t(r)].push_back(recvFrom(r + 1));
    }
    checkGroup(ops, "pipeline both ways np" + std::to_string(n));
  }
}

TEST(P2pGroupPlan, AlltoallListedInDifferentOrders) {
  for (int n : {2, 3, 4, 6}) {
    std::vector<Ops> ops(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      Ops& o = ops[size_t(r)];
      for (int p = 0; p < n; ++p) {
        o.push_back(sendTo(p));
        o.push_back(recvFrom(p));
      }
      // Rank order on even ranks, receives first and peers reversed on odd ones.
      if (r % 2 == 1) std::reverse(o.begin(), o.end());
    }
    checkGroup(ops, "alltoall np" + std::to_string(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ(planP2pGroup(r, n, ops[size_t(r)]).size(), size_t(n)) << "np" << n;
    EXPECT_FALSE(runsToTheEnd(alone(ops))) << "np" << n;
  }
}

TEST(P2pGroupPlan, SeveralMessagesToOnePeerKeepTheirOrder) {
  // Rank 0 sends three messages to rank 1 and receives two from it; rank 1 lists its side in another order.
  const std::vector<Ops> ops = {{sendTo(1), recvFrom(1), sendTo(1), sendTo(1), recvFrom(1)},
                                {recvFrom(0), recvFrom(0), sendTo(0), recvFrom(0), sendTo(0)}};
  const std::vector<P2pGroupRound> plan = planP2pGroup(0, 2, ops[0]);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(std::make_tuple(plan[0].send, plan[0].recv), std::make_tuple(0, 1));
  EXPECT_EQ(std::make_tuple(plan[1].send, plan[1].recv), std::make_tuple(2, 4));
  EXPECT_EQ(std::make_tuple(plan[2].send, plan[2].recv), std::make_tuple(3, -1));
  checkGroup(ops, "three and two messages np2");
}

TEST(P2pGroupPlan, SizeOneAndMessagesToItself) {
  const std::vector<Ops> one = {{sendTo(0), recvFrom(0), recvFrom(0), sendTo(0)}};
  const std::vector<P2pGroupRound> plan = planP2pGroup(0, 1, one[0]);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(std::make_tuple(plan[0].shift, plan[0].send, plan[0].recv), std::make_tuple(0u, 0, 1));
  EXPECT_EQ(std::make_tuple(plan[1].shift, plan[1].send, plan[1].recv), std::make_tuple(0u, 3, 2));
  checkGroup(one, "size 1");
  EXPECT_TRUE(planP2pGroup(0, 1, {}).empty());
  // A self copy beside a ring at np3: round s = 0 first.
  std::vector<Ops> ring(3);
  for (int r = 0; r < 3; ++r)
    ring[size_t(r)] = {sendTo((r + 1) % 3), sendTo(r), recvFrom(r), recvFrom((r + 2) % 3)};
  EXPECT_EQ(planP2pGroup(1, 3, ring[1])[0].shift, 0u);
  checkGroup(ring, "ring with self copies np3");
}

TEST(P2pGroupPlan, RandomGroupsMatchPairwiseAndRunToTheEnd) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + int(rng() % 6);
    const int messages = int(rng() % 12);
    std::vector<Ops> ops(static_cast<size_t>(n));
    for (int m = 0; m < messages; ++m) {
      const int src = int(rng() % unsigned(n)), dst = int(rng() % unsigned(n));
      ops[size_t(src)].push_back(sendTo(dst));
      ops[size_t(dst)].push_back(recvFrom(src));
    }
    // Each rank lists its ops in an order of its own (the k-th message of a pair still meets the k-th).
    for (Ops& o : ops) std::shuffle(o.begin(), o.end(), rng);
    checkGroup(ops, "trial " + std::to_string(trial) + " np" + std::to_string(n));
    if (testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace ringguard
