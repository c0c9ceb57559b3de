#include "core/trace_events.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>

namespace ringguard {
namespace trace {

namespace detail {
std::atomic<bool> gOn{false};
}

namespace {

// Set once by start() and never freed.
std::atomic<Recorder*> gRecorder{nullptr};

struct Names {
  std::mutex mu;
  std::vector<std::string> tracks;
  std::set<std::string> interned;  // node-based: pointers into it stay valid
};
Names& names() {
  static Names* n = new Names;  // never destroyed: events recorded during exit may still name tracks
  return *n;
}

std::atomic<uint64_t> gTallies[size_t(Tally::kCount)];

}  // namespace

struct Recorder::Slot {
  std::atomic<bool> ready{false};  // set (release) once `event` is written
  Event event;
};

Recorder::Recorder(size_t capacity) : slots_(new Slot[capacity]), capacity_(capacity) {
  // RINGGUARD_TIMELINE_EVENTS' description (core/settings.cc) gives the memory an event takes.
  static_assert(sizeof(Slot) <= 88, "update RINGGUARD_TIMELINE_EVENTS' bytes per event");
}

Recorder::~Recorder() { delete[] slots_; }

void Recorder::record(const Event& e) {
  const uint64_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i >= capacity_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  slots_[i].event = e;
  slots_[i].ready.store(true, std::memory_order_release);
}

std::vector<Event> Recorder::snapshot() const {
  std::vector<Event> out;
  const uint64_t n = std::min<uint64_t>(next_.load(std::memory_order_acquire), capacity_);
  out.reserve(size_t(n));
  for (uint64_t i = 0; i < n; ++i) {
    if (slots_[i].ready.load(std::memory_order_acquire)) out.push_back(slots_[i].event);
  }
  return out;
}

bool start(size_t capacity) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (gRecorder.load() != nullptr || capacity == 0) return false;
  gRecorder.store(new Recorder(capacity), std::memory_order_release);
  detail::gOn.store(true, std::memory_order_release);
  return true;
}

void record(const Event& e) {
  if (Recorder* r = gRecorder.load(std::memory_order_acquire)) r->record(e);
}

std::vector<Event> snapshot() {
  Recorder* r = gRecorder.load(std::memory_order_acquire);
  return r == nullptr ? std::vector<Event>{} : r->snapshot();
}

uint64_t dropped() {
  Recorder* r = gRecorder.load(std::memory_order_acquire);
  return r == nullptr ? 0 : r->dropped();
}

size_t capacity() {
  Recorder* r = gRecorder.load(std::memory_order_acquire);
  return r == nullptr ? 0 : r->capacity();
}

uint32_t newTrack(const std::string& label) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  n.tracks.push_back(label);
  return uint32_t(n.tracks.size());
}

std::vector<std::string> trackLabels() {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  return n.tracks;
}

const char* intern(const std::string& s) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  auto it = n.interned.find(s);
  if (it != n.interned.end()) return it->c_str();
  if (n.interned.size() >= kMaxInterned) return "(text dropped)";
  return n.interned.insert(s).first->c_str();
}

const char* tallyName(Tally t) {
  switch (t) {
    case Tally::kGuardDetect:
      return "guard_detections";
    case Tally::kGuardRestore:
      return "guard_restores";
    case Tally::kGuardReplay:
      return "guard_replays";
    case Tally::kGuardFallback:
      return "guard_fallbacks";
    case Tally::kGuardTerminal:
      return "guard_terminal_actions";
    case Tally::kDowngrade:
      return "downgrade_decisions";
    case Tally::kReplicaCheck:
      return "replica_checks";
    case Tally::kReplicaMismatch:
      return "replica_mismatches";
    case Tally::kReplicaRepair:
      return "replica_repairs";
    case Tally::kReplicaWarn:
      return "replica_warnings";
    case Tally::kReplicaRaise:
      return "replica_raised";
    case Tally::kReplicaEscalate:
      return "replica_escalations";
    case Tally::kGradientOutlier:
      return "gradient_outliers";
    case Tally::kCount:
      break;
  }
  return "invalid";
}

void tally(Tally t) { gTallies[size_t(t)].fetch_add(1, std::memory_order_relaxed); }

uint64_t tallied(Tally t) { return gTallies[size_t(t)].load(std::memory_order_relaxed); }

}  // namespace trace
}  // namespace ringguard
