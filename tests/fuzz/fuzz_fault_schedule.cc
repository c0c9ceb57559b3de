// The fault-schedule parser (core/options.h parseFaultSchedule) and what consumes its entries
// (core/fault_injector.h: checkFaultSchedule, FaultInjector). Input: world size (int32), mode byte (bits 0-2
// the mode, 6-7 the repeat), seed (uint64; also the multibit and burst widths), payload bytes (uint16), then
// the schedule text. A parsed schedule round-trips through its text; an entry checkFaultSchedule accepts
// fires exactly where it says; every plan stays inside its payload.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/corruption_plan.h"
#include "core/fault_injector.h"
#include "fuzz_util.h"
#include "ringguard/core/options.h"

using namespace ringguard;
using ringguard::fuzz::FuzzInput;

namespace {

std::string scheduleText(const std::vector<FaultScheduleEntry>& entries) {
  std::string s;
  for (const FaultScheduleEntry& e : entries) {
    if (!s.empty()) s += ',';
    s += std::to_string(e.collective) + ":" + std::to_string(e.step) + ":" + std::to_string(e.slice) + ":" +
         std::to_string(e.rank);
  }
  return s;
}

void checkPlan(const FaultInjector& inj, const FaultScheduleEntry& e, int attempt, size_t bytes) {
  const CorruptionPlan plan = inj.plan(e.collective, e.step, e.slice, e.rank, attempt, bytes);
  RINGGUARD_FUZZ_CHECK(corruptionPlanFits(plan, bytes));
  if (!plan.damages()) return;
  std::vector<uint8_t> payload(bytes, 0x5A);
  const std::vector<uint8_t> before = payload;
  Trailer trailer = makeTrailer(SliceId{}, 0, 0);
  const Trailer trailerBefore = trailer;
  RINGGUARD_FUZZ_CHECK(applyCorruptionPlan(plan, payload.data(), &trailer));
  // A damaging plan changes something, and what it damages no longer verifies.
  if (plan.target == CorruptionPlan::Target::kTrailer) {
    RINGGUARD_FUZZ_CHECK(checkTrailer(trailer, SliceId{}) != SliceCheck::kOk);
    RINGGUARD_FUZZ_CHECK(payload == before);
  } else {
    RINGGUARD_FUZZ_CHECK(payload != before);
    RINGGUARD_FUZZ_CHECK(std::memcmp(&trailer, &trailerBefore, sizeof trailer) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const int worldSize = in.take<int32_t>();
  const uint8_t modeByte = in.take<uint8_t>();
  const uint64_t seed = in.take<uint64_t>();
  const size_t bytes = in.take<uint16_t>() % 4097;
  const std::string text = in.rest();

  std::vector<FaultScheduleEntry> entries = {FaultScheduleEntry{9, 9, 9, 9}};
  const Status st = parseFaultSchedule(text, &entries);
  if (!st.isOk()) {
    RINGGUARD_FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument);
    RINGGUARD_FUZZ_CHECK(st.message().rfind("fault schedule '", 0) == 0);
    RINGGUARD_FUZZ_CHECK(entries.size() == 1 && entries[0] == (FaultScheduleEntry{9, 9, 9, 9}));  // untouched
    return 0;
  }
  // One entry per ','-separated item, and the entries' own text parses back to them.
  RINGGUARD_FUZZ_CHECK(entries.size() ==
                       (text.empty() ? 0 : size_t(std::count(text.begin(), text.end(), ',')) + 1));
  std::vector<FaultScheduleEntry> again;
  RINGGUARD_FUZZ_CHECK(parseFaultSchedule(scheduleText(entries), &again).isOk() && again == entries);

  FaultOptions fault;
  fault.mode = static_cast<FaultMode>(modeByte % 8);
  fault.schedule = entries;
  fault.seed = seed;
  fault.bits = 1 + int(seed % 64);
  fault.burstBits = 2 + int((seed >> 8) % 31);
  fault.repeat = 1 + (modeByte >> 6);
  const Status reach = checkFaultSchedule(fault, worldSize);
  if (!reach.isOk()) {
    RINGGUARD_FUZZ_CHECK(reach.code() == StatusCode::kInvalidArgument);
    RINGGUARD_FUZZ_CHECK(reach.message().find("can never fire") != std::string::npos);
    return 0;
  }
  RINGGUARD_FUZZ_CHECK(entries.empty() || worldSize >= 1);
  // Accepted entries fire where they say, in the way their mode says.
  const FaultInjector inj(fault);
  for (const FaultScheduleEntry& e : entries) {
    RINGGUARD_FUZZ_CHECK(e.rank >= 0 && e.rank < worldSize);
    switch (fault.mode) {
      case FaultMode::kControl:
        RINGGUARD_FUZZ_CHECK(inj.corruptsControl(e.collective, e.step, e.slice, e.rank));
        RINGGUARD_FUZZ_CHECK(!inj.corrupts(e.collective, e.step, e.slice, e.rank, 0));
        break;
      case FaultMode::kDelay:
        RINGGUARD_FUZZ_CHECK(inj.delayMs(e.collective, e.step, e.slice, e.rank, 0) == fault.delayMs);
        RINGGUARD_FUZZ_CHECK(!inj.corrupts(e.collective, e.step, e.slice, e.rank, 0));
        break;
      default:
        RINGGUARD_FUZZ_CHECK(inj.corrupts(e.collective, e.step, e.slice, e.rank, 0));
        RINGGUARD_FUZZ_CHECK(!inj.corrupts(e.collective, e.step, e.slice, e.rank, 64));
        checkPlan(inj, e, 0, bytes);
        break;
    }
  }
  return 0;
}
