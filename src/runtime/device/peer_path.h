#pragma once
// The direct path over peer windows (runtime/direct_path.h): the verified one-sided collectives of
// cuda/peer/ on windows mapped between the ranks of one host (transport/peer/peer_window.h).
#include <memory>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/options.h"
#include "runtime/direct_path.h"
#include "transport/peer/peer_window.h"

namespace ringguard {
namespace cuda {

struct PeerPathOptions {
  size_t capacity = 32u << 20;     // payload bytes per collective (RINGGUARD_PEER_BYTES)
  size_t twoShotBytes = 4u << 20;  // RINGGUARD_PEER_TWO_SHOT_BYTES
  size_t arrivalBytes = 1u << 20;  // RINGGUARD_PEER_ARRIVAL_BYTES: PeerWindowArgs::arriveFirst above it
  // Payload bytes per slot of each send/recv channel (RINGGUARD_PEER_P2P_BYTES; 0: send/recv stays on the
  // pipeline). The factory maps channels only for RINGGUARD_DEVICE_TRANSPORT=peer (device_factory.cc).
  size_t p2pBytes = 1u << 20;
  // Whether the split all-to-all takes the path (its blocks are checked by the kernel: a rank's above the
  // window fail every rank): only for RINGGUARD_DEVICE_TRANSPORT=peer. The equal form routes by its size.
  bool splitAlltoall = true;
  peer::PeerHandles handles = peer::PeerHandles::kAuto;  // RINGGUARD_PEER_HANDLES
};

// Collective over `bootstrap` (every rank on one host, each with `device` current). Fails on every rank with
// the reason one rank found (agreeToProceed).
Status createPeerPath(Bootstrap& bootstrap, int device, const PeerPathOptions& peer, const Options& options,
                      std::unique_ptr<DirectPath>* out);

}  // namespace cuda
}  // namespace ringguard
