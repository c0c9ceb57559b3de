#include "runtime/peer_path_agreement.h"

#include <sstream>
#include <string>

#include "core/excerpt.h"

namespace ringguard {

namespace {
constexpr const char* kSettings[] = {"RINGGUARD_PEER_TWO_SHOT_BYTES", "RINGGUARD_NAN_CHECK"};
constexpr size_t kPid = 2, kScheduled = 3, kFields = 4;
}  // namespace

std::vector<uint8_t> peerPathRecord(uint64_t twoShotBytes, NanCheck nanCheck, long pid,
                                    size_t scheduleEntries) {
  const std::string text = std::to_string(twoShotBytes) + " " + nanCheckName(nanCheck) + " " +
                           std::to_string(pid) + " " + std::to_string(scheduleEntries);
  return std::vector<uint8_t>(text.begin(), text.end());
}

Status decidePeerPath(const std::vector<std::vector<uint8_t>>& all, PeerPathAgreement* out) {
  std::vector<std::vector<std::string>> records;  // kFields each (missing ones empty)
  for (const std::vector<uint8_t>& bytes : all) {
    std::istringstream text(std::string(bytes.begin(), bytes.end()));
    std::vector<std::string> fields(kFields);
    for (std::string& f : fields) text >> f;
    records.push_back(std::move(fields));
  }
  for (size_t r = 1; r < records.size(); ++r) {
    for (size_t f = 0; f < kPid; ++f) {
      if (records[r][f] == records[0][f]) continue;
      return Status(StatusCode::kInvalidArgument,
                    std::string(kSettings[f]) + " differs between ranks: rank 0 has " +
                        excerpt(records[0][f]) + ", rank " + std::to_string(r) + " has " +
                        excerpt(records[r][f]) + " (every rank must set the same)");
    }
  }
  *out = PeerPathAgreement{};
  // The ranks' schedules may differ (an entry names its receiving rank): the first rank with one decides.
  for (size_t r = 0; r < records.size() && out->scheduleRank < 0; ++r) {
    if (!records[r][kScheduled].empty() && records[r][kScheduled] != "0") out->scheduleRank = int(r);
  }
  for (size_t r = 0; r < records.size() && out->sameProcess.first < 0; ++r) {
    for (size_t q = 0; q < r; ++q) {
      if (records[q][kPid] == records[r][kPid]) {
        out->sameProcess = {int(q), int(r)};
        break;
      }
    }
  }
  return Status::ok();
}

}  // namespace ringguard
