// Comparison of the gathered fingerprints: majority per tensor, the odd ranks, the repair source.
#include "ringguard/replicas/comparison.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace ringguard {

std::vector<uint32_t> ReplicaMessage::encode() const {
  std::vector<uint32_t> w;
  w.reserve(kHeaderWords + crcs.size());
  w.push_back(kMagic);
  w.push_back(static_cast<uint32_t>(step));
  w.push_back(static_cast<uint32_t>(step >> 32));
  w.push_back(static_cast<uint32_t>(crcs.size()));
  w.push_back(layoutHash);
  w.insert(w.end(), crcs.begin(), crcs.end());
  return w;
}

Status ReplicaMessage::decode(const uint32_t* words, size_t n, int rank, ReplicaMessage* out) {
  if (n < kHeaderWords || words[0] != kMagic || words[3] != n - kHeaderWords) {
    return Status(StatusCode::kCorruption, "replica check: the fingerprints of rank " + std::to_string(rank) +
                                               " are not a replica message (" + std::to_string(n) +
                                               " words)");
  }
  out->step = static_cast<uint64_t>(words[1]) | (static_cast<uint64_t>(words[2]) << 32);
  out->layoutHash = words[4];
  out->crcs.assign(words + kHeaderWords, words + n);
  return Status::ok();
}

namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

std::string ReplicaComparison::describe(const std::vector<std::string>& names) const {
  if (!structural.empty()) return structural;
  if (!mismatch) return "all " + std::to_string(replicas) + " replicas agree";
  std::string s;
  if (majority) {
    s = std::string(oddRanks.size() == 1 ? "rank " : "ranks ") + rankList(oddRanks) + " of " +
        std::to_string(replicas) + " replicas differ" + (oddRanks.size() == 1 ? "s" : "") +
        " from the majority";
  } else {
    s = "ranks " + rankList(oddRanks) + " of " + std::to_string(replicas) +
        " replicas disagree and no majority names the odd one";
  }
  s += " in " + std::to_string(tensors.size()) + (tensors.size() == 1 ? " tensor: " : " tensors: ");
  const size_t shown = std::min<size_t>(tensors.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    const size_t t = tensors[i];
    s += (i == 0 ? "'" : ", '") + (t < names.size() ? names[t] : "#" + std::to_string(t)) + "'";
  }
  if (shown < tensors.size()) s += ", ...";
  return s;
}

ReplicaComparison compareReplicas(const std::vector<ReplicaMessage>& messages) {
  ReplicaComparison c;
  c.replicas = static_cast<int>(messages.size());
  if (messages.empty()) return c;
  const ReplicaMessage& first = messages[0];
  for (size_t r = 1; r < messages.size(); ++r) {
    const ReplicaMessage& m = messages[r];
    if (m.step != first.step) {
      c.structural = "replica check: rank " + std::to_string(r) + " checked step " + std::to_string(m.step) +
                     " while rank 0 checked step " + std::to_string(first.step) +
                     " (every rank must check after the same steps)";
    } else if (m.crcs.size() != first.crcs.size() || m.layoutHash != first.layoutHash) {
      c.structural = "replica check: rank " + std::to_string(r) + " lists other tensors than rank 0 (" +
                     std::to_string(m.crcs.size()) + " vs " + std::to_string(first.crcs.size()) +
                     " tensors, layout " + hex(m.layoutHash) + " vs " + hex(first.layoutHash) +
                     "): the replicas must hold the same parameters, optimizer state and buffers";
    }
    if (!c.structural.empty()) {
      c.mismatch = true;
      return c;
    }
  }

  const int n = c.replicas;
  std::set<int> odd;
  bool everyMajority = true;
  for (size_t t = 0; t < first.crcs.size(); ++t) {
    std::map<uint32_t, int> votes;
    for (const ReplicaMessage& m : messages) ++votes[m.crcs[t]];
    if (votes.size() == 1) continue;
    c.tensors.push_back(t);
    uint32_t best = 0;
    int bestVotes = 0;
    for (const auto& [crc, v] : votes) {
      if (v > bestVotes) best = crc, bestVotes = v;
    }
    if (2 * bestVotes > n) {
      for (int r = 0; r < n; ++r) {
        if (messages[r].crcs[t] != best) odd.insert(r);
      }
    } else {
      everyMajority = false;
    }
  }
  c.mismatch = !c.tensors.empty();
  if (!c.mismatch) return c;
  if (everyMajority && static_cast<int>(odd.size()) < n) {
    c.majority = true;
    c.oddRanks.assign(odd.begin(), odd.end());
    for (int r = 0; r < n; ++r) {
      if (!odd.count(r)) {
        c.source = r;
        break;
      }
    }
    return c;
  }
  // No majority somewhere: name every rank that differs from some other on a differing tensor (with 2
  // replicas, both).
  for (size_t t : c.tensors) {
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < n; ++q) {
        if (messages[r].crcs[t] != messages[q].crcs[t]) odd.insert(r);
      }
    }
  }
  c.oddRanks.assign(odd.begin(), odd.end());
  return c;
}

}  // namespace ringguard
