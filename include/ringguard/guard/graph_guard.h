#pragma once
// A guarded op as one CUDA graph with a conditional WHILE node: snapshot -> op -> NaN/Inf scan, then, while
// the scan found a non-finite value and fewer than `maxReplays` replays ran, restore -> op -> scan again.
// Detection, rollback and replay happen on the device: a launch is enqueued on a stream and returns, and
// the host never waits inside it (docs/GUARD.md, "The CUDA graph path"). Implemented over the CUDA layer's
// kernels (src/guard/device/graph_guard.cc, compiled into ringguard::cuda); no CUDA type here.
//
//   GraphGuardedOp op{"mlp", {state...}, {outputs...}, [&](void* s) { return launchMlp(..., s); }};
//   std::unique_ptr<GraphGuard> g;
//   Status st = GraphGuard::create(device, op, GraphGuardOptions{}, &g);  // captures op.body once
//   if (!st.isOk()) ...            // "not capturable: ..." (or a bad declaration): use Guard::run
//   g->launch(stream);  // any number of times, no host wait
//   GraphGuardReport r; g->report(&r);  // the last launch's outcome (one host wait)
//
// What the device cannot decide stays with the host: after `maxReplays` failed replays the graph ends with
// the last attempt's values, and report() says so; restore() then rolls the state back (the escalation:
// skip or raise, as the host-driven Guard's policy does).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/guard/backend.h"

namespace ringguard {

struct GraphGuardedOp {
  std::string name;
  std::vector<GuardBuffer> state;    // device memory the op mutates: snapshotted, restored before a replay
  std::vector<GuardBuffer> outputs;  // device memory the op writes: scanned after every attempt (float types)
  // Enqueues the op's device work on `stream` (a cudaStream_t). Called once, while the stream is captured:
  // it must only enqueue capturable work (kernels, async copies and memsets on that stream), never wait.
  std::function<Status(void* stream)> body;
};

// The guard's own fault injection, inside the graph: `value` written into element `element` of output
// `output` after the attempts whose bit is set in `attempts` (bit 0: the first run, bit k: replay k).
// 0x1 is a transient fault (the first replay is clean), ~0u a persistent one.
struct GraphFault {
  size_t output = 0;
  size_t element = 0;
  FaultValue value = FaultValue::kNaN;
  uint32_t attempts = 0x1;
};

struct GraphGuardOptions {
  int maxReplays = 2;  // replays on the device before the host has to escalate (0 .. 31)
  std::vector<GraphFault> faults;
};

// The outcome of the last launch, read from mapped pinned memory after one event.
struct GraphGuardReport {
  uint32_t replays = 0;       // replays the device ran
  bool clean = true;          // the last attempt's outputs are all finite
  size_t firstBadOutput = 0;  // when !clean: the first output (index into op.outputs) with non-finite values
  uint64_t badElements = 0;   // when !clean: non-finite elements over all outputs of the last attempt
  uint64_t launches = 0;      // launches so far
  uint64_t totalReplays = 0;  // replays over every launch whose report was read
};

class GraphGuard {
 public:
  // Captures `op` on `device`: allocates the snapshots and scan slots, records snapshot copies, the body,
  // the fault writes, the scan and the replay decision into a graph with a WHILE node, and instantiates it.
  // kInvalidArgument names the buffer or fault that is wrong (not device memory, not a float output, out of
  // range); a body that could not be captured is kInvalidArgument too, "GraphGuard '<op>': not capturable:
  // ..." with the CUDA error (the stream stays usable), so the caller falls back to the host-driven Guard.
  static Status create(int device, const GraphGuardedOp& op, const GraphGuardOptions& options,
                       std::unique_ptr<GraphGuard>* out);
  ~GraphGuard();
  GraphGuard(const GraphGuard&) = delete;
  GraphGuard& operator=(const GraphGuard&) = delete;

  // One guarded call, enqueued on `stream` after the work already there (and after the previous launch,
  // when that was on another stream: the graph has one set of snapshots); no host wait.
  Status launch(void* stream);
  // Waits for the last launch and reads its outcome.
  Status report(GraphGuardReport* out);
  // Enqueues copies of the last launch's snapshots back over the state, after that launch (the escalation's
  // rollback).
  Status restore(void* stream);

  class Impl;

 private:
  explicit GraphGuard(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringguard
