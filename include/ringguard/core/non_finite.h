#pragma once
// Non-finite values (NaN, +Inf, -Inf) in host memory, and the collectives' NaN check
// (RINGGUARD_NAN_CHECK; docs/GUARD.md, "The collectives' NaN check").
#include <cstddef>
#include <cstdint>
#include <string>

#include "ringguard/core/types.h"

namespace ringguard {

struct NonFiniteCount {
  uint64_t count = 0;                // NaN, +Inf and -Inf elements
  uint64_t firstIndex = UINT64_MAX;  // element index of the first one, UINT64_MAX when there is none
  bool clean() const { return count == 0; }
};

// The floating types (the ones that can hold a non-finite value).
bool holdsNonFinite(DataType dtype);
// Counts the non-finite elements of `count` elements at `data`; other dtypes have none.
NonFiniteCount scanNonFinite(const void* data, size_t count, DataType dtype);

// What a collective does when its input holds non-finite values: nothing (no scan), log a warning and
// run, skip the collective on every rank (one O(log N) agreement round per collective), or fail it on
// every rank with an error naming the rank and the first index.
enum class NanCheck : uint8_t { kOff = 0, kWarn, kSkip, kError };
const char* nanCheckName(NanCheck mode);                     // "off", "warn", "skip", "error"
bool parseNanCheck(const std::string& text, NanCheck* out);  // those names

}  // namespace ringguard
