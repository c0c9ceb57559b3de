#pragma once
// The direct path of a one-rank device communicator (runtime/direct_path.h): nothing crosses a link, so
// each collective is what the host-driven path does at one rank (algorithms/: a copy from the send to the
// receive buffer, nothing in place; an average over one rank divides by 1) as one cudaMemcpyAsync on the
// caller's stream, on `device`. Without it a one-rank CUDA collective went through the progress thread (its
// Work completed there: two thread hand-offs a call), and a stream being captured into a CUDA graph was
// refused. Send/recv to oneself stays on the pipeline. The device factory makes it for
// RINGGUARD_DEVICE_TRANSPORT=auto or peer with RINGGUARD_NAN_CHECK=off (the scan is a host step of the
// pipeline); the communicator keeps its transport's name (namedByTransport).
#include <memory>

#include "runtime/direct_path.h"

namespace ringguard {
namespace cuda {

std::unique_ptr<DirectPath> makeOneRankPath(int device);

}  // namespace cuda
}  // namespace ringguard
