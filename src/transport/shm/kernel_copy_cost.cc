#include "transport/shm/kernel_copy_cost.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/shm/cross_memory.h"

namespace ringguard {
namespace shm {

namespace {

// The median of `rounds` timings of `step` (us), after one untimed call; false where a step failed.
template <typename Step>
bool medianUs(int rounds, const Step& step, double* out) {
  if (!step()) return false;
  std::vector<double> us;
  us.reserve(size_t(rounds));
  for (int i = 0; i < rounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (!step()) return false;
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(us.begin(), us.begin() + rounds / 2, us.end());
  *out = us[size_t(rounds / 2)];
  return true;
}

}  // namespace

KernelCopyCost measureKernelCopyCost() {
  constexpr int kRounds = 31;
  std::vector<uint8_t> src(kKernelCopyProbeBytes), dst(kKernelCopyProbeBytes);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + 7);
  KernelCopyCost cost;
  const int64_t pid = getpid();
  const uint64_t from = uint64_t(uintptr_t(src.data()));
  if (!medianUs(
          kRounds, [&] { return readCrossMemory(pid, 0, from, dst.data(), dst.size()).isOk(); },
          &cost.kernelUs) ||
      std::memcmp(src.data(), dst.data(), src.size()) != 0) {
    return KernelCopyCost{};
  }
  medianUs(
      kRounds,
      [&] {
        std::memcpy(dst.data(), src.data(), src.size());
        // Keeps the copy from being dropped: the next round copies into what this one wrote.
        asm volatile("" : : "r"(dst.data()) : "memory");
        return true;
      },
      &cost.copyUs);
  return cost;
}

}  // namespace shm
}  // namespace ringguard
