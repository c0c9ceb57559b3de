#pragma once
// Logging through spdlog: one logger, "ringguard", level from Options::logLevel / RINGGUARD_LOG_LEVEL.
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace ringguard {

std::shared_ptr<spdlog::logger> logger();
// Sets the library logger's level by spdlog name ("trace" .. "off"); false on an unknown name.
bool setLogLevel(const std::string& level);
// Whether `level` is an spdlog level name ("trace", "debug", "info", "warn"/"warning", "error"/"err",
// "critical", "off"). spdlog's own from_str maps unknown names to "off", so this is the check to use.
bool isValidLogLevel(const std::string& level);

}  // namespace ringguard
