#include "ringguard/telemetry/sampler.h"

#include <string>
#include <utility>

#include "core/env.h"
#include "core/thread_name.h"
#include "core/trace_events.h"
#include "ringguard/core/log.h"

namespace ringguard {

namespace {
int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Sampler::Sampler(std::chrono::nanoseconds interval, size_t history)
    : interval_(interval), historySize_(history == 0 ? 1 : history) {
  RINGGUARD_ENFORCE(interval.count() > 0, "Sampler: the interval must be positive");
}

Sampler::~Sampler() { stop(); }

void Sampler::addSource(std::unique_ptr<TelemetrySource> source) {
  RINGGUARD_ENFORCE(!thread_.joinable(), "Sampler: sources must be added before start()");
  RINGGUARD_ENFORCE(source != nullptr, "Sampler: null source");
  std::lock_guard<std::mutex> lock(sourcesMu_);
  sources_.push_back(std::move(source));
}

namespace {

uint32_t telemetryTrack() {
  static const uint32_t track = trace::newTrack("telemetry");
  return track;
}

// Every present signal as a counter track of the timeline (one series per signal name).
void recordCounters(const Sample& s) {
  if (!trace::on()) return;
  for (const Signal& sig : s.signals) {
    if (sig.missing) continue;
    trace::Event e;
    e.kind = trace::Kind::kCounter;
    e.name = trace::intern(sig.name);
    e.real = sig.value;
    e.track = telemetryTrack();
    e.tsNs = uint64_t(s.timeNs);
    trace::record(e);
  }
}

}  // namespace

Sample Sampler::sampleNow() {
  Sample s;
  uint64_t costNs = 0;
  {
    std::lock_guard<std::mutex> lock(sourcesMu_);
    const int64_t begin = steadyNs();
    s.timeNs = begin;
    for (auto& source : sources_) source->sample(begin, &s.signals);
    costNs = static_cast<uint64_t>(steadyNs() - begin);
  }
  recordCounters(s);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.samples;
  stats_.totalNs += costNs;
  if (costNs > stats_.maxNs) stats_.maxNs = costNs;
  if (costNs > static_cast<uint64_t>(interval_.count())) ++stats_.overruns;
  history_.push_back(s);
  while (history_.size() > historySize_) history_.pop_front();
  return s;
}

void Sampler::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { run(); });
}

void Sampler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Sampler::run() {
  nameThisThread("rg-telemetry");
  auto next = std::chrono::steady_clock::now();
  for (;;) {
    sampleNow();
    next += interval_;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // overran: start the next sample now, do not try to catch up
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_until(lock, next, [this] { return stopping_; })) return;
  }
}

Sample Sampler::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return history_.empty() ? Sample{} : history_.back();
}

std::vector<Sample> Sampler::history() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<Sample>(history_.begin(), history_.end());
}

SamplerStats Sampler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status telemetryIntervalFromEnv(std::chrono::nanoseconds* out) {
  uint64_t ms = 0;  // range and default: the setting's declaration (core/settings.cc)
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_TELEMETRY_INTERVAL_MS", envLookup, &ms));
  *out = std::chrono::milliseconds(ms);
  return Status::ok();
}

}  // namespace ringguard
