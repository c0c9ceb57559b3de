#pragma once
// The process environment as ringguard reads it: every RINGGUARD_* variable the library reads is a declared
// setting (settings.h), read through envLookup; set RINGGUARD_* names that are neither settings nor tool
// names are warned about once.
#include <map>
#include <string>
#include <vector>

#include "ringguard/core/settings.h"
#include "ringguard/core/status.h"

namespace ringguard {

// The declarations under their environment-registry names (the same table as settings()).
using EnvVar = Setting;
inline const std::vector<Setting>& envRegistry() { return settings(); }
inline const Setting* findEnvVar(const std::string& name) { return findSetting(name); }

// The value set in the environment, or nullptr when unset. ENFORCEs that `name` is declared.
const char* envLookup(const char* name);

// A RINGGUARD_* name that is not a library setting: read by scripts/, launch/, the tests, the benchmarks or
// the Python package. `name` ends in '*' for a prefix (RINGGUARD_TEST_*).
struct ToolEnvName {
  const char* name;
  const char* readBy;
  const char* description;
};
const std::vector<ToolEnvName>& toolEnvNames();

// The declared name closest to `name` (edit distance; ties: declaration order).
std::string closestEnvName(const std::string& name);
// One warning text for each `RINGGUARD_*=...` entry of `environ`-style `env` (null-terminated) that is
// neither declared nor a tool name; each names the closest declared variable.
std::vector<std::string> unknownEnvWarnings(char** env);
// Logs unknownEnvWarnings(environ) at warn level, once per process (Options::fromEnv calls it).
void warnUnknownEnv();

// Settings given as a map instead of the environment (a process group's options, set_fault): the parsers
// read C strings, so a NUL byte would silently cut a name or value ("bitflip\0garbage" read as "bitflip");
// kInvalidArgument naming the setting and the NUL's offset.
Status checkSettingMap(const std::map<std::string, std::string>& settings);

}  // namespace ringguard
