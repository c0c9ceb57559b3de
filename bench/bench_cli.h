#pragma once
// Checks of benchmark command-line reals. CLI11's PositiveNumber lets NaN through (and prints its bound as a
// 300-digit number); integer options use CLI::Range.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

namespace ringguard {
namespace bench {

// A finite number above 0: "must be a finite positive number, got nan" otherwise.
inline CLI::Validator finitePositive() {
  return CLI::Validator(
      [](std::string& s) {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        const bool ok = end != s.c_str() && *end == '\0' && std::isfinite(v) && v > 0;
        return ok ? std::string() : "must be a finite positive number, got " + s;
      },
      "POSITIVE");
}

}  // namespace bench
}  // namespace ringguard
