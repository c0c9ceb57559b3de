#pragma once
// How library code logs (private: spdlog and fmt appear here, not in public headers). Every line carries
// the rank and the subsystem: "[ringguard] [warning] [rank 1] [guard] op 'matmul' ...".
//
//   logWarn(Subsys::kGuard, "op '{}' has no fallback", name);
//
// Translation units that cannot include spdlog (torch ships its own fmt) use core/log_text.h.
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>
#include <utility>

#include "core/log_subsys.h"
#include "ringguard/core/log.h"

namespace ringguard {

// The "ringguard" logger (tests add sinks to it).
std::shared_ptr<spdlog::logger> logger();

namespace detail {
extern std::atomic<uint32_t> gLogSubsystems;  // bit s: Subsys s is selected
extern std::atomic<int> gLogRank;             // -1 until the first communicator sets it
inline bool selected(spdlog::level::level_enum level, Subsys s) {
  return level >= spdlog::level::warn || (gLogSubsystems.load(std::memory_order_relaxed) >> unsigned(s)) & 1u;
}
template <typename... Args>
void logAt(spdlog::level::level_enum level, Subsys s, fmt::format_string<Args...> f, Args&&... args) {
  const std::shared_ptr<spdlog::logger>& l = logger();
  if (!l->should_log(level) || !selected(level, s)) return;
  // In the message, not the pattern: sinks an application adds (or its own "ringguard" logger) show it too.
  const int rank = gLogRank.load(std::memory_order_relaxed);
  if (rank >= 0) {
    l->log(level, "[rank {}] [{}] {}", rank, subsysName(s), fmt::format(f, std::forward<Args>(args)...));
  } else {
    l->log(level, "[{}] {}", subsysName(s), fmt::format(f, std::forward<Args>(args)...));
  }
}
}  // namespace detail

template <typename... Args>
void logDebug(Subsys s, fmt::format_string<Args...> f, Args&&... args) {
  detail::logAt(spdlog::level::debug, s, f, std::forward<Args>(args)...);
}
template <typename... Args>
void logInfo(Subsys s, fmt::format_string<Args...> f, Args&&... args) {
  detail::logAt(spdlog::level::info, s, f, std::forward<Args>(args)...);
}
template <typename... Args>
void logWarn(Subsys s, fmt::format_string<Args...> f, Args&&... args) {
  detail::logAt(spdlog::level::warn, s, f, std::forward<Args>(args)...);
}
template <typename... Args>
void logError(Subsys s, fmt::format_string<Args...> f, Args&&... args) {
  detail::logAt(spdlog::level::err, s, f, std::forward<Args>(args)...);
}

}  // namespace ringguard
