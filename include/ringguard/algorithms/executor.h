#pragma once
// Executors run "verify, then reduce or copy" on one received slice (docs/design/protocol.md,
// "Executors"). The host executor works on host memory in the calling thread; the device executor (GPU
// data path) enqueues one fused kernel per slice.
#include <cstddef>
#include <cstdint>

#include "ringguard/core/trailer.h"
#include "ringguard/core/types.h"

namespace ringguard {

struct ApplyTask {
  const void* slot = nullptr;        // received payload
  const Trailer* trailer = nullptr;  // received trailer
  SliceId expected;                  // what the schedule says must have arrived
  void* dst = nullptr;               // accumulator / result
  const void* local = nullptr;       // this rank's operand for a reduction (may alias dst)
  size_t count = 0;                  // elements
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool reduce = false;     // reduce-scatter step (else: all-gather copy)
  bool finalStep = false;  // avg divides here
  bool forwarded = false;  // the result is sent on: compute its CRC
  int nranks = 1;
};

struct ApplyResult {
  SliceCheck check = SliceCheck::kOk;  // only kOk wrote dst
  uint32_t outCrc = 0;                 // CRC of dst after the write, when forwarded and kOk
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual uint32_t checksum(const void* data, size_t bytes) = 0;
  // Never writes dst unless the slice verified.
  virtual ApplyResult verifyAndApply(const ApplyTask& task) = 0;
};

// Host memory: ISA-L (or zlib) CRC and the host reduction, blocked so each output block is
// checksummed while it is still in cache.
class HostExecutor final : public Executor {
 public:
  uint32_t checksum(const void* data, size_t bytes) override;
  ApplyResult verifyAndApply(const ApplyTask& task) override;
};

}  // namespace ringguard
