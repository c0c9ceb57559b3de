#include "ringguard/core/non_finite.h"

#include <cstring>

#include "core/element_bits.h"

namespace ringguard {

bool holdsNonFinite(DataType dtype) { return element_bits::holdsNonFinite(dtype); }

NonFiniteCount scanNonFinite(const void* data, size_t count, DataType dtype) {
  NonFiniteCount r;
  DataType part;
  int parts = 0;
  element_bits::FloatBits f;
  if (!element_bits::scanParts(dtype, &part, &parts) || !element_bits::floatBits(part, &f)) return r;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < count * size_t(parts); ++i) {
    if (element_bits::isNonFinite(element_bits::loadBits(p + i * size_t(f.width), f.width), f)) {
      if (r.count == 0) r.firstIndex = i / size_t(parts);
      ++r.count;
    }
  }
  return r;
}

const char* nanCheckName(NanCheck mode) {
  switch (mode) {
    case NanCheck::kOff:
      return "off";
    case NanCheck::kWarn:
      return "warn";
    case NanCheck::kSkip:
      return "skip";
    case NanCheck::kError:
      return "error";
  }
  return "invalid";
}

bool parseNanCheck(const std::string& text, NanCheck* out) {
  for (NanCheck m : {NanCheck::kOff, NanCheck::kWarn, NanCheck::kSkip, NanCheck::kError}) {
    if (text == nanCheckName(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

}  // namespace ringguard
