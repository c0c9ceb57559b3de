#include "ringguard/core/options.h"

#include <charconv>
#include <functional>
#include <limits>
#include <system_error>

#include "core/env.h"
#include "core/fault_injector.h"
#include "ringguard/core/log.h"

namespace ringguard {

namespace {

constexpr FaultMode kAllFaultModes[] = {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst,
                                        FaultMode::kGarbage, FaultMode::kTrailer,  FaultMode::kRetransmit,
                                        FaultMode::kDelay,   FaultMode::kControl};

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

Status invalidField(const char* field, const char* setting, const std::string& value) {
  return Status(StatusCode::kInvalidArgument, std::string("option ") + field + "=" + value + " (" + setting +
                                                  "): expected " + settingRange(declaredSetting(setting)));
}

// An integer field against its setting's declared range.
Status checkField(const char* field, const char* setting, int64_t value, const char* unit = "") {
  if (inSettingRange(declaredSetting(setting), value)) return Status::ok();
  return invalidField(field, setting, std::to_string(value) + unit);
}

// Reads an integer field from its unsigned setting (the declared range fits the field's type).
template <typename T>
Status readInteger(const SettingLookup& lookup, const char* setting, T* field) {
  uint64_t v = 0;
  RINGGUARD_RETURN_IF_ERROR(parseSetting(setting, lookup, &v));
  *field = T(v);
  return Status::ok();
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

bool parseFaultSchedule(const std::string& text, std::vector<FaultScheduleEntry>* out, std::string* why) {
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

Status parseFaultSchedule(const std::string& text, std::vector<FaultScheduleEntry>* out) {
  std::string why;
  if (!parseFaultSchedule(text, out, &why)) {
    return Status(StatusCode::kInvalidArgument, "fault schedule '" + text + "': " + why);
  }
  return Status::ok();
}

Status Options::validate() const {
  if (!inSettingRange(declaredSetting("RINGGUARD_SLICE_BYTES"), uint64_t(sliceBytes))) {
    return invalidField("sliceBytes", "RINGGUARD_SLICE_BYTES", std::to_string(sliceBytes));
  }
  RINGGUARD_RETURN_IF_ERROR(checkField("slots", "RINGGUARD_SLOTS", slots));
  RINGGUARD_RETURN_IF_ERROR(checkField("maxRetries", "RINGGUARD_MAX_RETRIES", maxRetries));
  RINGGUARD_RETURN_IF_ERROR(checkField("timeout", "RINGGUARD_TIMEOUT_MS", timeout.count(), "ms"));
  if (settingChoiceIndex(declaredSetting("RINGGUARD_LOG_LEVEL"), logLevel) < 0) {
    return invalidField("logLevel", "RINGGUARD_LOG_LEVEL", "'" + logLevel + "'");
  }
  if (!inSettingRange(declaredSetting("RINGGUARD_FAULT_PROB"), fault.probability)) {
    return invalidField("fault.probability", "RINGGUARD_FAULT_PROB", std::to_string(fault.probability));
  }
  RINGGUARD_RETURN_IF_ERROR(checkField("fault.bits", "RINGGUARD_FAULT_BITS", fault.bits));
  RINGGUARD_RETURN_IF_ERROR(checkField("fault.burstBits", "RINGGUARD_FAULT_BURST_BITS", fault.burstBits));
  RINGGUARD_RETURN_IF_ERROR(checkField("fault.delayMs", "RINGGUARD_FAULT_DELAY_MS", fault.delayMs, "ms"));
  RINGGUARD_RETURN_IF_ERROR(checkField("fault.repeat", "RINGGUARD_FAULT_REPEAT", fault.repeat));
  for (const FaultScheduleEntry& e : fault.schedule) {
    if (e.step < 0 || e.slice < 0 || e.rank < 0) {
      return invalidField("fault.schedule", "RINGGUARD_FAULT_SCHEDULE",
                          std::to_string(e.collective) + ":" + std::to_string(e.step) + ":" +
                              std::to_string(e.slice) + ":" + std::to_string(e.rank));
    }
  }
  return Status::ok();
}

Status Options::validateFor(int worldSize) const {
  RINGGUARD_RETURN_IF_ERROR(validate());
  return checkFaultSchedule(fault, worldSize);
}

Status DeviceSettings::fromLookup(const std::function<const char*(const char*)>& lookup,
                                  DeviceSettings* out) {
  DeviceSettings o;
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_DEVICE_TRANSPORT", lookup, &o.transport));
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_POOL_RELEASE_BYTES", lookup, &o.poolReleaseBytes));
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_NCCL_LANES", &o.ncclLanes));
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_PEER_BYTES", lookup, &o.peerBytes));
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_PEER_TWO_SHOT_BYTES", lookup, &o.peerTwoShotBytes));
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_PEER_ARRIVAL_BYTES", lookup, &o.peerArrivalBytes));
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_PEER_P2P_BYTES", lookup, &o.peerP2pBytes));
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_PEER_HANDLES", lookup, &o.peerHandles));
  *out = std::move(o);
  return Status::ok();
}

Status parseKernelSms(const char* text, int* sms) {
  const std::string t = text == nullptr ? "" : text;  // nullptr reads as "", which is refused
  return readInteger([&](const char*) { return t.c_str(); }, "RINGGUARD_KERNEL_SMS", sms);
}

Status Options::fromEnv(Options* out) {
  warnUnknownEnv();
  return fromLookup(envLookup, out);
}

Status Options::fromLookup(const std::function<const char*(const char*)>& lookup, Options* out) {
  // Every declared setting first, fields or not, so that a bad one fails here (not when a GPU, the policy
  // engine or the trace writer first needs it).
  RINGGUARD_RETURN_IF_ERROR(checkSettings(lookup));
  // Defaults, not *out: the result must not depend on what the caller happened to pass in.
  Options o;
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_SLICE_BYTES", &o.sliceBytes));
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_SLOTS", &o.slots));
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_MAX_RETRIES", &o.maxRetries));
  int64_t timeoutMs = 0;
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_TIMEOUT_MS", &timeoutMs));
  o.timeout = std::chrono::milliseconds(timeoutMs);
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_LOG_LEVEL", lookup, &o.logLevel));
  int choice = 0;
  RINGGUARD_RETURN_IF_ERROR(parseChoiceSetting("RINGGUARD_NAN_CHECK", lookup, &choice));
  o.nanCheck = NanCheck(choice);  // the choices are nanCheckName's, in enum order

  FaultOptions& f = o.fault;
  RINGGUARD_RETURN_IF_ERROR(parseChoiceSetting("RINGGUARD_FAULT_MODE", lookup, &choice));
  f.mode = FaultMode(choice);  // the choices are faultModeName's, in enum order
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_FAULT_PROB", lookup, &f.probability));
  std::string schedule;
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_FAULT_SCHEDULE", lookup, &schedule));
  RINGGUARD_RETURN_IF_ERROR(parseFaultSchedule(schedule, &f.schedule));
  RINGGUARD_RETURN_IF_ERROR(parseSetting("RINGGUARD_FAULT_SEED", lookup, &f.seed));
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_FAULT_BITS", &f.bits));
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_FAULT_BURST_BITS", &f.burstBits));
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_FAULT_DELAY_MS", &f.delayMs));
  RINGGUARD_RETURN_IF_ERROR(readInteger(lookup, "RINGGUARD_FAULT_REPEAT", &f.repeat));

  RINGGUARD_RETURN_IF_ERROR(o.validate());
  *out = std::move(o);
  return Status::ok();
}

}  // namespace ringguard
