// The environment registry's lookups (core/env.h): unknownEnvWarnings over any environment, closestEnvName
// and findEnvVar over any name. Input: text, one `environ` entry per line (`NAME=value`, or a bare name).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/env.h"
#include "fuzz_util.h"

using namespace ringguard;
using ringguard::fuzz::splitLines;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // NUL bytes end a C string early, as they would in a real environment block.
  std::vector<std::string> entries;
  for (const std::string& line : splitLines(text)) entries.push_back(line.c_str());
  std::vector<char*> env;
  for (std::string& e : entries) env.push_back(e.data());
  env.push_back(nullptr);

  size_t unknown = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string name = entries[i].substr(0, entries[i].find('='));
    const EnvVar* v = findEnvVar(name);
    if (v != nullptr) RINGGUARD_FUZZ_CHECK(name == v->name);
    if (name.rfind("RINGGUARD_", 0) == 0 && v == nullptr) ++unknown;
    // The edit distance to every registered name is the slow part (unknownEnvWarnings does it again for
    // each unknown name): the first entry only.
    if (i != 0) continue;
    const std::string closest = closestEnvName(name);
    RINGGUARD_FUZZ_CHECK(findEnvVar(closest) != nullptr);
    if (v != nullptr) RINGGUARD_FUZZ_CHECK(closest == name);
  }
  const std::vector<std::string> warnings = unknownEnvWarnings(env.data());
  // One warning per unknown RINGGUARD_* entry at most (the tool names are exempt), each naming a
  // registered variable.
  RINGGUARD_FUZZ_CHECK(warnings.size() <= unknown);
  for (const std::string& w : warnings) {
    RINGGUARD_FUZZ_CHECK(w.rfind("environment variable RINGGUARD_", 0) == 0);
    const size_t at = w.rfind("did you mean ");
    RINGGUARD_FUZZ_CHECK(at != std::string::npos);
    const size_t nameBegin = at + std::strlen("did you mean ");
    RINGGUARD_FUZZ_CHECK(findEnvVar(w.substr(nameBegin, w.find('?', nameBegin) - nameBegin)) != nullptr);
  }
  RINGGUARD_FUZZ_CHECK(unknownEnvWarnings(nullptr).empty());
  return 0;
}
