#pragma once
// The PolicyAgreement over a ringguard Communicator: one verified MAX allreduce of the float64 vector. Kept
// header-only so the policy layer itself does not link the runtime; include it where both are linked.
#include <vector>

#include "ringguard/policy/engine.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {

// `comm` must outlive the engine. Host communicators only (the vector is host memory); a device
// communicator's caller reduces through a device buffer instead.
inline PolicyAgreement communicatorAgreement(Communicator* comm) {
  return [comm](std::vector<double>* values) -> Status {
    return comm->allreduce(values->data(), values->data(), values->size(), DataType::kFloat64,
                           ReduceOp::kMax);
  };
}

}  // namespace ringguard
