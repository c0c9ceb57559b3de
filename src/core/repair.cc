#include "core/repair.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

namespace ringguard {

std::string describeFailure(const SliceFailure& f) {
  std::ostringstream os;
  os << "link " << f.sender << " -> " << f.receiver << ", step " << f.step << ", slice " << f.slice
     << ", column " << f.column << ": " << sliceCheckName(static_cast<SliceCheck>(f.reason));
  return os.str();
}

std::vector<SliceFailure> canonicalFailures(std::vector<SliceFailure> failures) {
  auto key = [](const SliceFailure& f) {
    return std::make_tuple(f.step, f.column, f.slice, f.sender, f.receiver, f.reason);
  };
  std::sort(failures.begin(), failures.end(),
            [&](const SliceFailure& a, const SliceFailure& b) { return key(a) < key(b); });
  failures.erase(std::unique(failures.begin(), failures.end(),
                             [&](const SliceFailure& a, const SliceFailure& b) { return key(a) == key(b); }),
                 failures.end());
  return failures;
}

std::vector<ReplayEntry> planRepair(const std::vector<SliceFailure>& failures) {
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> earliest;
  for (const SliceFailure& f : failures) {
    auto key = std::make_pair(f.column, f.slice);
    auto it = earliest.find(key);
    if (it == earliest.end() || f.step < it->second) earliest[key] = f.step;
  }
  std::vector<ReplayEntry> plan;
  plan.reserve(earliest.size());
  for (const auto& [key, step] : earliest) plan.push_back(ReplayEntry{key.first, key.second, step});
  return plan;
}

}  // namespace ringguard
