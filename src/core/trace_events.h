#pragma once
// Trace events: what the runtime did, recorded for the timeline (docs/GUIDE.md, "Reading a timeline").
// Layers record; the observability layer exports (src/observability/). Recording is a relaxed load when
// the timeline is off, and when it is on a fetch_add into a bounded buffer allocated once: no lock, no
// allocation, never blocking (events past the capacity are counted as dropped). Names and details are
// pointers to string literals, or to strings interned on rare events (intern()).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringguard {
namespace trace {

// What an event is; the exporter names its arguments by kind.
enum class Kind : uint8_t {
  kCollective,   // span: one collective on its communicator (seq, value = bytes; detail: the error;
                 //       a = direct: 0 for the host-driven pipeline's, 2 for a call of the direct path timed
                 //       on the device while the timeline was on: seq is then the path's own epoch, and the
                 //       span is recorded when the host next reads the path's clocks)
  kEnqueue,      // instant: a collective was handed in (value = bytes; a = direct: 1 when its caller ran it
                 //          at once, without the queue, 0 when it was queued, 2 when it was launched as a
                 //          kernel on the caller's stream by the direct path, whose span comes from
                 //          clocks on the device: kCollective)
  kSlice,        // span: one received slice waited for, verified and applied (a = step, b = slice,
                 //       c = sender, d = repair attempt; value = bytes)
  kDetect,       // instant: a slice failed verification (a = sender, b = receiver, c = step, d = slice;
                 //          detail: the reason)
  kRetransmit,   // instant: a slice resent from retained bytes (a = to, b = step, c = slice, d = attempt)
  kRepair,       // span: one repair round (a = attempt, b = slices replayed)
  kControl,      // span: one control exchange (name: fingerprint, verdict, ...; a = dissemination rounds,
                 //       b = its round)
  kPeerControl,  // span: one control message of a send/recv (name: fingerprint, verdict; seq: the exchange's
                 //       message number; a = the peer, b = 1 for a receive, 0 for a send)
  kGuard,        // instant: a guard event (name: detect, restore, replay, fallback, ...; detail: the op;
                 //          a = attempt)
  kDowngrade,    // instant: a downgrade decision (detail: the decision and the signals behind it)
  kCounter,      // counter: a telemetry sample's signal (name: the signal; value as a double in `real`)
  kReplica,      // the replica check (docs/REPLICAS.md): span "replica check" (a = the step checked, b = the
                 // first odd rank, -1 for none or not known yet; value = bytes fingerprinted); instants
                 // "replica mismatch", "replica repair", "replica warn", "replica raise", "replica escalate",
                 // "gradient outlier" (a = step, b = the first odd rank, c = the bucket of an outlier;
                 // detail: the message)
};

struct Event {
  uint64_t tsNs = 0;   // steady clock, nanoseconds
  uint64_t durNs = 0;  // spans
  uint64_t seq = 0;
  uint64_t value = 0;
  double real = 0.0;
  const char* name = "";
  const char* detail = nullptr;
  uint32_t track = 0;  // the communicator, or a fixed track (guard, policy)
  int32_t a = 0, b = 0, c = 0, d = 0;
  Kind kind = Kind::kCollective;
  bool span = false;
};

namespace detail {
extern std::atomic<bool> gOn;
}

// Whether events are recorded: the one test on the hot path.
inline bool on() { return detail::gOn.load(std::memory_order_relaxed); }

inline uint64_t nowNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// A bounded multi-producer buffer of events: record() claims a slot with one fetch_add and publishes it
// with a release store; past the capacity events are counted, not kept. Never blocks, never allocates.
class Recorder {
 public:
  explicit Recorder(size_t capacity);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void record(const Event& e);
  // Every event whose recording finished, in slot order (a slot claimed but still being written is left
  // out); the count that did not fit; the capacity.
  std::vector<Event> snapshot() const;
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  size_t capacity() const { return capacity_; }

 private:
  struct Slot;
  Slot* slots_;
  const size_t capacity_;
  std::atomic<uint64_t> next_{0};
  std::atomic<uint64_t> dropped_{0};
};

// The process's recorder. start() makes it with `capacity` events (kept for the process's life: recorders
// on any thread may hold it until exit) and turns recording on; once per process, later calls return
// false. RINGGUARD_TIMELINE starts it (observability).
bool start(size_t capacity);
void record(const Event& e);
std::vector<Event> snapshot();
uint64_t dropped();
size_t capacity();

// Tracks name what events belong to: "comm 0 (mpi, rank 1 of 4)", "guard", "policy". Registered when an
// object is made (not on the hot path); ids from 1, in registration order.
uint32_t newTrack(const std::string& label);
std::vector<std::string> trackLabels();  // index i: track i + 1

// A copy of `s` that lives as long as the process: for rare events' dynamic text (decisions, errors).
// Bounded: past kMaxInterned strings it returns "(text dropped)".
const char* intern(const std::string& s);
constexpr size_t kMaxInterned = 65536;

// Process-wide counts of the rare events (guard, downgrade), kept whether or not the timeline is on: the
// run summary reports them.
enum class Tally : uint8_t {
  kGuardDetect,
  kGuardRestore,
  kGuardReplay,
  kGuardFallback,
  kGuardTerminal,
  kDowngrade,
  kReplicaCheck,
  kReplicaMismatch,
  kReplicaRepair,
  kReplicaWarn,
  kReplicaRaise,
  kReplicaEscalate,
  kGradientOutlier,
  kCount
};
const char* tallyName(Tally t);
void tally(Tally t);
uint64_t tallied(Tally t);

// Records a span from construction to destruction (when the timeline was on at construction).
class Span {
 public:
  explicit Span(Kind kind, const char* name, uint32_t track, uint64_t seq = 0) {
    if (!on()) return;
    active_ = true;
    e_.kind = kind;
    e_.name = name;
    e_.track = track;
    e_.seq = seq;
    e_.span = true;
    e_.tsNs = nowNs();
  }
  ~Span() { end(); }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  // The event's fields, to fill before it ends.
  Event& event() { return e_; }
  // Records the span now rather than at the end of the scope (once): for a span that must be on the
  // timeline before the work it measures is reported done.
  void end() {
    if (!active_) return;
    active_ = false;
    e_.durNs = nowNs() - e_.tsNs;
    record(e_);
  }

 private:
  bool active_ = false;
  Event e_;
};

// An instant event now.
inline void instant(Kind kind, const char* name, uint32_t track, uint64_t seq, int32_t a = 0, int32_t b = 0,
                    int32_t c = 0, int32_t d = 0, const char* detail = nullptr, uint64_t value = 0) {
  if (!on()) return;
  Event e;
  e.kind = kind;
  e.name = name;
  e.track = track;
  e.seq = seq;
  e.a = a;
  e.b = b;
  e.c = c;
  e.d = d;
  e.detail = detail;
  e.value = value;
  e.tsNs = nowNs();
  record(e);
}

}  // namespace trace
}  // namespace ringguard
