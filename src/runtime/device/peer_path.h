#pragma once
// The direct path over peer windows (runtime/direct_path.h): the one-shot verified allreduce of
// cuda/peer_allreduce.cu on windows mapped between the ranks of one host (transport/peer/peer_window.h).
#include <memory>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/options.h"
#include "runtime/direct_path.h"

namespace ringguard {
namespace cuda {

// Collective over `bootstrap` (every rank on one host, each with `device` current). `capacity`: payload
// bytes per collective. Fails on every rank with the reason one rank found (agreeToProceed).
Status createPeerPath(Bootstrap& bootstrap, int device, size_t capacity, const Options& options,
                      std::unique_ptr<DirectPath>* out);

}  // namespace cuda
}  // namespace ringguard
