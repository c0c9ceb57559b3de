#pragma once
// Logging subsystems, selectable like NCCL_DEBUG_SUBSYS (RINGGUARD_LOG_SUBSYS). Messages at warn level and
// above are logged whatever the selection.
#include <cstdint>

namespace ringguard {

enum class Subsys : uint8_t {
  kCore,       // settings, errors, the exporter of the timeline
  kRing,       // the verified pipeline: detections, escapes
  kTransport,  // MPI, host-staged, c10d, NCCL
  kControl,    // the sealed control channel
  kRuntime,    // communicators: lifecycle, failed collectives, NaN checks, point-to-point lanes
  kGuard,
  kPolicy,
  kTelemetry,
  kCuda,
  kTorch,
  kCount,
};
const char* subsysName(Subsys s);  // "core", "ring", ...

}  // namespace ringguard
