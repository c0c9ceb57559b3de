#pragma once
// The guard's FaultValue as the CUDA layer's InjectedValue: the kernels (cuda/snapshot.h) take the CUDA
// layer's own type, so that the CUDA layer names none of the guard's, and the guard's device backends adapt
// here.
#include "cuda/snapshot.h"
#include "ringguard/guard/backend.h"

namespace ringguard {

inline InjectedValue injectedValueOf(FaultValue value) {
  switch (value) {
    case FaultValue::kNaN:
      return InjectedValue::kNaN;
    case FaultValue::kPosInf:
      return InjectedValue::kPosInf;
    case FaultValue::kNegInf:
      return InjectedValue::kNegInf;
    case FaultValue::kLargeFinite:
      break;
  }
  return InjectedValue::kLargestFinite;
}

}  // namespace ringguard
