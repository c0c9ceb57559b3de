#pragma once
// One sampler thread per process: polls its sources every interval and keeps the latest sample (and a short
// history) for the policy engine to read at a step boundary. Reading never blocks on a source.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/telemetry/signal.h"
#include "ringguard/telemetry/source.h"

namespace ringguard {

struct SamplerStats {
  uint64_t samples = 0;   // samples taken
  uint64_t totalNs = 0;   // time spent in the sources, summed (the sampler's cost)
  uint64_t maxNs = 0;     // the slowest sample
  uint64_t overruns = 0;  // samples that took longer than the interval
};

class Sampler {
 public:
  // `interval`: time between the starts of two samples; must be positive. `history`: samples kept.
  explicit Sampler(std::chrono::nanoseconds interval, size_t history = 64);
  ~Sampler();  // stops the thread
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Sources are added before start(); the sampler owns them. Returns the source for feeding.
  template <typename T>
  T* add(std::unique_ptr<T> source) {
    T* raw = source.get();
    addSource(std::move(source));
    return raw;
  }
  void addSource(std::unique_ptr<TelemetrySource> source);

  void start();
  void stop();  // idempotent
  // Takes one sample on the calling thread (tests, benchmarks, or a sampler that is not started).
  Sample sampleNow();

  // The latest sample (timeNs == 0 before the first one).
  Sample latest() const;
  std::vector<Sample> history() const;  // oldest first
  SamplerStats stats() const;
  std::chrono::nanoseconds interval() const { return interval_; }

 private:
  void run();

  const std::chrono::nanoseconds interval_;
  const size_t historySize_;
  std::vector<std::unique_ptr<TelemetrySource>> sources_;
  std::mutex sourcesMu_;  // one sample at a time (the thread or sampleNow)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;       // guarded by mu_
  std::deque<Sample> history_;  // guarded by mu_
  SamplerStats stats_;          // guarded by mu_
  std::thread thread_;
};

// Sampling interval from RINGGUARD_TELEMETRY_INTERVAL_MS (milliseconds; range and default as declared,
// docs/ENV.md); kInvalidArgument naming the variable and the value otherwise.
Status telemetryIntervalFromEnv(std::chrono::nanoseconds* out);

}  // namespace ringguard
