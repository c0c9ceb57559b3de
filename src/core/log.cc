#include <spdlog/sinks/stdout_color_sinks.h>

#include <vector>

#include "core/env.h"
#include "core/log_text.h"
#include "core/logging.h"
#include "ringguard/core/settings.h"

namespace ringguard {

namespace detail {
std::atomic<uint32_t> gLogSubsystems{(1u << unsigned(Subsys::kCount)) - 1};
std::atomic<int> gLogRank{-1};
}  // namespace detail

namespace {

constexpr const char* kLoggerName = "ringguard";
constexpr const char* kPattern = "[%H:%M:%S.%e] [ringguard] [%l] %v";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t at; (at = s.find(sep, begin)) != std::string::npos; begin = at + 1) {
    parts.push_back(s.substr(begin, at - begin));
  }
  parts.push_back(s.substr(begin));
  return parts;
}

// `log` at the level a name says; false (the level unchanged) for a name that is not a level.
bool applyLevel(spdlog::logger& log, const std::string& level) {
  if (!isValidLogLevel(level)) return false;
  log.set_level(spdlog::level::from_str(level));
  return true;
}

std::shared_ptr<spdlog::logger> createLogger() {
  // An application may have registered "ringguard" itself to route our messages; respect that.
  if (auto existing = spdlog::get(kLoggerName)) return existing;
  auto log =
      std::make_shared<spdlog::logger>(kLoggerName, std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  log->set_pattern(kPattern);
  // Options::logLevel defaults to "warn"; match it until the communicator applies the configured level,
  // unless RINGGUARD_LOG_LEVEL says otherwise: what a bootstrap logs while it sets up the group's transport
  // (shared memory's choices, at info) comes before any communicator exists. A bad value keeps "warn" (and
  // fails the first communicator or group, as for RINGGUARD_LOG_SUBSYS).
  log->set_level(spdlog::level::warn);
  std::string level;
  if (parseSetting("RINGGUARD_LOG_LEVEL", envLookup, &level).isOk()) (void)applyLevel(*log, level);
  try {
    spdlog::register_logger(log);
  } catch (const spdlog::spdlog_ex&) {
    // Lost a race with another registration of the same name: use the winner.
    if (auto existing = spdlog::get(kLoggerName)) return existing;
  }
  return log;
}

// RINGGUARD_LOG_SUBSYS, once, before the first message. A bad value keeps every subsystem (and fails the
// first communicator or group, whose Options::fromEnv checks every setting).
void selectFromEnv() {
  std::string spec;
  if (parseSetting("RINGGUARD_LOG_SUBSYS", envLookup, &spec).isOk()) (void)setLogSubsystems(spec);
}

}  // namespace

const char* subsysName(Subsys s) {
  switch (s) {
    case Subsys::kCore:
      return "core";
    case Subsys::kRing:
      return "ring";
    case Subsys::kTransport:
      return "transport";
    case Subsys::kControl:
      return "control";
    case Subsys::kRuntime:
      return "runtime";
    case Subsys::kGuard:
      return "guard";
    case Subsys::kPolicy:
      return "policy";
    case Subsys::kTelemetry:
      return "telemetry";
    case Subsys::kCuda:
      return "cuda";
    case Subsys::kTorch:
      return "torch";
    case Subsys::kCount:
      break;
  }
  return "?";
}

std::shared_ptr<spdlog::logger> logger() {
  // Magic static: initialised exactly once even with concurrent first calls. Never destroyed: exit handlers
  // log (the observability files' errors at exit), and one registered before the first message would
  // otherwise run after this logger, its sinks and spdlog's registry were destroyed (a crash at exit).
  static const auto* instance = new std::shared_ptr<spdlog::logger>([] {
    selectFromEnv();
    return createLogger();
  }());
  return *instance;
}

bool isValidLogLevel(const std::string& level) {
  return level == "off" || spdlog::level::from_str(level) != spdlog::level::off;
}

bool setLogLevel(const std::string& level) { return applyLevel(*logger(), level); }

Status setLogSubsystems(const std::string& spec) {
  const uint32_t all = (1u << unsigned(Subsys::kCount)) - 1;
  const bool exclude = !spec.empty() && spec[0] == '^';
  uint32_t mask = 0;
  for (const std::string& name : split(exclude ? spec.substr(1) : spec, ',')) {
    if (name == "all") {
      mask = all;
      continue;
    }
    bool known = false;
    for (unsigned s = 0; s < unsigned(Subsys::kCount); ++s) {
      if (name == subsysName(Subsys(s))) {
        mask |= 1u << s;
        known = true;
      }
    }
    if (!known) {
      return Status(
          StatusCode::kInvalidArgument,
          "RINGGUARD_LOG_SUBSYS='" + spec + "': unknown subsystem '" + name +
              "': expected all or a list of core, ring, transport, control, runtime, guard, policy, "
              "telemetry, cuda, torch (a leading ^ excludes them)");
    }
  }
  detail::gLogSubsystems.store(exclude ? all & ~mask : mask, std::memory_order_relaxed);
  return Status::ok();
}

void setLogRank(int rank) {
  int unset = -1;
  detail::gLogRank.compare_exchange_strong(unset, rank, std::memory_order_relaxed);
}

void logText(LogLevel level, Subsys subsys, const std::string& message) {
  switch (level) {
    case LogLevel::kDebug:
      logDebug(subsys, "{}", message);
      break;
    case LogLevel::kInfo:
      logInfo(subsys, "{}", message);
      break;
    case LogLevel::kWarn:
      logWarn(subsys, "{}", message);
      break;
    case LogLevel::kError:
      logError(subsys, "{}", message);
      break;
  }
}

}  // namespace ringguard
