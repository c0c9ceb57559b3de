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

}  // namespace ringguard
