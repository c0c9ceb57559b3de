#include "ringguard/core/options.h"

#include <charconv>
#include <functional>
#include <limits>
#include <system_error>

#include "ringguard/core/env.h"
#include "ringguard/core/fault_injector.h"
#include "ringguard/core/log.h"

namespace ringguard {

namespace {

constexpr FaultMode kAllFaultModes[] = {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst,
                                        FaultMode::kGarbage, FaultMode::kTrailer,  FaultMode::kRetransmit,
                                        FaultMode::kDelay,   FaultMode::kControl};

// Ranges shared by validate() and fromEnv() so that the two can never disagree.
constexpr int kMinSlots = 2;
constexpr int kMaxSlots = 64;
constexpr int kMaxRetries = 100;
constexpr int kMinFaultBits = 1;
constexpr int kMaxFaultBits = 64;
constexpr int kMinBurstBits = 2;
constexpr int kMaxBurstBits = 32;
constexpr int kMaxDelayMs = 600000;

// Whole-string integer parse: no sign for unsigned types, no whitespace, no trailing characters.
template <typename T>
bool parseInteger(const std::string& s, T* out) {
  if (s.empty()) return false;
  T value{};
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, value);
  if (ec != std::errc() || ptr != end) return false;
  *out = value;
  return true;
}

bool parseIntInRange(const std::string& s, int lo, int hi, int* out) {
  int v = 0;
  if (!parseInteger(s, &v) || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool parseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  double value = 0.0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, value);
  if (ec != std::errc() || ptr != end) return false;
  *out = value;
  return true;
}

Status badValue(const char* name, const std::string& value, const std::string& expected) {
  return Status(StatusCode::kInvalidArgument, std::string(name) + "='" + value + "': " + expected);
}

std::string intRangeText(int lo, int hi) {
  return "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::string faultModeList() {
  std::string list;
  for (FaultMode m : kAllFaultModes) {
    if (!list.empty()) list += ", ";
    list += faultModeName(m);
  }
  return list;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t at = s.find(sep, begin);
    if (at == std::string::npos) {
      parts.push_back(s.substr(begin));
      return parts;
    }
    parts.push_back(s.substr(begin, at - begin));
    begin = at + 1;
  }
}

// On failure `why` names the offending entry; callers prefix the whole text or the variable.
bool parseScheduleText(const std::string& text, std::vector<FaultScheduleEntry>* out, std::string* why) {
  std::vector<FaultScheduleEntry> entries;
  if (!text.empty()) {
    for (const std::string& item : split(text, ',')) {
      const std::vector<std::string> f = split(item, ':');
      FaultScheduleEntry e;
      const bool ok = f.size() == 4 && parseInteger(f[0], &e.collective) && parseInteger(f[1], &e.step) &&
                      parseInteger(f[2], &e.slice) && parseInteger(f[3], &e.rank) && e.step >= 0 &&
                      e.slice >= 0 && e.rank >= 0;
      if (!ok) {
        *why = "bad entry '" + item +
               "': expected collective:step:slice:rank (non-negative integers), entries separated by ','";
        return false;
      }
      entries.push_back(e);
    }
  }
  *out = std::move(entries);
  return true;
}

Status invalidField(const std::string& field, const std::string& value, const std::string& requirement) {
  return Status(StatusCode::kInvalidArgument, "option " + field + "=" + value + " " + requirement);
}

}  // namespace

const char* faultModeName(FaultMode m) {
  switch (m) {
    case FaultMode::kBitFlip:
      return "bitflip";
    case FaultMode::kMultiBit:
      return "multibit";
    case FaultMode::kBurst:
      return "burst";
    case FaultMode::kGarbage:
      return "garbage";
    case FaultMode::kTrailer:
      return "trailer";
    case FaultMode::kRetransmit:
      return "retransmit";
    case FaultMode::kDelay:
      return "delay";
    case FaultMode::kControl:
      return "control";
  }
  return "invalid";
}

bool parseFaultMode(const std::string& s, FaultMode* out) {
  for (FaultMode m : kAllFaultModes) {
    if (s == faultModeName(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

Status parseFaultSchedule(const std::string& text, std::vector<FaultScheduleEntry>* out) {
  std::string why;
  if (!parseScheduleText(text, out, &why)) {
    return Status(StatusCode::kInvalidArgument, "fault schedule '" + text + "': " + why);
  }
  return Status::ok();
}

Status Options::validate() const {
  if (slots != 0 && (slots < kMinSlots || slots > kMaxSlots)) {
    return invalidField("slots", std::to_string(slots), "must be in [2, 64] (0: the transport's default)");
  }
  if (maxRetries < 0 || maxRetries > kMaxRetries) {
    return invalidField("maxRetries", std::to_string(maxRetries), "must be in [0, 100]");
  }
  if (sliceBytes > kMaxSliceBytes) {
    return invalidField(
        "sliceBytes", std::to_string(sliceBytes),
        "must be at most " + std::to_string(kMaxSliceBytes) + " (1 GiB; 0: the transport's default)");
  }
  if (timeout.count() <= 0 || timeout.count() > kMaxTimeoutMs) {
    return invalidField("timeout", std::to_string(timeout.count()) + "ms",
                        "must be in [1, " + std::to_string(kMaxTimeoutMs) + "] ms (a year)");
  }
  if (!isValidLogLevel(logLevel)) {
    return invalidField(
        "logLevel", "'" + logLevel + "'",
        "is not a log level (trace, debug, info, warn (or warning), error (or err), critical, off)");
  }
  // Written as a negated range test so that NaN is rejected too.
  if (!(fault.probability >= 0.0 && fault.probability <= 1.0)) {
    return invalidField("fault.probability", std::to_string(fault.probability), "must be in [0, 1]");
  }
  if (fault.bits < kMinFaultBits || fault.bits > kMaxFaultBits) {
    return invalidField("fault.bits", std::to_string(fault.bits), "must be in [1, 64]");
  }
  if (fault.burstBits < kMinBurstBits || fault.burstBits > kMaxBurstBits) {
    return invalidField("fault.burstBits", std::to_string(fault.burstBits), "must be in [2, 32]");
  }
  if (fault.delayMs < 0 || fault.delayMs > kMaxDelayMs) {
    return invalidField("fault.delayMs", std::to_string(fault.delayMs), "must be in [0, 600000]");
  }
  if (fault.repeat < 1) return invalidField("fault.repeat", std::to_string(fault.repeat), "must be >= 1");
  for (const FaultScheduleEntry& e : fault.schedule) {
    if (e.step < 0 || e.slice < 0 || e.rank < 0) {
      return invalidField("fault.schedule",
                          std::to_string(e.collective) + ":" + std::to_string(e.step) + ":" +
                              std::to_string(e.slice) + ":" + std::to_string(e.rank),
                          "must have non-negative step, slice and rank");
    }
  }
  return Status::ok();
}

Status Options::validateFor(int worldSize) const {
  RINGGUARD_RETURN_IF_ERROR(validate());
  return checkFaultSchedule(fault, worldSize);
}

Status parseUnsignedSetting(const char* name, const char* text, uint64_t lo, uint64_t hi, uint64_t* out) {
  const std::string s = text == nullptr ? "" : text;
  uint64_t v = 0;
  if (!parseInteger(s, &v)) {
    const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    return badValue(name, s,
                    std::string(digits ? "too large" : "not a non-negative decimal integer") +
                        ": expected [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  if (v < lo || v > hi) {
    return badValue(name, s,
                    "out of range: expected [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = v;
  return Status::ok();
}

Status DeviceSettings::fromLookup(const std::function<const char*(const char*)>& lookup,
                                  DeviceSettings* out) {
  DeviceSettings o;
  if (const char* v = lookup("RINGGUARD_DEVICE_TRANSPORT")) {
    const std::string s(v);
    if (s != "auto" && s != "nccl" && s != "staged") {
      return badValue("RINGGUARD_DEVICE_TRANSPORT", s, "expected auto, nccl or staged");
    }
    o.transport = s;
  }
  if (const char* v = lookup("RINGGUARD_POOL_RELEASE_BYTES")) {
    RINGGUARD_RETURN_IF_ERROR(
        parseUnsignedSetting("RINGGUARD_POOL_RELEASE_BYTES", v, 0, uint64_t(1) << 48, &o.poolReleaseBytes));
  }
  if (const char* v = lookup("RINGGUARD_NCCL_LANES")) {
    uint64_t n = 0;
    RINGGUARD_RETURN_IF_ERROR(parseUnsignedSetting("RINGGUARD_NCCL_LANES", v, 1, 8, &n));
    o.ncclLanes = int(n);
  }
  *out = std::move(o);
  return Status::ok();
}

Status parseKernelSms(const char* text, int* sms) {
  constexpr int kMaxSms = 100000;
  if (text == nullptr || !parseIntInRange(text, 0, kMaxSms, sms)) {
    return badValue("RINGGUARD_KERNEL_SMS", text == nullptr ? "" : text,
                    intRangeText(0, kMaxSms) + " (an SM count; 0: every SM)");
  }
  return Status::ok();
}

Status Options::fromEnv(Options* out) {
  warnUnknownEnv();
  return fromLookup(envLookup, out);
}

Status Options::fromLookup(const std::function<const char*(const char*)>& lookup, Options* out) {
  // Defaults, not *out: the result must not depend on what the caller happened to pass in.
  Options o;
  const char* v = nullptr;

  if ((v = lookup("RINGGUARD_SLICE_BYTES")) != nullptr) {
    uint64_t n = 0;
    RINGGUARD_RETURN_IF_ERROR(parseUnsignedSetting("RINGGUARD_SLICE_BYTES", v, 0, kMaxSliceBytes, &n));
    o.sliceBytes = size_t(n);
  }
  if ((v = lookup("RINGGUARD_SLOTS")) != nullptr) {
    if (!parseIntInRange(v, 0, kMaxSlots, &o.slots) || o.slots == 1) {
      return badValue("RINGGUARD_SLOTS", v,
                      intRangeText(kMinSlots, kMaxSlots) + " (0: the transport's default)");
    }
  }
  if ((v = lookup("RINGGUARD_MAX_RETRIES")) != nullptr) {
    if (!parseIntInRange(v, 0, kMaxRetries, &o.maxRetries)) {
      return badValue("RINGGUARD_MAX_RETRIES", v, intRangeText(0, kMaxRetries));
    }
  }
  if ((v = lookup("RINGGUARD_TIMEOUT_MS")) != nullptr) {
    uint64_t ms = 0;
    RINGGUARD_RETURN_IF_ERROR(
        parseUnsignedSetting("RINGGUARD_TIMEOUT_MS", v, 1, uint64_t(kMaxTimeoutMs), &ms));
    o.timeout = std::chrono::milliseconds(int64_t(ms));
  }
  if ((v = lookup("RINGGUARD_LOG_LEVEL")) != nullptr) {
    if (!isValidLogLevel(v)) {
      return badValue("RINGGUARD_LOG_LEVEL", v,
                      "expected one of trace, debug, info, warn (or warning), error (or err), critical, off");
    }
    o.logLevel = v;
  }
  if ((v = lookup("RINGGUARD_NAN_CHECK")) != nullptr) {
    if (!parseNanCheck(v, &o.nanCheck)) {
      return badValue("RINGGUARD_NAN_CHECK", v, "expected off, warn, skip or error");
    }
  }
  if ((v = lookup("RINGGUARD_FAULT_MODE")) != nullptr) {
    if (!parseFaultMode(v, &o.fault.mode)) {
      return badValue("RINGGUARD_FAULT_MODE", v, "expected one of " + faultModeList());
    }
  }
  if ((v = lookup("RINGGUARD_FAULT_PROB")) != nullptr) {
    double p = 0.0;
    if (!parseDouble(v, &p) || !(p >= 0.0 && p <= 1.0)) {
      return badValue("RINGGUARD_FAULT_PROB", v, "expected a number in [0, 1]");
    }
    o.fault.probability = p;
  }
  if ((v = lookup("RINGGUARD_FAULT_SCHEDULE")) != nullptr) {
    std::string why;
    if (!parseScheduleText(v, &o.fault.schedule, &why)) return badValue("RINGGUARD_FAULT_SCHEDULE", v, why);
  }
  if ((v = lookup("RINGGUARD_FAULT_SEED")) != nullptr) {
    if (!parseInteger(std::string(v), &o.fault.seed)) {
      return badValue("RINGGUARD_FAULT_SEED", v, "expected a non-negative integer below 2^64");
    }
  }
  if ((v = lookup("RINGGUARD_FAULT_BITS")) != nullptr) {
    if (!parseIntInRange(v, kMinFaultBits, kMaxFaultBits, &o.fault.bits)) {
      return badValue("RINGGUARD_FAULT_BITS", v, intRangeText(kMinFaultBits, kMaxFaultBits));
    }
  }
  if ((v = lookup("RINGGUARD_FAULT_BURST_BITS")) != nullptr) {
    if (!parseIntInRange(v, kMinBurstBits, kMaxBurstBits, &o.fault.burstBits)) {
      return badValue("RINGGUARD_FAULT_BURST_BITS", v, intRangeText(kMinBurstBits, kMaxBurstBits));
    }
  }
  if ((v = lookup("RINGGUARD_FAULT_DELAY_MS")) != nullptr) {
    if (!parseIntInRange(v, 0, kMaxDelayMs, &o.fault.delayMs)) {
      return badValue("RINGGUARD_FAULT_DELAY_MS", v, intRangeText(0, kMaxDelayMs));
    }
  }
  if ((v = lookup("RINGGUARD_FAULT_REPEAT")) != nullptr) {
    if (!parseIntInRange(v, 1, std::numeric_limits<int>::max(), &o.fault.repeat)) {
      return badValue("RINGGUARD_FAULT_REPEAT", v, "expected a positive integer");
    }
  }

  // Settings that are not Options fields, checked by the same parsers here so that a bad one fails when the
  // communicator or group is made (not when a GPU first needs it).
  DeviceSettings device;
  RINGGUARD_RETURN_IF_ERROR(DeviceSettings::fromLookup(lookup, &device));
  if ((v = lookup("RINGGUARD_KERNEL_SMS")) != nullptr) {
    int sms = 0;
    RINGGUARD_RETURN_IF_ERROR(parseKernelSms(v, &sms));
  }
  if ((v = lookup("RINGGUARD_CPU_TRANSPORT")) != nullptr) {
    const std::string s(v);
    if (s != "auto" && s != "mpi" && s != "gloo")
      return badValue("RINGGUARD_CPU_TRANSPORT", s, "expected auto, mpi or gloo");
  }

  RINGGUARD_RETURN_IF_ERROR(o.validate());
  *out = std::move(o);
  return Status::ok();
}

}  // namespace ringguard
