#include "ringguard/core/issue_lane.h"

#include <cstdio>
#include <map>
#include <mutex>

#include "ringguard/core/crc32.h"

namespace ringguard {

namespace {

thread_local uint32_t tlLane = kNoIssueLane;

// Names by id, for messages: every name entered in this process (a program uses a handful). Never
// shrinks, so a fingerprint described after its lane was left still names it.
struct Registry {
  std::mutex mutex;
  std::map<uint32_t, std::string> names;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: lanes may be left during static destruction
  return *r;
}

std::string hex(uint32_t id) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", id);
  return buf;
}

// checkIssueLaneName; with `record` the name is also registered, under the same lock as the check (two
// threads entering colliding names at once: one of them fails).
Status admit(const std::string& name, bool record) {
  if (name.empty()) return Status(StatusCode::kInvalidArgument, "an issue lane's name must not be empty");
  const uint32_t id = issueLaneId(name);
  if (id == kNoIssueLane) {
    return Status(
        StatusCode::kInvalidArgument,
        "issue lane '" + name + "' has id 0 (its CRC-32), which means no lane: choose another name");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.names.find(id);
  if (it != r.names.end() && it->second != name) {
    return Status(StatusCode::kInvalidArgument, "issue lanes '" + name + "' and '" + it->second +
                                                    "' have the same id " + hex(id) + ": rename one");
  }
  if (record) r.names.emplace(id, name);
  return Status::ok();
}

}  // namespace

uint32_t issueLaneId(const std::string& name) { return crc32(name.data(), name.size()); }

Status checkIssueLaneName(const std::string& name) { return admit(name, /*record=*/false); }

IssueLane::IssueLane(const std::string& name) : id_(issueLaneId(name)), enclosing_(tlLane) {
  const Status valid = admit(name, /*record=*/true);
  RINGGUARD_ENFORCE(valid.isOk(), "IssueLane: " + valid.message());
  tlLane = id_;
}

IssueLane::~IssueLane() { tlLane = enclosing_; }

uint32_t currentIssueLane() { return tlLane; }

std::string issueLaneName(uint32_t id) {
  if (id == kNoIssueLane) return "";
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.names.find(id);
  return it != r.names.end() ? it->second : "";
}

}  // namespace ringguard
