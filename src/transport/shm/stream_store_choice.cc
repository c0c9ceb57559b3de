#include "transport/shm/stream_store_choice.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/copy_bytes.h"
#include "core/stream_copy.h"

namespace ringguard {
namespace shm {

namespace {

constexpr uint64_t kDone = UINT64_MAX;  // rank 0's flag once it measured (or gave up)
constexpr int kWarmRounds = 8;
constexpr int kRounds = 31;
constexpr uint64_t kAllRounds = 2 * (kWarmRounds + kRounds);  // both kinds of store

std::atomic<uint64_t>& flagOf(uint8_t* area) { return *reinterpret_cast<std::atomic<uint64_t>*>(area); }

// Polls `ready` until it holds or `limit` passed.
template <typename Ready>
bool waitFor(const Ready& ready, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

StreamStoreCost measureStreamStores(bool writer, uint8_t* writerArea, uint8_t* readerArea,
                                    std::chrono::milliseconds firstWait, std::chrono::milliseconds patience) {
  std::atomic<uint64_t>& sent = flagOf(writerArea);
  std::atomic<uint64_t>& taken = flagOf(readerArea);
  uint8_t* payload = writerArea + 64;
  std::vector<uint8_t> own(kStreamProbeBytes);
  if (!writer) {
    for (uint64_t seen = 0;;) {
      uint64_t now = 0;
      if (!waitFor([&] { return (now = sent.load(std::memory_order_acquire)) != seen; },
                   seen == 0 ? firstWait : patience) ||
          now != seen + 1 || now > kAllRounds) {
        return {};  // rank 0 is done, gave up, or wrote something that is not the next round of the two
      }
      copyBytes(own.data(), payload, own.size());
      asm volatile("" : : "r"(own.data()) : "memory");  // the copy is part of the round trip: keep it
      seen = now;
      taken.store(seen, std::memory_order_release);
    }
  }
  for (size_t i = 0; i < own.size(); ++i) own[i] = uint8_t(i * 29 + 3);
  double medians[2] = {0, 0};
  uint64_t round = 0;
  for (int streaming = 0; streaming < 2; ++streaming) {
    std::vector<double> us;
    for (int i = 0; i < kWarmRounds + kRounds; ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (streaming != 0) {
        streamCopy(payload, own.data(), own.size());
      } else {
        copyBytes(payload, own.data(), own.size());
      }
      sent.store(++round, std::memory_order_release);
      if (!waitFor([&] { return taken.load(std::memory_order_acquire) == round; },
                   round == 1 ? firstWait : patience)) {
        sent.store(kDone, std::memory_order_release);
        return {};
      }
      const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      if (i >= kWarmRounds) us.push_back(took.count());
    }
    medians[streaming] = median(std::move(us));
  }
  sent.store(kDone, std::memory_order_release);
  return StreamStoreCost{medians[0], medians[1]};
}

}  // namespace shm
}  // namespace ringguard
