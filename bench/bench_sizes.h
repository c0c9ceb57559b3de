#pragma once
// Sizes on benchmark command lines, nccl-tests style: "4096", "64K", "1.5M", "2G" (powers of 1024).
#include <CLI/CLI.hpp>
#include <cstddef>
#include <exception>
#include <string>

namespace ringguard {
namespace bench {

// The bytes `s` names; CLI::ValidationError naming `flag` and `s` for anything else (a negative number, an
// unknown suffix, more than 2^50 bytes).
inline size_t parseBytes(const std::string& flag, const std::string& s) {
  size_t pos = 0;
  double v = -1;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  const std::string suffix = pos == 0 ? s : s.substr(pos);
  double mult = 1;
  if (suffix == "K" || suffix == "k")
    mult = 1 << 10;
  else if (suffix == "M" || suffix == "m")
    mult = 1 << 20;
  else if (suffix == "G" || suffix == "g")
    mult = double(1 << 30);
  else if (!suffix.empty())
    pos = 0;
  if (pos == 0 || !(v >= 0) || v * mult > double(1ull << 50)) {
    throw CLI::ValidationError(flag, "'" + s +
                                         "' is not a size: a number of bytes up to 2^50, optionally "
                                         "with a K, M or G suffix");
  }
  return size_t(v * mult);
}

}  // namespace bench
}  // namespace ringguard
