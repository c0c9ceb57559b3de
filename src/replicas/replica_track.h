#pragma once
// The timeline track of the replica check and the gradient outliers ("replicas"), made once per process.
#include <cstdint>

namespace ringguard {

uint32_t replicaTrack();

}  // namespace ringguard
