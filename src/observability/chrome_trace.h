#pragma once
// Trace events as a Chrome trace (the JSON object format that chrome://tracing and Perfetto's JSON
// importer read): one process per rank, one thread track per communicator (and guard, policy), spans as
// complete ("X") events, the rest as instants ("i") and counters ("C"). Times in microseconds.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/trace_events.h"

namespace ringguard {
namespace observability {

nlohmann::json chromeTrace(const std::vector<trace::Event>& events, const std::vector<std::string>& tracks,
                           int rank, uint64_t dropped, size_t capacity);

}  // namespace observability
}  // namespace ringguard
