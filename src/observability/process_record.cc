// The process's record: its communicators (live and destroyed), the environment's file prefixes, and the
// files written from them (include/ringguard/observability/observability.h).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/env.h"
#include "core/logging.h"
#include "core/trace_events.h"
#include "observability/chrome_trace.h"
#include "ringguard/core/settings.h"
#include "ringguard/observability/observability.h"

namespace ringguard {
namespace observability {

namespace {

struct Record {
  std::mutex mu;
  bool initialised = false;
  Status initStatus;
  std::string timelinePrefix, summaryPrefix;
  int rank = -1;  // the first communicator's
  std::map<uint32_t, std::function<CommunicatorSummary()>> live;
  std::map<uint32_t, CommunicatorSummary> done;
};

Record& record() {
  static Record* r = new Record;  // never destroyed: the exit handler and late detaches use it
  return *r;
}

int processRank(Record& r) {
  if (r.rank >= 0) return r.rank;
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

nlohmann::json summaryOf(const CommunicatorSummary& s) {
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& [kind, st] : s.byKind) {
    kinds[kind] = {{"calls", st.calls}, {"failed", st.failed}, {"bytes", st.bytes}, {"ns", st.ns}};
  }
  nlohmann::json counters = nlohmann::json::object();
  s.counters.forEach([&](const char* name, uint64_t value) { counters[name] = value; });
  return {{"track", s.track},
          {"rank", s.rank},
          {"size", s.size},
          {"transport", s.transport},
          {"live", s.live},
          {"collectives", std::move(kinds)},
          {"counters", std::move(counters)},
          // Time in verification: verify + reduce/copy calls (on a device, enqueueing them) and waiting for
          // the executor to finish them.
          {"verification_ns", s.counters.applyNs + s.counters.executorWaitNs},
          {"first_error", s.firstError}};
}

// Whether this process has anything to report: a communicator (live or destroyed), a timeline event or a
// tallied guard or downgrade event. One with nothing (a launcher that imported ringguard, such as
// ringguard-run, or the parent of torch.multiprocessing.spawn) writes no file at exit: it has no rank of its
// own, so its file would be `<prefix>.0.json`, written after rank 0's and replacing it.
bool recordedAnything() {
  Record& r = record();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.live.empty() || !r.done.empty()) return true;
  }
  for (size_t t = 0; t < size_t(trace::Tally::kCount); ++t) {
    if (trace::tallied(trace::Tally(t)) > 0) return true;
  }
  return !trace::snapshot().empty();
}

void atExit() {
  if (!recordedAnything()) return;
  const Status st = writeFiles();
  if (!st.isOk()) logError(Subsys::kCore, "observability at exit: {}", st.message());
}

Status writeJson(const std::string& path, const nlohmann::json& j, int indent) {
  std::ofstream f(path, std::ios::trunc);
  // Text from users (op names, paths) may not be UTF-8: replaced, never a throw on the exit path.
  if (f) f << j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  if (!f) return Status(StatusCode::kInternal, "cannot write " + path);
  return Status::ok();
}

// The folder a `<prefix>.<rank>.json` file goes into must be a folder this process can write into, and that
// file, if it exists, a file it can overwrite: checked when the process starts, so a bad path is reported
// before a run, not after it (its file is then not written at all).
Status checkPrefix(const char* name, const std::string& prefix, int rank) {
  if (prefix.empty()) return Status::ok();
  const size_t slash = prefix.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : prefix.substr(0, slash);
  const std::string file = prefix + "." + std::to_string(rank) + ".json";
  auto refuse = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(name) + "='" + prefix + "': " + why + ": no file is written");
  };
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) return refuse("'" + dir + "' is not a folder");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return refuse("cannot write into '" + dir + "' (" + std::strerror(errno) + ")");
  }
  if (::stat(file.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return refuse("'" + file + "' is a folder");
    if (::access(file.c_str(), W_OK) != 0) {
      return refuse("cannot overwrite '" + file + "' (" + std::strerror(errno) + ")");
    }
  }
  return Status::ok();
}

}  // namespace

Status init() {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.initialised) return r.initStatus;
  r.initialised = true;
  uint64_t events = 0;
  r.initStatus = parseSetting("RINGGUARD_TIMELINE", envLookup, &r.timelinePrefix);
  if (r.initStatus.isOk()) r.initStatus = parseSetting("RINGGUARD_SUMMARY", envLookup, &r.summaryPrefix);
  if (r.initStatus.isOk()) r.initStatus = parseSetting("RINGGUARD_TIMELINE_EVENTS", envLookup, &events);
  if (!r.initStatus.isOk()) {
    logError(Subsys::kCore, "timeline off: {}", r.initStatus.message());
    return r.initStatus;
  }
  for (auto [name, prefix] : {std::make_pair("RINGGUARD_TIMELINE", &r.timelinePrefix),
                              std::make_pair("RINGGUARD_SUMMARY", &r.summaryPrefix)}) {
    const Status st = checkPrefix(name, *prefix, processRank(r));
    if (st.isOk()) continue;
    logError(Subsys::kCore, "{}", st.message());
    prefix->clear();
    if (r.initStatus.isOk()) r.initStatus = st;
  }
  if (!r.timelinePrefix.empty()) trace::start(size_t(events));
  if (!r.timelinePrefix.empty() || !r.summaryPrefix.empty()) std::atexit(atExit);
  return r.initStatus;
}

bool startTimeline(size_t capacity) { return trace::start(capacity); }

uint32_t attach(int rank, int size, const std::string& transport, std::function<CommunicatorSummary()> live) {
  (void)init();  // a bad setting was logged; the communicator works without a timeline
  const uint32_t track = trace::newTrack("comm (" + transport + ", rank " + std::to_string(rank) + " of " +
                                         std::to_string(size) + ")");
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.rank < 0) r.rank = rank;
  r.live[track] = std::move(live);
  return track;
}

void detach(uint32_t track, CommunicatorSummary final) {
  final.live = false;
  logInfo(Subsys::kCore, "summary: rank {} of {} ({}): {}", final.rank, final.size, final.transport,
          final.counters.toString());
  {
    Record& r = record();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.erase(track);
    r.done[track] = std::move(final);
  }
  const Status st = writeFiles();
  if (!st.isOk()) logError(Subsys::kCore, "at communicator destruction: {}", st.message());
}

namespace {

nlohmann::json summaryDoc() {
  Record& r = record();
  std::map<uint32_t, CommunicatorSummary> all;
  int rank = 0;
  {
    // Under the lock: detach() takes it before a communicator's destruction ends, so no live entry is
    // called after its communicator is gone (a communicator never holds its own lock while calling us).
    std::lock_guard<std::mutex> lock(r.mu);
    all = r.done;
    for (const auto& [track, fn] : r.live) all[track] = fn();
    rank = processRank(r);
  }
  nlohmann::json comms = nlohmann::json::array();
  for (const auto& [track, s] : all) comms.push_back(summaryOf(s));
  nlohmann::json events = nlohmann::json::object();
  for (size_t t = 0; t < size_t(trace::Tally::kCount); ++t) {
    events[trace::tallyName(trace::Tally(t))] = trace::tallied(trace::Tally(t));
  }
  const std::vector<trace::Event> recorded = trace::snapshot();
  nlohmann::json j = {{"rank", rank},
                      {"communicators", std::move(comms)},
                      {"events", std::move(events)},
                      {"timeline",
                       {{"on", trace::on()},
                        {"events", recorded.size()},
                        {"dropped", trace::dropped()},
                        {"capacity", trace::capacity()}}}};
  return j;
}

nlohmann::json timelineDoc() {
  int rank = 0;
  {
    Record& r = record();
    std::lock_guard<std::mutex> lock(r.mu);
    rank = processRank(r);
    // Each live communicator's summary first, for its effect: a direct path's finished calls become their
    // spans when the communicator reads their clocks (Communicator::Impl::absorbDirectCounts).
    for (const auto& [track, fn] : r.live) static_cast<void>(fn());
  }
  return chromeTrace(trace::snapshot(), trace::trackLabels(), rank, trace::dropped(), trace::capacity());
}

}  // namespace

int fileRank() {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  return processRank(r);
}

void withdraw(uint32_t track) {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.erase(track);
}

std::string summaryJson() {
  return summaryDoc().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
std::string timelineJson() {
  return timelineDoc().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status writeFiles(const std::string& timelinePrefix, const std::string& summaryPrefix) {
  std::string tl = timelinePrefix, sm = summaryPrefix;
  int rank = 0;
  {
    Record& r = record();
    std::lock_guard<std::mutex> lock(r.mu);
    if (tl.empty()) tl = r.timelinePrefix;
    if (sm.empty()) sm = r.summaryPrefix;
    rank = processRank(r);
  }
  const std::string suffix = "." + std::to_string(rank) + ".json";
  if (!tl.empty()) {
    RINGGUARD_RETURN_IF_ERROR(writeJson(tl + suffix, timelineDoc(), -1));
  }
  if (!sm.empty()) RINGGUARD_RETURN_IF_ERROR(writeJson(sm + suffix, summaryDoc(), 1));
  return Status::ok();
}

}  // namespace observability
}  // namespace ringguard
