#pragma once
// Communicator options. Every field can be set in code or through a RINGGUARD_* environment variable;
// each variable is declared once (settings.h: kind, default, range, description), and the defaults below,
// fromLookup's parsing and validate()'s bounds all come from that declaration.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ringguard/core/non_finite.h"
#include "ringguard/core/settings.h"
#include "ringguard/core/status.h"

namespace ringguard {

// How an injected fault damages a slice in transit (after the sender's CRC, before the receiver's check).
enum class FaultMode : uint8_t {
  kBitFlip = 0,  // one random bit of the payload
  kMultiBit,     // `bits` distinct random bits of the payload
  kBurst,        // a burst of 2..`burstBits` (<= 32) consecutive bits, first and last flipped
  kGarbage,      // the whole payload replaced by random bytes
  kTrailer,      // one bit of the trailer
  kRetransmit,   // a bit flip on the first transfer and again on the first retransmission
  kDelay,        // the slice is sent `delayMs` late (not a corruption)
  kControl,      // one bit of a collective's control frame (fingerprint, verdict, error), not of a slice
};
const char* faultModeName(
    FaultMode m);  // "bitflip", "multibit", "burst", "garbage", "trailer", "retransmit", "delay", "control"
bool parseFaultMode(const std::string& s, FaultMode* out);

// One exact injection: the transfer of `slice` at ring `step` of collective number `collective` (the
// communicator's sequence number, from 0) into receiving rank `rank`.
struct FaultScheduleEntry {
  uint64_t collective = 0;
  int step = 0;
  int slice = 0;
  int rank = 0;
  bool operator==(const FaultScheduleEntry& o) const {
    return collective == o.collective && step == o.step && slice == o.slice && rank == o.rank;
  }
};

// Defaults: the declarations of the RINGGUARD_FAULT_* settings.
struct FaultOptions {
  bool enabled() const { return probability > 0.0 || !schedule.empty(); }
  FaultMode mode = FaultMode(declaredChoice("RINGGUARD_FAULT_MODE"));
  double probability = declaredReal("RINGGUARD_FAULT_PROB");  // per slice transfer
  std::vector<FaultScheduleEntry>
      schedule;  // exact injections (in addition to `probability`); declared empty
  uint64_t seed = declaredUnsigned("RINGGUARD_FAULT_SEED");
  int bits = int(declaredUnsigned("RINGGUARD_FAULT_BITS"));             // kMultiBit
  int burstBits = int(declaredUnsigned("RINGGUARD_FAULT_BURST_BITS"));  // kBurst, at most 32
  int delayMs = int(declaredUnsigned("RINGGUARD_FAULT_DELAY_MS"));      // kDelay
  // How many consecutive transfer attempts of a hit slice are corrupted (1 = only the first). A value
  // above the retry bound makes the corruption persistent. kRetransmit implies at least 2.
  int repeat = int(declaredUnsigned("RINGGUARD_FAULT_REPEAT"));
};

struct Options {
  // Upper bounds of sliceBytes and timeout. A slice is one checksum unit and one receive slot: past 1 GiB
  // it only costs memory. A year of milliseconds stays far from overflowing the nanosecond clocks that
  // every wait compares against (2^63 ns is 292 years; the control rounds add up to a few timeouts).
  static constexpr size_t kMaxSliceBytes = size_t(1) << 30;
  static constexpr int64_t kMaxTimeoutMs = int64_t(365) * 24 * 3600 * 1000;

  // Defaults: the declarations (docs/ENV.md). Payload bytes per slice (rounded down to the element size);
  // 0: the transport's default (Transport::defaultSliceBytes: 1 MiB; 4 MiB host-staged, 128 MiB over NCCL),
  // resolved when the communicator is made.
  size_t sliceBytes = declaredUnsigned("RINGGUARD_SLICE_BYTES");
  int slots = int(declaredUnsigned("RINGGUARD_SLOTS"));  // receive slots per link; 0: the transport's
  int maxRetries =
      int(declaredUnsigned("RINGGUARD_MAX_RETRIES"));  // repair rounds before a kCorruption error
  // No progress for this long -> kTimeout.
  std::chrono::milliseconds timeout{int64_t(declaredUnsigned("RINGGUARD_TIMEOUT_MS"))};
  std::string logLevel = declaredText("RINGGUARD_LOG_LEVEL");  // spdlog level name
  // Non-finite values in a collective's input (core/non_finite.h): every rank must use the same mode.
  NanCheck nanCheck = NanCheck(declaredChoice("RINGGUARD_NAN_CHECK"));
  FaultOptions fault;

  // Defaults overridden by the RINGGUARD_* variables that are set. A bad value gives kInvalidArgument
  // naming the variable and the value. Every declared setting is checked (checkSettings), also those that
  // are not Options fields (DeviceSettings, RINGGUARD_CPU_TRANSPORT, the process-wide ones), so a job fails
  // when its communicator or group is made, not at its first CUDA tensor. Warns once per process about set
  // RINGGUARD_* variables that are not declared (warnUnknownEnv).
  static Status fromEnv(Options* out);
  // Same, reading each registered RINGGUARD_* name through `lookup` (nullptr: unset) instead of the
  // environment: how option maps from Python (pg_options) layer over the environment.
  static Status fromLookup(const std::function<const char*(const char*)>& lookup, Options* out);
  // kInvalidArgument naming the field and its variable when a value is outside the declared range.
  Status validate() const;
  // validate(), and the fault schedule checked against a communicator of `worldSize` ranks: an entry
  // that can never fire is an error (checkFaultSchedule). What the factories check before building.
  Status validateFor(int worldSize) const;
};

// Settings of device communicators (read by the device factory), parsed here, in core, so that a job
// without a GPU checks them too. The one parser for their RINGGUARD_* names; defaults: their declarations.
struct DeviceSettings {
  std::string transport = declaredText("RINGGUARD_DEVICE_TRANSPORT");  // auto, nccl, staged or peer
  uint64_t poolReleaseBytes = declaredUnsigned("RINGGUARD_POOL_RELEASE_BYTES");
  int ncclLanes = int(declaredUnsigned("RINGGUARD_NCCL_LANES"));
  uint64_t peerBytes = declaredUnsigned("RINGGUARD_PEER_BYTES");
  uint64_t peerTwoShotBytes = declaredUnsigned("RINGGUARD_PEER_TWO_SHOT_BYTES");
  uint64_t peerArrivalBytes = declaredUnsigned("RINGGUARD_PEER_ARRIVAL_BYTES");
  uint64_t peerP2pBytes = declaredUnsigned("RINGGUARD_PEER_P2P_BYTES");
  std::string peerHandles = declaredText("RINGGUARD_PEER_HANDLES");  // auto, vmm or ipc
  static Status fromLookup(const std::function<const char*(const char*)>& lookup, DeviceSettings* out);
};

// RINGGUARD_KERNEL_SMS's value: an SM count, 0 meaning every SM. Process-wide (the CUDA layer reads it once),
// so not an Options field. kInvalidArgument naming the variable otherwise (also for nullptr).
Status parseKernelSms(const char* text, int* sms);

// Parses "c:s:k:r[,c:s:k:r...]" (collective:step:slice:rank) into entries; *out untouched on error.
Status parseFaultSchedule(const std::string& text, std::vector<FaultScheduleEntry>* out);
// The same, with `why` naming the bad entry instead of a Status (what the schedule kind's check reports).
bool parseFaultSchedule(const std::string& text, std::vector<FaultScheduleEntry>* out, std::string* why);

}  // namespace ringguard
