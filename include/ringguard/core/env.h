#pragma once
// The one registry of RINGGUARD_* environment variables (NCCL's param.h pattern): each variable is
// declared once with its default and description; Options::fromEnv reads through it and
// `ringguard_envdoc` prints docs/ENV.md from it.
#include <string>
#include <vector>

namespace ringguard {

struct EnvVar {
  const char* name;          // e.g. "RINGGUARD_SLICE_BYTES"
  const char* defaultValue;  // as text
  const char* description;
};

// Every variable the library reads, in documentation order.
const std::vector<EnvVar>& envRegistry();
// The value set in the environment, or nullptr when unset. ENFORCEs that `name` is registered.
const char* envLookup(const char* name);
// Markdown table of the registry (docs/ENV.md).
std::string envMarkdown();

// The registry entry of `name`, or nullptr.
const EnvVar* findEnvVar(const std::string& name);
// The registered name closest to `name` (edit distance; ties: registry order).
std::string closestEnvName(const std::string& name);
// One warning text for each `RINGGUARD_*=...` entry of `environ`-style `env` (null-terminated) that is
// neither registered nor one of the names the scripts, tests and the Python package read themselves
// (RINGGUARD_TEST_*, RINGGUARD_BENCH_*, RINGGUARD_AUTOLOAD, RINGGUARD_BUILD_DIR, ...); each names the closest
// registered variable.
std::vector<std::string> unknownEnvWarnings(char** env);
// Logs unknownEnvWarnings(environ) at warn level, once per process (Options::fromEnv calls it).
void warnUnknownEnv();

}  // namespace ringguard
