#pragma once
// Issue lanes: an opt-in name for the thread that issues collectives, carried in every collective's
// fingerprint, so that two threads issuing same-shape collectives in a different order on different ranks
// fail with kFingerprintMismatch naming both lanes instead of silently getting each other's results
// (docs/RELIABILITY.md, "Threads and collective order (defect 8)").
//
//   {
//     ringguard::IssueLane lane("prefetch");  // this thread's collectives, on every communicator
//     comm.allreduceAsync(...);               // fingerprint: lane 'prefetch' #0, #1, ... per communicator
//   }                                         // back to the enclosing lane (or none)
//
// A lane is paired across ranks by its name: each rank's thread that issues a stream of collectives names
// the same lane. The lane is read on the issuing thread when a collective is enqueued, not where it runs.
// Collectives issued outside every lane carry lane 0 and match by issue order alone, as before.
#include <cstdint>
#include <string>

#include "ringguard/core/status.h"

namespace ringguard {

inline constexpr uint32_t kNoIssueLane = 0;

// A lane's id: the CRC-32 of its name (the same in every process and build). OK when `name` can name a
// lane: not empty, its id is not kNoIssueLane, and no other name entered in this process has the same id;
// otherwise kInvalidArgument saying which.
Status checkIssueLaneName(const std::string& name);
uint32_t issueLaneId(const std::string& name);

// Puts the calling thread in lane `name` for its lifetime (RAII, nestable: the destructor restores the
// enclosing lane). `name` must pass checkIssueLaneName (RINGGUARD_ENFORCE otherwise). Destroy it on the
// thread that made it.
class IssueLane {
 public:
  explicit IssueLane(const std::string& name);
  ~IssueLane();
  IssueLane(const IssueLane&) = delete;
  IssueLane& operator=(const IssueLane&) = delete;

  uint32_t id() const { return id_; }

 private:
  uint32_t id_;
  uint32_t enclosing_;
};

// The calling thread's lane (kNoIssueLane outside every IssueLane).
uint32_t currentIssueLane();

// The name of lane `id` as this process knows it: a lane entered here (an id can't be reversed into its
// name). "" for kNoIssueLane and for a lane only another process entered.
std::string issueLaneName(uint32_t id);

}  // namespace ringguard
