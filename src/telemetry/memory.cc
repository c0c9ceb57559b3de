#include "ringguard/telemetry/memory.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/logging.h"

namespace ringguard {

double StreamOrderedFragmentation::idleFraction(const PoolStatsSample& s) {
  if (s.reservedBytes == 0 || s.usedBytes >= s.reservedBytes) return 0.0;
  return static_cast<double>(s.reservedBytes - s.usedBytes) / static_cast<double>(s.reservedBytes);
}

double StreamOrderedFragmentation::update(const PoolStatsSample& s) {
  auto idleBytes = [](const PoolStatsSample& p) {
    return p.reservedBytes > p.usedBytes ? p.reservedBytes - p.usedBytes : uint64_t{0};
  };
  const double idle = idleFraction(s);
  if (primed_) {
    const uint64_t idlePrev = idleBytes(last_);
    const uint64_t usedGrowth = s.usedBytes > last_.usedBytes ? s.usedBytes - last_.usedBytes : 0;
    // The pool asked the driver for more memory although, by byte count, its idle bytes covered what was
    // newly handed out: those idle bytes could not serve the requests.
    const bool grewPastIdle = s.reservedBytes > last_.reservedBytes && idlePrev > 0 && usedGrowth <= idlePrev;
    // An allocation failed while the pool held idle bytes.
    const bool failedWithIdle = s.allocationFailures && last_.allocationFailures &&
                                *s.allocationFailures > *last_.allocationFailures && idleBytes(s) > 0;
    if (grewPastIdle || failedWithIdle) {
      ++events_;
      const uint64_t stranded = std::max(idlePrev, idleBytes(s));
      value_ = std::max(value_, static_cast<double>(stranded) / static_cast<double>(s.reservedBytes));
    }
  }
  // Stranded bytes are idle bytes: the estimate never exceeds the current idle fraction, and decays with it.
  value_ = std::min(value_, idle);
  last_ = s;
  primed_ = true;
  return value_;
}

// --- ringguard's pools -----------------------------------------------------------------------------------

PoolSource::PoolSource(std::string name) : source_("pool." + std::move(name)) {}

void PoolSource::feed(const PoolStatsSample& s) {
  std::lock_guard<std::mutex> lock(mu_);
  fed_ = true;
  last_ = s;
  fragmentation_ = measure_.update(s);
}

void PoolSource::sample(int64_t /*nowNs*/, std::vector<Signal>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto add = [&](const char* what, double value, const char* unit) {
    const std::string name = fmt::format("{}.{}", source_, what);
    out->push_back(fed_ ? Signal::present(name, value, unit, source_)
                        : Signal::absent(name, unit, source_, "pool statistics were never fed"));
  };
  add("reserved_bytes", static_cast<double>(last_.reservedBytes), "bytes");
  add("used_bytes", static_cast<double>(last_.usedBytes), "bytes");
  add("high_water_bytes", static_cast<double>(last_.highWaterBytes), "bytes");
  add("idle_fraction", StreamOrderedFragmentation::idleFraction(last_), "fraction");
  add("fragmentation", fragmentation_, "fraction");
  const std::string failures = source_ + ".allocation_failures";
  if (fed_ && last_.allocationFailures) {
    out->push_back(
        Signal::present(failures, static_cast<double>(*last_.allocationFailures), "count", source_));
  } else {
    out->push_back(Signal::absent(
        failures, "count", source_,
        fed_ ? "the pool does not count failed allocations" : "pool statistics were never fed"));
  }
}

// --- PyTorch's caching allocator ---------------------------------------------------------------------------

bool allocConfSelectsAsync(const std::string& conf) {
  // "key:value,key:value"; torch ignores whitespace around keys and values.
  size_t pos = 0;
  while (pos <= conf.size()) {
    size_t end = conf.find(',', pos);
    if (end == std::string::npos) end = conf.size();
    std::string item;
    for (size_t i = pos; i < end; ++i) {
      if (!std::isspace(static_cast<unsigned char>(conf[i]))) item += conf[i];
    }
    if (item == "backend:cudaMallocAsync") return true;
    pos = end + 1;
  }
  return false;
}

bool asyncAllocatorFromEnv() {
  // PYTORCH_ALLOC_CONF is the newer name; torch falls back to PYTORCH_CUDA_ALLOC_CONF.
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    const char* v = std::getenv(name);
    if (v != nullptr) return allocConfSelectsAsync(v);
  }
  return false;
}

double TorchAllocatorSource::nativeFragmentation(const TorchAllocatorStats& s) {
  if (s.reservedBytes == 0) return 0.0;
  return std::min(1.0, static_cast<double>(s.inactiveSplitBytes) / static_cast<double>(s.reservedBytes));
}

void TorchAllocatorSource::feed(const TorchAllocatorStats& s) {
  std::lock_guard<std::mutex> lock(mu_);
  fed_ = true;
  if (s.asyncBackend) {
    PoolStatsSample p;
    p.reservedBytes = s.reservedBytes;
    p.usedBytes = s.allocatedBytes;
    p.allocationFailures = s.numOoms;
    fragmentation_ = async_.update(p);
  } else {
    fragmentation_ = nativeFragmentation(s);
  }
  last_ = s;
}

void TorchAllocatorSource::sample(int64_t /*nowNs*/, std::vector<Signal>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  static const char* kNotFed = "torch allocator statistics were never fed";
  static const char* kAsync = "not tracked by torch's cudaMallocAsync backend (it reads 0)";
  auto add = [&](const char* what, double value, const char* unit, bool trackedUnderAsync) {
    const std::string name = fmt::format("torch.{}", what);
    if (!fed_) {
      out->push_back(Signal::absent(name, unit, "torch", kNotFed));
    } else if (last_.asyncBackend && !trackedUnderAsync) {
      out->push_back(Signal::absent(name, unit, "torch", kAsync));
    } else {
      out->push_back(Signal::present(name, value, unit, "torch"));
    }
  };
  add("reserved_bytes", static_cast<double>(last_.reservedBytes), "bytes", true);
  add("allocated_bytes", static_cast<double>(last_.allocatedBytes), "bytes", true);
  add("inactive_split_bytes", static_cast<double>(last_.inactiveSplitBytes), "bytes", false);
  add("num_alloc_retries", static_cast<double>(last_.numAllocRetries), "count", false);
  add("num_ooms", static_cast<double>(last_.numOoms), "count", true);
  add("async_backend", last_.asyncBackend ? 1.0 : 0.0, "bool", true);
  if (fed_ && last_.asyncBackend && last_.reservedBytes == 0) {
    out->push_back(Signal::absent("torch.fragmentation", "fraction", "torch",
                                  "cudaMallocAsync backend reports 0 reserved bytes"));
  } else {
    add("fragmentation", fragmentation_, "fraction", true);
  }
}

}  // namespace ringguard
