// The fault soak (issue 17): a seeded, randomized mix of every fault mode (probabilities up to 1e-2 per
// slice, repeats within and beyond the retry budget, damaged control frames, late slices), every
// collective, dtype and reduce op, counts from 0 to many slices, each result checked bit for bit against
// its closed form (tests/unit/verifiable.h). Not a CI test: it runs for minutes (scripts/run_soak.sh runs
// it at 2..8 ranks); ctest soak_np3 runs it briefly so that it keeps building and passing. Figures:
// docs/RELIABILITY.md, "Fault soak".
//
//   mpirun -np 4 build/tests/soak/ringguard_soak --seconds 30 --seed 1
//
// Every rank draws the same choices (one seed; one generator per round, so a round replays alone with
// --round), hence issues the same collectives. Each round makes a new communicator with Options of its own
// (slice size, slots, retries and the fault settings) through the runtime's factory over an MPI bootstrap.
// After every collective the ranks agree over MPI_COMM_WORLD on what happened:
//   escaped: a collective returned OK with a result (or an input it must not touch, or the bytes around
//            it) that is not bit-identical to the closed form, or the library counted an injected
//            corruption that passed verification;
//   failed:  an error where none was expected, a persistent corruption that ended without one, or a
//            successful collective whose detections differ from its injections;
//   hangs:   a collective that did not return within its bound (3 timeouts + 5 s unless --hang-ms); it is
//            aborted and the soak goes on; if even that does not return, the job ends (exit code 4).
// An error is expected only in a round that exceeds the budget on purpose (a fault repeated on more
// attempts than the retries allow, or a damaged control frame, which is never retransmitted unless it
// carries a small collective's payload) and only for a collective that had a fault injected; it ends the
// round (the communicator is poisoned).
#include <mpi.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../mpi/test_util.h"
#include "ringguard/mpi/mpi_communicator.h"
#include "ringguard/runtime/factories.h"

namespace ringguard {
namespace soak {
namespace {

using Clock = std::chrono::steady_clock;
using testing::expectedResult;
using testing::makeInput;
using testing::pattern;
using testing::sameBytes;

constexpr int kExitFindings = 1, kExitUsage = 2, kExitSetup = 3, kExitHang = 4;

struct Args {
  double seconds = 30;
  uint64_t collectives = 0;  // 0: no bound
  uint64_t seed = 1;
  int64_t round = -1;  // >= 0: that round alone
  int64_t timeoutMs = 10000;
  int64_t hangMs = 0;  // 0: 3 timeouts + 5 s
  double maxProb = 1e-2;
  size_t maxBytes = size_t(192) << 10;
  bool verbose = false;
};

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The one generator of every choice: splitmix64, the same on every rank and platform (which
// std::uniform_*_distribution is not).
class Dice {
 public:
  explicit Dice(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  double unit() { return double(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }
  double logUniform(double lo, double hi) { return lo * std::pow(hi / lo, unit()); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[size_t(below(v.size()))];
  }

 private:
  uint64_t state_;
};

// ---- rounds: a communicator and its fault settings --------------------------------------------------

enum class Budget { kWithin, kExceeded, kControl };
const char* budgetName(Budget b) {
  return b == Budget::kWithin ? "within" : b == Budget::kExceeded ? "exceeded" : "control";
}

const std::vector<FaultMode> kWithinModes = {
    FaultMode::kBitFlip, FaultMode::kMultiBit,   FaultMode::kBurst, FaultMode::kGarbage,
    FaultMode::kTrailer, FaultMode::kRetransmit, FaultMode::kDelay};
const std::vector<FaultMode> kCorruptingModes = {FaultMode::kBitFlip, FaultMode::kMultiBit,
                                                 FaultMode::kBurst,   FaultMode::kGarbage,
                                                 FaultMode::kTrailer, FaultMode::kRetransmit};

struct Round {
  uint64_t index = 0;
  Budget budget = Budget::kWithin;
  Options options;
  int collectives = 0;

  std::string describe() const {
    const FaultOptions& f = options.fault;
    std::ostringstream os;
    os << "round " << index << " (" << budgetName(budget) << "): " << faultModeName(f.mode)
       << " p=" << f.probability << " repeat=" << f.repeat << " retries=" << options.maxRetries
       << " schedule=" << f.schedule.size() << " slice=" << options.sliceBytes << " slots=" << options.slots;
    if (f.mode == FaultMode::kMultiBit) os << " bits=" << f.bits;
    if (f.mode == FaultMode::kBurst) os << " burst_bits=" << f.burstBits;
    if (f.mode == FaultMode::kDelay) os << " delay_ms=" << f.delayMs;
    os << " collectives=" << collectives;
    return os.str();
  }
};

// Within the budget (three rounds in four) every collective must succeed: a repeat never above the
// retries (retransmit mode corrupts two attempts), a delay far below the timeout. Beyond it, a slice that
// is hit stays bad for more attempts than the retries allow; control rounds damage control frames.
Round drawRound(Dice& d, uint64_t index, int n, const Options& base, const Args& a) {
  Round r;
  r.index = index;
  r.options = base;
  Options& o = r.options;
  FaultOptions& f = o.fault;
  f = FaultOptions();
  const std::vector<size_t> sliceBytes = {0, 64, 100, 256, 1000, 4096, 16384, 65536};  // 0: the transport's
  const std::vector<int> slots = {0, 2, 3, 4, 8};
  o.sliceBytes = d.pick(sliceBytes);
  o.slots = d.pick(slots);
  o.maxRetries = 1 + int(d.below(5));
  r.collectives = 4 + int(d.below(21));
  const uint64_t kind = d.below(100);
  r.budget = kind < 76 ? Budget::kWithin : kind < 90 ? Budget::kExceeded : Budget::kControl;
  f.seed = d.next();
  f.bits = 1 + int(d.below(64));
  f.burstBits = 2 + int(d.below(31));
  f.delayMs = 1 + int(d.below(uint64_t(std::clamp<int64_t>(a.timeoutMs / 100, 1, 20))));
  double p = d.chance(0.1) ? 0.0 : d.logUniform(a.maxProb / 100, a.maxProb);
  switch (r.budget) {
    case Budget::kWithin:
      f.mode = d.pick(kWithinModes);
      if (f.mode == FaultMode::kRetransmit) o.maxRetries = std::max(o.maxRetries, 2);
      f.repeat = d.chance(0.6) ? 1 : 1 + int(d.below(uint64_t(o.maxRetries)));
      if (f.mode == FaultMode::kDelay) p /= 3;  // each one holds the sender's progress thread
      break;
    case Budget::kExceeded:
      f.mode = d.pick(kCorruptingModes);
      f.repeat = o.maxRetries + 1 + int(d.below(3));
      break;
    case Budget::kControl:
      f.mode = FaultMode::kControl;
      break;
  }
  f.probability = p;
  // Exact hits too (at least one when nothing is random), so the dice cannot leave a round fault-free.
  const int entries = int(d.below(4)) + (p == 0.0 ? 1 : 0);
  for (int i = 0; i < entries; ++i) {
    FaultScheduleEntry e;
    if (f.mode == FaultMode::kControl) {  // frame:tag:sender:receiver
      e.collective = d.below(4);
      e.step = 1 + int(d.below(3));
      e.rank = int(d.below(uint64_t(n)));
      e.slice = (e.rank + 1 + int(d.below(uint64_t(n - 1)))) % n;
    } else {
      e.collective = d.below(uint64_t(r.collectives));
      e.step = int(d.below(uint64_t(std::max(1, 2 * (n - 1)))));
      e.slice = int(d.below(3));
      e.rank = int(d.below(uint64_t(n)));
    }
    f.schedule.push_back(e);
  }
  o.timeout = std::chrono::milliseconds(a.timeoutMs);
  return r;
}

// ---- calls: one collective and its arguments --------------------------------------------------------

enum class Kind { kAllreduce, kReduceScatter, kAllgather, kBroadcast, kAlltoall, kSendRecv };
const char* kindName(Kind k) {
  switch (k) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAlltoall:
      return "alltoall";
    case Kind::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

struct Call {
  Kind kind = Kind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // allreduce, reduce_scatter
  size_t count = 0;              // the call's count argument (alltoall: the largest split)
  bool inPlace = false;          // allreduce, reduce_scatter, allgather, broadcast
  int root = 0;                  // broadcast
  int shift = 1;                 // sendrecv: to rank + shift, from rank - shift
  bool chain = false;            // sendrecv: to rank + 1 and from rank - 1 where they exist
  std::vector<size_t> split;     // alltoall: elements from rank i to rank j at i * n + j; empty: `count`
  size_t gap = 0;                // alltoall (split): elements left untouched between received blocks

  std::string describe() const {
    std::ostringstream os;
    os << kindName(kind) << " " << dataTypeName(dtype);
    if (kind == Kind::kAllreduce || kind == Kind::kReduceScatter) {
      os << " " << reduceOpName(op);
      if (isPremulSum(op)) os << "(" << premulFactor(op) << ")";
    }
    os << " count=" << count;
    if (kind == Kind::kBroadcast) os << " root=" << root;
    if (kind == Kind::kSendRecv) os << (chain ? " chain" : " shift=" + std::to_string(shift));
    if (kind == Kind::kAlltoall) os << (split.empty() ? " equal" : " split gap=" + std::to_string(gap));
    if (kind != Kind::kAlltoall && kind != Kind::kSendRecv) os << (inPlace ? " in-place" : " out-of-place");
    return os.str();
  }
};

// The dtypes that some op reduces, and the ops of each (the premul_sum ones made once, in main).
struct Catalogue {
  std::vector<DataType> all{std::begin(kAllDataTypes), std::end(kAllDataTypes)};
  std::vector<DataType> reducible;
  std::vector<ReduceOp> premul;

  std::vector<ReduceOp> opsFor(DataType t) const {
    std::vector<ReduceOp> ops;
    for (ReduceOp op : kAllReduceOps) {
      if (reduceSupported(t, op)) ops.push_back(op);
    }
    for (ReduceOp op : premul) {
      if (reduceSupported(t, op)) ops.push_back(op);
    }
    return ops;
  }
};

// Elements per block: 0 to 3, around the world size, odd counts mostly under a slice, and counts of many
// slices (rarely a multiple of one); `blocks` blocks of them fit in `maxBytes`.
size_t drawCount(Dice& d, int n, size_t esize, size_t sliceBytes, size_t blocks, size_t maxBytes) {
  const size_t cap = std::max<size_t>(1, maxBytes / (esize * blocks));
  const size_t sliceElems = std::max<size_t>(1, (sliceBytes ? sliceBytes : size_t(1) << 20) / esize);
  size_t c = 0;
  switch (d.below(8)) {
    case 0:
      c = d.below(4);
      break;
    case 1:
      c = size_t(n) - 1 + d.below(3);
      break;
    case 2:
    case 3:
      c = 1 + 2 * d.below(400);
      break;
    default:
      c = sliceElems * (1 + d.below(24)) + d.below(sliceElems);
      break;
  }
  return std::min(c, cap);
}

Call drawCall(Dice& d, int n, const Round& r, const Catalogue& cat, size_t maxBytes) {
  Call c;
  c.kind = Kind(d.below(6));
  if (c.kind == Kind::kAllreduce || c.kind == Kind::kReduceScatter) {
    c.dtype = d.pick(cat.reducible);
    c.op = d.pick(cat.opsFor(c.dtype));
  } else {
    c.dtype = d.pick(cat.all);  // float8 too: copy-only
  }
  const bool blocked =
      c.kind == Kind::kReduceScatter || c.kind == Kind::kAllgather || c.kind == Kind::kAlltoall;
  c.count = drawCount(d, n, dataTypeSize(c.dtype), r.options.sliceBytes, blocked ? size_t(n) : 1, maxBytes);
  c.inPlace = d.chance(0.5);
  c.root = int(d.below(uint64_t(n)));
  c.shift = 1 + int(d.below(uint64_t(n - 1)));
  c.chain = d.chance(0.25);
  if (c.kind == Kind::kAlltoall && d.chance(0.6)) {
    c.split.resize(size_t(n) * size_t(n));
    for (size_t& s : c.split) s = d.below(c.count + 1);
    c.gap = d.below(2);
  }
  return c;
}

// ---- running and checking one call ------------------------------------------------------------------

constexpr uint8_t kGuard = 0xAB;  // the byte past every buffer, and what fills a buffer made without data

// The buffers of one call. After a failed collective they are kept until the process ends: a peer's late
// progress may still read a send of it or write a receive (docs/ARCHITECTURE.md, "Errors").
struct Buffers {
  std::vector<std::vector<uint8_t>> held;
  uint8_t* make(size_t bytes, const std::vector<uint8_t>& init) {
    held.emplace_back(bytes + 1, kGuard);
    if (!init.empty()) std::memcpy(held.back().data(), init.data(), std::min(bytes, init.size()));
    return held.back().data();
  }
};

// Empty when `got` holds `want`; else where and how it differs.
std::string differs(const std::string& what, const uint8_t* got, const uint8_t* want, size_t bytes) {
  if (sameBytes(got, want, bytes)) return "";
  size_t i = 0;
  while (got[i] == want[i]) ++i;
  char text[96];
  snprintf(text, sizeof text, " differs at byte %zu of %zu: 0x%02x, expected 0x%02x", i, bytes, got[i],
           want[i]);
  return what + text;
}
std::string guardTouched(const std::string& what, const uint8_t* p, size_t bytes) {
  return p[bytes] == kGuard ? "" : "the byte after " + what + " was written";
}

// The call on this rank: its Status, and when it succeeded, what is wrong with the result (empty: every
// byte as the closed form says).
struct Result {
  Status status;
  std::string wrong;
};

Result runCall(Communicator& comm, const Call& c, Buffers& b) {
  const int me = comm.rank(), n = comm.size();
  const DataType t = c.dtype;
  const size_t es = dataTypeSize(t), bytes = c.count * es, nb = size_t(n);
  Result res;
  std::string& wrong = res.wrong;
  auto note = [&wrong](std::string why) {
    if (wrong.empty()) wrong = std::move(why);
  };
  switch (c.kind) {
    case Kind::kAllreduce: {
      const std::vector<uint8_t> in = makeInput(t, c.op, me, c.count);
      uint8_t* send = b.make(bytes, in);
      uint8_t* recv = c.inPlace ? send : b.make(bytes, {});
      res.status = comm.allreduceAsync(send, recv, c.count, t, c.op)->wait();
      if (!res.status.isOk()) return res;
      note(differs("the result", recv, expectedResult(t, c.op, n, c.count).data(), bytes));
      note(guardTouched("the result", recv, bytes));
      if (!c.inPlace) note(differs("the input", send, in.data(), bytes));
      break;
    }
    case Kind::kReduceScatter: {
      const std::vector<uint8_t> in = makeInput(t, c.op, me, c.count * nb);
      uint8_t* send = b.make(bytes * nb, in);
      uint8_t* recv = c.inPlace ? send + size_t(me) * bytes : b.make(bytes, {});
      res.status = comm.reduceScatterAsync(send, recv, c.count, t, c.op)->wait();
      if (!res.status.isOk()) return res;
      const std::vector<uint8_t> full = expectedResult(t, c.op, n, c.count * nb);
      note(differs("the block", recv, full.data() + size_t(me) * bytes, bytes));
      note(guardTouched("the input", send, bytes * nb));
      if (!c.inPlace) {
        note(guardTouched("the block", recv, bytes));
        note(differs("the input", send, in.data(), bytes * nb));
      }
      break;
    }
    case Kind::kAllgather: {
      const std::vector<uint8_t> mine = pattern(t, me, c.count);
      uint8_t *send = nullptr, *recv = nullptr;
      if (c.inPlace) {
        std::vector<uint8_t> init(bytes * nb, 0);
        if (bytes) std::memcpy(init.data() + size_t(me) * bytes, mine.data(), bytes);
        recv = b.make(bytes * nb, init);
        send = recv + size_t(me) * bytes;
      } else {
        send = b.make(bytes, mine);
        recv = b.make(bytes * nb, {});
      }
      res.status = comm.allgatherAsync(send, recv, c.count, t)->wait();
      if (!res.status.isOk()) return res;
      for (int r = 0; r < n; ++r) {
        note(differs("block " + std::to_string(r), recv + size_t(r) * bytes, pattern(t, r, c.count).data(),
                     bytes));
      }
      note(guardTouched("the result", recv, bytes * nb));
      if (!c.inPlace) note(differs("the input", send, mine.data(), bytes));
      break;
    }
    case Kind::kBroadcast: {
      const std::vector<uint8_t> want = pattern(t, c.root, c.count);
      const bool root = me == c.root;
      uint8_t *send = nullptr, *recv = nullptr;
      if (c.inPlace) {
        send = recv = b.make(bytes, root ? want : std::vector<uint8_t>());
      } else {
        send = root ? b.make(bytes, want) : nullptr;  // read on the root only
        recv = b.make(bytes, {});
      }
      res.status = comm.broadcastAsync(send, recv, c.count, t, c.root)->wait();
      if (!res.status.isOk()) return res;
      note(differs("the result", recv, want.data(), bytes));
      note(guardTouched("the result", recv, bytes));
      if (send && send != recv) note(differs("the input", send, want.data(), bytes));
      break;
    }
    case Kind::kSendRecv: {
      const int dst = c.chain ? (me + 1 < n ? me + 1 : -1) : (me + c.shift) % n;
      const int src = c.chain ? (me > 0 ? me - 1 : -1) : (me + n - c.shift) % n;
      const std::vector<uint8_t> mine = pattern(t, me, c.count);
      uint8_t* send = b.make(bytes, mine);
      uint8_t* recv = b.make(bytes, {});
      res.status =
          comm.sendRecvAsync(send, dst >= 0 ? c.count : 0, dst, recv, src >= 0 ? c.count : 0, src, t)->wait();
      if (!res.status.isOk()) return res;
      if (src >= 0) {
        note(differs("the message from rank " + std::to_string(src), recv, pattern(t, src, c.count).data(),
                     bytes));
      } else {
        note(differs("the unused receive buffer", recv, std::vector<uint8_t>(bytes, kGuard).data(), bytes));
      }
      note(guardTouched("the receive buffer", recv, bytes));
      note(differs("the input", send, mine.data(), bytes));
      break;
    }
    case Kind::kAlltoall: {
      std::vector<size_t> sc(nb), sd(nb), rc(nb), rd(nb);
      size_t sent = 0, received = 0;
      for (size_t p = 0; p < nb; ++p) {
        sc[p] = c.split.empty() ? c.count : c.split[size_t(me) * nb + p];
        rc[p] = c.split.empty() ? c.count : c.split[p * nb + size_t(me)];
        sd[p] = sent;
        rd[p] = received;
        sent += sc[p];
        received += rc[p] + c.gap;
      }
      std::vector<uint8_t> in;
      for (size_t p = 0; p < nb; ++p) {
        const std::vector<uint8_t> block = pattern(t, me * n + int(p), sc[p]);
        in.insert(in.end(), block.begin(), block.end());
      }
      uint8_t* send = b.make(sent * es, in);
      uint8_t* recv = b.make(received * es, {});
      res.status = (c.split.empty() ? comm.alltoallAsync(send, recv, c.count, t)
                                    : comm.alltoallAsync(send, sc, sd, recv, rc, rd, t))
                       ->wait();
      if (!res.status.isOk()) return res;
      const std::vector<uint8_t> untouched(c.gap * es, kGuard);
      for (size_t p = 0; p < nb; ++p) {
        uint8_t* block = recv + rd[p] * es;
        note(differs("the block from rank " + std::to_string(p), block,
                     pattern(t, int(p) * n + me, rc[p]).data(), rc[p] * es));
        note(differs("the gap after block " + std::to_string(p), block + rc[p] * es, untouched.data(),
                     c.gap * es));
      }
      note(guardTouched("the result", recv, received * es));
      note(differs("the input", send, in.data(), sent * es));
      break;
    }
  }
  return res;
}

// ---- the watchdog -----------------------------------------------------------------------------------

// Guards one collective at a time: past `bound` it aborts the communicator (the collective returns
// kAborted and the peers learn it), which the soak counts as a hang; if the collective still has not
// returned `grace` later, nothing can unblock it and the job ends (MPI_Abort, exit code 4).
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds bound, std::chrono::milliseconds grace)
      : bound_(bound), grace_(grace), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void arm(Communicator* comm, std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    comm_ = comm;
    what_ = std::move(what);
    fired_ = false;
    deadline_ = Clock::now() + bound_;
    cv_.notify_all();
  }
  // True when the collective passed its bound.
  bool disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    comm_ = nullptr;
    return fired_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (comm_ == nullptr) {
        cv_.wait(lock);
        continue;
      }
      if (Clock::now() < deadline_) {
        cv_.wait_until(lock, deadline_);
        continue;
      }
      if (!fired_) {
        fired_ = true;
        spdlog::error("HANG: {} did not return within {} ms; aborting its communicator", what_,
                      bound_.count());
        comm_->abort("soak watchdog: " + what_ + " passed its bound");  // under the lock: comm_ stays alive
        deadline_ = Clock::now() + grace_;
      } else {
        spdlog::critical("HANG: {} did not return {} ms after abort(); ending the job", what_,
                         grace_.count());
        spdlog::default_logger()->flush();
        MPI_Abort(MPI_COMM_WORLD, kExitHang);
      }
    }
  }

  const std::chrono::milliseconds bound_, grace_;
  std::mutex mutex_;
  std::condition_variable cv_;
  Communicator* comm_ = nullptr;
  std::string what_;
  Clock::time_point deadline_;
  bool fired_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: started after every member it reads
};

// ---- tallies ----------------------------------------------------------------------------------------

// What every rank contributes per collective (summed over ranks).
enum Field {
  kErrors,
  kWrong,
  kHung,
  kTimeouts,
  kInjected,
  kDetected,
  kRetransmitted,
  kLibEscaped,
  kDelayed,
  kFields
};

struct Tally {
  uint64_t rounds = 0, collectives = 0, injected = 0, detected = 0, retransmitted = 0, delayed = 0,
           escaped = 0, failed = 0, hangs = 0, expectedErrors = 0;
  void add(const Tally& o) {
    rounds += o.rounds;
    collectives += o.collectives;
    injected += o.injected;
    detected += o.detected;
    retransmitted += o.retransmitted;
    delayed += o.delayed;
    escaped += o.escaped;
    failed += o.failed;
    hangs += o.hangs;
    expectedErrors += o.expectedErrors;
  }
};

// Judges one collective from every rank's sums (identical on every rank, so all agree to end a round).
// Returns true when the round must end.
bool judge(const std::array<uint64_t, kFields>& all, const Round& r, const Call& c, uint64_t index,
           const Args& a, int n, Tally* t) {
  const std::string where = r.describe() + ", collective " + std::to_string(index) + ": " + c.describe();
  const bool rank0 = testing::worldRank() == 0;
  auto reproduce = [&] {
    if (rank0) {
      spdlog::error("  reproduce: mpirun -np {} ringguard_soak --seed {} --round {} --timeout-ms {}", n,
                    a.seed, r.index, a.timeoutMs);
    }
  };
  t->collectives++;
  t->injected += all[kInjected];
  t->detected += all[kDetected];
  t->retransmitted += all[kRetransmitted];
  t->delayed += all[kDelayed];
  t->escaped += all[kWrong] + all[kLibEscaped];
  if (all[kWrong] + all[kLibEscaped] > 0) {
    if (rank0)
      spdlog::error("ESCAPE: {}: {} wrong result(s) returned as OK", where, all[kWrong] + all[kLibEscaped]);
    reproduce();
  }
  if (all[kHung] > 0) {
    t->hangs++;
    if (rank0) spdlog::error("HANG: {}", where);
    reproduce();
    return true;
  }
  if (all[kErrors] > 0) {
    const bool expected = r.budget != Budget::kWithin && all[kInjected] > 0 && all[kTimeouts] == 0;
    if (expected) {
      t->expectedErrors++;
    } else {
      t->failed++;
      if (rank0) {
        spdlog::error(
            "FAILED: {}: an error on {} rank(s) ({} timeouts, {} faults injected) where none was expected",
            where, all[kErrors], all[kTimeouts], all[kInjected]);
      }
      reproduce();
    }
    return true;
  }
  // A damaged fingerprint frame that carries a small collective's payload is repaired like a slice
  // (docs/design/protocol.md, "Small collectives in one round"): no error, every damage detected and resent.
  const bool repaired = r.budget == Budget::kControl && all[kInjected] == all[kDetected] &&
                        all[kRetransmitted] >= all[kInjected];
  if (r.budget != Budget::kWithin && all[kInjected] > 0 && !repaired) {
    t->failed++;
    if (rank0)
      spdlog::error("FAILED: {}: {} fault(s) beyond the budget injected, yet no error", where,
                    all[kInjected]);
    reproduce();
  } else if (all[kInjected] != all[kDetected]) {
    t->failed++;
    if (rank0)
      spdlog::error("FAILED: {}: {} injected but {} detected", where, all[kInjected], all[kDetected]);
    reproduce();
  }
  return false;
}

int soakMain(int argc, char** argv) {
  CLI::App app{
      "ringguard_soak: a randomized mix of every fault mode, collective, dtype and op, each result checked "
      "exactly (run under mpirun, 2 to 8 ranks; docs/RELIABILITY.md, \"Fault soak\")"};
  Args a;
  app.add_option("--seconds", a.seconds, "Time budget: no round starts after it")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e7));
  app.add_option("--collectives", a.collectives, "No round starts after this many collectives (0: no bound)")
      ->capture_default_str();
  app.add_option("--seed", a.seed, "Seed of every random choice (the same on every rank)")
      ->capture_default_str();
  app.add_option("--round", a.round, "Run this round alone (a reproducer: the round the soak names)")
      ->check(CLI::NonNegativeNumber);
  auto* timeout = app.add_option("--timeout-ms", a.timeoutMs,
                                 "Communicator timeout (Options::timeout); default 10000, or "
                                 "RINGGUARD_TIMEOUT_MS when that is set and this is not")
                      ->check(CLI::Range(int64_t(1), Options::kMaxTimeoutMs));
  app.add_option("--hang-ms", a.hangMs,
                 "A collective not done after this long is a hang (0: 3 timeouts + 5 s)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-prob", a.maxProb, "Largest fault probability per slice transfer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-bytes", a.maxBytes, "Largest buffer of one call, in bytes")
      ->capture_default_str()
      ->check(CLI::Range(size_t(64), size_t(1) << 30));
  app.add_flag("-v,--verbose", a.verbose, "Log every round's settings (rank 0)");

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int me = testing::worldRank(), n = testing::worldSize();
  try {
    app.parse(argc, argv);
  } catch (const CLI::Error& e) {
    const int rc = me == 0 ? app.exit(e) : e.get_exit_code();
    MPI_Finalize();
    return rc == 0 ? 0 : kExitUsage;
  }
  auto logger = spdlog::stderr_color_mt("soak");
  logger->set_pattern("[%H:%M:%S.%e] [soak] [rank " + std::to_string(me) + "] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  auto setupError = [&](const std::string& why) {
    if (me == 0) spdlog::error("{}", why);
    MPI_Finalize();
    return kExitSetup;
  };
  if (provided < MPI_THREAD_MULTIPLE) return setupError("MPI does not provide MPI_THREAD_MULTIPLE");
  if (n < 2) return setupError("ringguard_soak needs at least 2 ranks (mpirun -np 2..8)");
  if (a.maxProb <= 0.0) return setupError("--max-prob must be above 0");

  Options base;  // RINGGUARD_* settings the soak does not vary (log level, NaN check, ...) apply
  if (Status st = Options::fromEnv(&base); !st.isOk()) return setupError(st.toString());
  if (timeout->count() == 0 && std::getenv("RINGGUARD_TIMEOUT_MS")) a.timeoutMs = base.timeout.count();
  const std::chrono::milliseconds hangBound(a.hangMs > 0 ? a.hangMs : 3 * a.timeoutMs + 5000);

  Catalogue cat;
  for (double factor : {0.5, 2.0, 0.25}) {  // powers of two: the scaled sums stay exact
    ReduceOp op;
    if (Status st = makePremulSum(factor, &op); !st.isOk()) return setupError(st.toString());
    cat.premul.push_back(op);
  }
  for (DataType t : cat.all) {
    if (!cat.opsFor(t).empty()) cat.reducible.push_back(t);
  }

  std::unique_ptr<Bootstrap> bootstrap;
  if (Status st = mpi::createBootstrap(&bootstrap); !st.isOk()) return setupError(st.toString());
  if (me == 0) {
    spdlog::info("ranks={} seed={} seconds={} timeout_ms={} hang_ms={} max_prob={} max_bytes={}", n, a.seed,
                 a.seconds, a.timeoutMs, hangBound.count(), a.maxProb, a.maxBytes);
  }

  Watchdog watchdog(hangBound, std::chrono::milliseconds(std::max<int64_t>(10000, a.timeoutMs)));
  std::vector<std::vector<std::vector<uint8_t>>> kept;  // the buffers of failed collectives
  Counters library;                                     // this rank's counters, every communicator's
  std::array<Tally, 3 * 8> byMode{};                    // [budget * 8 + mode]
  Tally total;
  const auto start = Clock::now();
  for (uint64_t index = a.round >= 0 ? uint64_t(a.round) : 0;; ++index) {
    int stop = 0;
    if (me == 0) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      stop = (a.round >= 0 && index > uint64_t(a.round)) || elapsed >= a.seconds ||
             (a.collectives > 0 && total.collectives >= a.collectives);
    }
    MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (stop) break;
    Dice dice(mix64(mix64(a.seed) + index));
    const Round round = drawRound(dice, index, n, base, a);
    if (a.verbose && me == 0) spdlog::info("{}", round.describe());
    Tally& mode = byMode[size_t(round.budget) * 8 + size_t(round.options.fault.mode)];
    Tally t;
    t.rounds = 1;
    std::unique_ptr<Communicator> comm;
    if (Status st = createHostCommunicator(*bootstrap, round.options, &comm); !st.isOk()) {
      if (me == 0)
        spdlog::error("FAILED: {}: the communicator was refused: {}", round.describe(), st.toString());
      t.failed++;  // the same on every rank: the options are
    } else {
      for (int i = 0; i < round.collectives; ++i) {
        const Call call = drawCall(dice, n, round, cat, a.maxBytes);
        Buffers buffers;
        const Counters before = comm->counters();
        watchdog.arm(comm.get(),
                     round.describe() + ", collective " + std::to_string(i) + ": " + call.describe());
        const Result res = runCall(*comm, call, buffers);
        const bool hung = watchdog.disarm();
        const Counters d = comm->counters().since(before);
        if (!res.status.isOk()) {
          kept.push_back(std::move(buffers.held));
          if (a.verbose || round.budget == Budget::kWithin) {
            spdlog::warn("collective {} ({}) failed here: {}", i, call.describe(), res.status.toString());
          }
        } else if (!res.wrong.empty()) {
          spdlog::error("collective {} ({}) returned OK but {}", i, call.describe(), res.wrong);
        }
        std::array<uint64_t, kFields> mine{}, all{};
        mine[kErrors] = !res.status.isOk();
        mine[kWrong] = res.status.isOk() && !res.wrong.empty();
        mine[kHung] = hung;
        mine[kTimeouts] = res.status.code() == StatusCode::kTimeout;
        mine[kInjected] = d.injected;
        mine[kDetected] = d.detected;
        mine[kRetransmitted] = d.retransmitted;
        mine[kLibEscaped] = d.escaped;
        mine[kDelayed] = d.delayed;
        MPI_Allreduce(mine.data(), all.data(), kFields, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        if (judge(all, round, call, uint64_t(i), a, n, &t)) break;
      }
      library += comm->counters();
      comm.reset();
    }
    mode.add(t);
    total.add(t);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // The library's own counters, summed over ranks: what the final line reports.
  uint64_t mine[4] = {library.injected, library.detected, library.retransmitted, library.escaped},
           sum[4] = {};
  MPI_Reduce(mine, sum, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  int rc = 0;
  if (me == 0) {
    for (size_t k = 0; k < byMode.size(); ++k) {
      const Tally& m = byMode[k];
      if (m.rounds == 0) continue;
      printf(
          "soak-mode: budget=%s mode=%s rounds=%llu collectives=%llu injected=%llu detected=%llu "
          "retransmitted=%llu delayed=%llu expected_errors=%llu escaped=%llu failed=%llu hangs=%llu\n",
          budgetName(Budget(k / 8)), faultModeName(FaultMode(k % 8)), (unsigned long long)m.rounds,
          (unsigned long long)m.collectives, (unsigned long long)m.injected, (unsigned long long)m.detected,
          (unsigned long long)m.retransmitted, (unsigned long long)m.delayed,
          (unsigned long long)m.expectedErrors, (unsigned long long)m.escaped, (unsigned long long)m.failed,
          (unsigned long long)m.hangs);
    }
    if (sum[0] != total.injected || sum[1] != total.detected || sum[3] > total.escaped) {
      spdlog::warn(
          "counters over the run ({} injected, {} detected, {} escaped) differ from the per-collective sums "
          "({}, {}, {})",
          sum[0], sum[1], sum[3], total.injected, total.detected, total.escaped);
    }
    // Escapes: wrong results returned as OK (the soak's checks) and the library's own escape counter.
    const uint64_t escaped = total.escaped;
    printf(
        "soak: ranks=%d collectives=%llu injected=%llu detected=%llu retransmitted=%llu escaped=%llu "
        "failed=%llu hangs=%llu seconds=%.1f\n",
        n, (unsigned long long)total.collectives, (unsigned long long)sum[0], (unsigned long long)sum[1],
        (unsigned long long)sum[2], (unsigned long long)escaped, (unsigned long long)total.failed,
        (unsigned long long)total.hangs, seconds);
    fflush(stdout);
    rc = (escaped > 0 || total.failed > 0 || total.hangs > 0) ? kExitFindings : 0;
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  bootstrap.reset();
  MPI_Finalize();
  return rc;
}

}  // namespace
}  // namespace soak
}  // namespace ringguard

int main(int argc, char** argv) { return ringguard::soak::soakMain(argc, argv); }
