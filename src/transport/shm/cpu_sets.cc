#include "transport/shm/cpu_sets.h"

#include <sched.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

namespace ringguard {
namespace shm {

std::vector<int> cpusOfThisProcess() {
  cpu_set_t set;
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

bool everyRankHasACpu(const std::vector<std::vector<int>>& cpus) {
  // CPU ids to dense indices (the sets come from peers: any int is only a name here).
  std::map<int, size_t> index;
  std::vector<std::vector<size_t>> sets(cpus.size());
  for (size_t r = 0; r < cpus.size(); ++r) {
    for (int c : cpus[r]) sets[r].push_back(index.emplace(c, index.size()).first->second);
  }
  if (index.size() < cpus.size()) return false;
  // Augmenting paths (Kuhn's matching), a free CPU taken first, so ranks whose sets overlap entirely (no
  // binding) are placed in one pass.
  constexpr size_t kFree = SIZE_MAX;
  std::vector<size_t> holder(index.size(), kFree);
  std::vector<char> seen(index.size());
  const std::function<bool(size_t)> place = [&](size_t rank) {
    for (size_t c : sets[rank]) {
      if (holder[c] == kFree) {
        holder[c] = rank;
        return true;
      }
    }
    for (size_t c : sets[rank]) {
      if (seen[c]) continue;
      seen[c] = 1;
      if (place(holder[c])) {
        holder[c] = rank;
        return true;
      }
    }
    return false;
  };
  for (size_t r = 0; r < sets.size(); ++r) {
    seen.assign(seen.size(), 0);
    if (!place(r)) return false;
  }
  return true;
}

}  // namespace shm
}  // namespace ringguard
