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

std::string cpuMaskText(const std::vector<int>& cpus) {
  std::string text;
  for (int c : cpus) {
    if (c < 0 || size_t(c) >= 4 * kMaxCpuMaskChars) continue;
    const size_t at = size_t(c) / 4;
    if (text.size() <= at) text.resize(at + 1, '0');
    const int nibble = (text[at] <= '9' ? text[at] - '0' : text[at] - 'a' + 10) | (1 << (c % 4));
    text[at] = "0123456789abcdef"[nibble];
  }
  return text;
}

bool parseCpuMask(const std::string& text, std::vector<int>* cpus) {
  cpus->clear();
  if (text.size() > kMaxCpuMaskChars) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    const int nibble = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (nibble < 0) {
      cpus->clear();  // nothing taken from a text that is not a mask
      return false;
    }
    for (int j = 0; j < 4; ++j) {
      if (nibble & (1 << j)) cpus->push_back(int(4 * i) + j);
    }
  }
  return true;
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
