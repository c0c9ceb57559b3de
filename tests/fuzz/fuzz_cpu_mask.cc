// A peer's CPU set in its shared-memory setup record (transport/shm/cpu_sets.h): any text. One that parses
// names only CPUs inside the mask, ascending, and writes back as itself (less its trailing zero digits); a
// group of two ranks with that set has CPUs of its own exactly when the set holds two; and a text that does
// not parse is refused whole (no CPU taken from it).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "transport/shm/cpu_sets.h"

using namespace ringguard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<int> cpus = {-1};
  if (!shm::parseCpuMask(text, &cpus)) {
    RINGGUARD_FUZZ_CHECK(cpus.empty());
    return 0;
  }
  RINGGUARD_FUZZ_CHECK(text.size() <= shm::kMaxCpuMaskChars);
  for (size_t i = 0; i < cpus.size(); ++i) {
    RINGGUARD_FUZZ_CHECK(cpus[i] >= 0 && size_t(cpus[i]) < 4 * text.size());
    if (i > 0) RINGGUARD_FUZZ_CHECK(cpus[i - 1] < cpus[i]);
  }
  std::string trimmed = text;
  while (!trimmed.empty() && trimmed.back() == '0') trimmed.pop_back();
  RINGGUARD_FUZZ_CHECK(shm::cpuMaskText(cpus) == trimmed);
  RINGGUARD_FUZZ_CHECK(shm::everyRankHasACpu({cpus, cpus}) == (cpus.size() >= 2));
  return 0;
}
