#pragma once
// Whether the ranks of a shared-memory group each have a core of their own, from every rank's CPU set
// (sched_getaffinity), which each rank publishes when the group's shared memory is set up. A rank bound to
// one core (Open MPI binds to cores by default at 2 ranks) sees one CPU in its own set, so its set alone
// cannot tell a rank bound to a core of its own from ranks crowded onto one core; the sets of the whole group
// can: each rank can run on a core no other rank needs when the ranks can be matched to distinct CPUs of
// their sets (docs/design/protocol.md, "Single-copy read"; docs/PERFORMANCE.md, issue 45). A CPU is what
// the kernel schedules on: two ranks bound to the two hardware threads of one core count as having their own
// (as the per-process count did before).
//
// A set travels as a hex mask (cpuMaskText): character i holds CPUs 4i .. 4i + 3, bit j CPU 4i + j, at most
// kMaxCpuMaskChars characters, so a rank's record stays small whatever the host.
#include <cstddef>
#include <string>
#include <vector>

namespace ringguard {
namespace shm {

// The CPUs this process may run on, ascending; empty where the kernel does not say.
std::vector<int> cpusOfThisProcess();

inline constexpr size_t kMaxCpuMaskChars = 1024;  // 4096 CPUs

// `cpus` (each in [0, 4 x kMaxCpuMaskChars)) as a hex mask, and back; parseCpuMask is false, with *cpus
// empty, for text that is not one (a character outside 0-9a-f, longer than kMaxCpuMaskChars), which a peer
// may send.
std::string cpuMaskText(const std::vector<int>& cpus);
bool parseCpuMask(const std::string& text, std::vector<int>* cpus);

// Whether every rank can have a CPU of its own: a matching of the ranks to distinct CPUs, rank r's taken
// from cpus[r]. False for an empty group member's set. Every rank computes it from the same sets, so every
// rank of a group gets the same answer.
bool everyRankHasACpu(const std::vector<std::vector<int>>& cpus);

}  // namespace shm
}  // namespace ringguard
