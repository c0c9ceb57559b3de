#include "ringguard/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "ringguard/core/log_text.h"

namespace ringguard {

namespace {

constexpr const char* kLoggerName = "ringguard";
constexpr const char* kPattern = "[%H:%M:%S.%e] [ringguard] [%l] %v";

std::shared_ptr<spdlog::logger> createLogger() {
  // An application may have registered "ringguard" itself to route our messages; respect that.
  if (auto existing = spdlog::get(kLoggerName)) return existing;
  auto log =
      std::make_shared<spdlog::logger>(kLoggerName, std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  log->set_pattern(kPattern);
  // Options::logLevel defaults to "warn"; match it until the communicator applies the configured level.
  log->set_level(spdlog::level::warn);
  try {
    spdlog::register_logger(log);
  } catch (const spdlog::spdlog_ex&) {
    // Lost a race with another registration of the same name: use the winner.
    if (auto existing = spdlog::get(kLoggerName)) return existing;
  }
  return log;
}

}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  // Magic static: initialised exactly once even with concurrent first calls.
  static const std::shared_ptr<spdlog::logger> instance = createLogger();
  return instance;
}

bool isValidLogLevel(const std::string& level) {
  return level == "off" || spdlog::level::from_str(level) != spdlog::level::off;
}

bool setLogLevel(const std::string& level) {
  if (!isValidLogLevel(level)) return false;
  logger()->set_level(spdlog::level::from_str(level));
  return true;
}

}  // namespace ringguard

namespace ringguard {

void logText(LogLevel level, const std::string& message) {
  switch (level) {
    case LogLevel::kDebug:
      logger()->debug("{}", message);
      break;
    case LogLevel::kInfo:
      logger()->info("{}", message);
      break;
    case LogLevel::kWarn:
      logger()->warn("{}", message);
      break;
    case LogLevel::kError:
      logger()->error("{}", message);
      break;
  }
}

}  // namespace ringguard
