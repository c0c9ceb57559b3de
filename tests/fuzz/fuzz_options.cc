// The option parsers (core/options.h): Options::fromLookup over any set of RINGGUARD_* values, and the
// single-value parsers it is built from. Input: text, one `NAME=value` per line (later lines win); the first
// line's value also goes through parseUnsignedSetting (with bounds from the line's length), parseKernelSms,
// parseFaultMode, parseNanCheck and isValidLogLevel. Options::validateFor gets a world size from the count of
// lines. checkSettingMap gets the lines as a map.
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/env.h"
#include "fuzz_util.h"
#include "ringguard/core/log.h"
#include "ringguard/core/non_finite.h"
#include "ringguard/core/options.h"

using namespace ringguard;
using ringguard::fuzz::splitLines;

namespace {

void checkUnsigned(const std::string& value, uint64_t lo, uint64_t hi) {
  uint64_t v = 12345;
  const Status st = parseUnsignedSetting("RINGGUARD_SLICE_BYTES", value.c_str(), lo, hi, &v);
  if (st.isOk()) {
    RINGGUARD_FUZZ_CHECK(v >= lo && v <= hi);
    // Digits only, and the number they spell (leading zeros allowed).
    RINGGUARD_FUZZ_CHECK(!value.empty() && value.find_first_not_of("0123456789") == std::string::npos);
    const size_t first = value.find_first_not_of('0');
    RINGGUARD_FUZZ_CHECK(std::to_string(v) == (first == std::string::npos ? "0" : value.substr(first)));
  } else {
    RINGGUARD_FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
    RINGGUARD_FUZZ_CHECK(st.message().rfind("RINGGUARD_SLICE_BYTES='", 0) == 0);
    RINGGUARD_FUZZ_CHECK(v == 12345);  // untouched
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  const std::vector<std::string> all = splitLines(text);
  for (const std::string& line : all) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }

  // Every name the parser asks for is registered (else docs/ENV.md would not list it).
  auto lookup = [&](const char* name) -> const char* {
    RINGGUARD_FUZZ_CHECK(findEnvVar(name) != nullptr);
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  Options o;
  o.slots = 77;  // the result must not depend on what was passed in
  const Status st = Options::fromLookup(lookup, &o);
  if (st.isOk()) {
    RINGGUARD_FUZZ_CHECK(o.validate().isOk());
    RINGGUARD_FUZZ_CHECK(o.slots != 77);
    RINGGUARD_FUZZ_CHECK(o.sliceBytes <= Options::kMaxSliceBytes);
    RINGGUARD_FUZZ_CHECK(o.timeout.count() >= 1 && o.timeout.count() <= Options::kMaxTimeoutMs);
    RINGGUARD_FUZZ_CHECK(isValidLogLevel(o.logLevel));
    // The schedule checked against a group; any outcome but a crash is fine.
    const Status reach = o.validateFor(int(all.size() % 70) - 2);
    RINGGUARD_FUZZ_CHECK(reach.isOk() || reach.code() == StatusCode::kInvalidArgument);
    DeviceSettings device;
    RINGGUARD_FUZZ_CHECK(DeviceSettings::fromLookup(lookup, &device).isOk());
  } else {
    RINGGUARD_FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
    // The message names the variable whose value was refused.
    bool named = false;
    for (const auto& [name, value] : env) {
      if (findEnvVar(name) != nullptr && st.message().rfind(name + "=", 0) == 0) named = true;
    }
    RINGGUARD_FUZZ_CHECK(named);
  }

  // A map with a NUL in a name or value (set_fault, a process group's options) is refused naming it: the
  // parsers read C strings, which would end at the NUL.
  bool nul = false;
  for (const auto& [name, value] : env) nul = nul || (name + value).find('\0') != std::string::npos;
  const Status mapped = checkSettingMap(env);
  RINGGUARD_FUZZ_CHECK(mapped.isOk() == !nul);
  if (nul) RINGGUARD_FUZZ_CHECK(mapped.message().find("holds a NUL byte at offset") != std::string::npos);

  const std::string first = all.front();
  // As a C string, as the parsers get it (a NUL ends it).
  const std::string value =
      first.substr(first.find('=') == std::string::npos ? 0 : first.find('=') + 1).c_str();
  const uint64_t lo = first.size() % 3 == 0 ? 0 : first.size();
  const uint64_t hi = first.size() % 2 == 0 ? std::numeric_limits<uint64_t>::max() : lo + first.size() * 1000;
  checkUnsigned(value, lo, hi);
  int sms = -7;
  if (parseKernelSms(value.c_str(), &sms).isOk()) RINGGUARD_FUZZ_CHECK(sms >= 0 && sms <= 100000);
  FaultMode mode;
  if (parseFaultMode(value, &mode)) RINGGUARD_FUZZ_CHECK(value == faultModeName(mode));
  NanCheck nan;
  if (parseNanCheck(value, &nan)) RINGGUARD_FUZZ_CHECK(value == nanCheckName(nan));
  // Every spelling the logger takes is one docs/ENV.md names (no undocumented aliases).
  if (isValidLogLevel(value)) {
    const std::string doc = findEnvVar("RINGGUARD_LOG_LEVEL")->description;
    RINGGUARD_FUZZ_CHECK(!value.empty() && (doc.find(" " + value + ",") != std::string::npos ||
                                            doc.find(" " + value + " ") != std::string::npos ||
                                            doc.find("(or " + value + ")") != std::string::npos ||
                                            doc.find(" " + value + ".") != std::string::npos));
  }
  return 0;
}
