#include "ringguard/core/status.h"

#include <cstdio>
#include <cstdlib>

#include "core/logging.h"

namespace ringguard {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kFingerprintMismatch:
      return "FingerprintMismatch";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kTimeout:
      return "Timeout";
    case StatusCode::kPeerError:
      return "PeerError";
    case StatusCode::kTransportError:
      return "TransportError";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kInternal:
      return "Internal";
  }
  // A value outside the enum can only come from a cast or memory corruption; still give a name so a
  // log line built from it stays readable.
  return "Unknown";
}

std::string Status::toString() const {
  if (isOk()) return "OK";
  std::string s = statusCodeName(code_);
  s += ": ";
  s += message_;
  return s;
}

void enforceFailed(const char* file, int line, const char* cond, const std::string& msg) {
  // Guard the logger: an ENFORCE may fire during static destruction or from inside logger() itself,
  // and the abort must happen regardless.
  try {
    auto log = logger();
    log->critical("{}:{}: RINGGUARD_ENFORCE({}) failed: {}", file, line, cond, msg);
    log->flush();
  } catch (...) {
    std::fprintf(stderr, "%s:%d: RINGGUARD_ENFORCE(%s) failed: %s\n", file, line, cond, msg.c_str());
  }
  std::abort();
}

}  // namespace ringguard
