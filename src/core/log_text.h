#pragma once
// Logging for translation units that cannot include spdlog: torch ships its own, newer fmt, which clashes
// with the fmt that Debian's spdlog is built on. Messages go to the same "ringguard" logger, with the same
// subsystem selection as core/logging.h.
#include <string>

#include "core/log_subsys.h"

namespace ringguard {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
void logText(LogLevel level, Subsys subsys, const std::string& message);

}  // namespace ringguard
