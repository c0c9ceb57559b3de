#pragma once
// What a run did, for people: the per-rank timeline (RINGGUARD_TIMELINE, a Chrome trace that Perfetto
// opens) and the run summary (RINGGUARD_SUMMARY, ringguard.summary()). Events are recorded by the layers
// through core's trace events; this layer only exports them. docs/GUIDE.md, "Reading a timeline".
#include <cstdint>
#include <functional>
#include <string>

#include "ringguard/core/run_summary.h"
#include "ringguard/core/status.h"

namespace ringguard {
namespace observability {

// Reads RINGGUARD_TIMELINE, RINGGUARD_TIMELINE_EVENTS and RINGGUARD_SUMMARY once per process: with a
// timeline prefix set, recording starts and the files are written again at exit. Idempotent; every
// communicator calls it, and so does the Python module (guard-only runs have no communicator).
// kInvalidArgument naming the variable for a bad value (recording stays off), or for a prefix whose folder
// does not exist or cannot be written (logged at once, before any run; that file is then never written).
Status init();

// Starts recording now with `capacity` events, whatever the environment says (tests, tools). False when
// recording had already started.
bool startTimeline(size_t capacity);

// A communicator's life. attach returns its timeline track; `live` reports its summary while it exists.
// detach keeps `final` for later summaries and writes the files named by the environment.
uint32_t attach(int rank, int size, const std::string& transport, std::function<CommunicatorSummary()> live);
void detach(uint32_t track, CommunicatorSummary final);
// Forgets an attached communicator whose construction failed (no summary, no files).
void withdraw(uint32_t track);

// The process's summary (every communicator, live or destroyed; guard and downgrade events; the
// timeline's fill) and its timeline, as JSON text.
std::string summaryJson();
std::string timelineJson();

// The rank that names this process's files: the first communicator's rank in this process (before one
// exists: RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or 0).
int fileRank();

// Writes <prefix>.<fileRank()>.json for the timeline and the summary prefixes set in the environment (or
// given here, when not empty). kInternal naming the path when a file cannot be written.
Status writeFiles(const std::string& timelinePrefix = "", const std::string& summaryPrefix = "");

}  // namespace observability
}  // namespace ringguard
