#pragma once
// The library's logging settings. Messages go to one spdlog logger, "ringguard" (an application may
// register its own logger of that name to route them); spdlog and fmt stay out of the public headers.
#include <string>

#include "ringguard/core/status.h"

namespace ringguard {

// Sets the library logger's level by spdlog name ("trace" .. "off"); false on an unknown name.
bool setLogLevel(const std::string& level);
// Whether `level` is an spdlog level name ("trace", "debug", "info", "warn"/"warning", "error"/"err",
// "critical", "off"). spdlog's own from_str maps unknown names to "off", so this is the check to use.
bool isValidLogLevel(const std::string& level);
// Which subsystems' messages below warn level are logged, as RINGGUARD_LOG_SUBSYS spells it: "all", a
// comma-separated list (core, ring, transport, control, runtime, guard, policy, telemetry, cuda, torch), or
// "^" and a list to exclude. kInvalidArgument naming an unknown subsystem (the selection is unchanged).
// Read from RINGGUARD_LOG_SUBSYS when the logger is first used.
Status setLogSubsystems(const std::string& spec);
// The rank shown on every line ("[rank 3]"). The first communicator of a process sets it; later calls do
// nothing, so a process's lines keep one rank.
void setLogRank(int rank);

}  // namespace ringguard
