#pragma once
// One declaration per RINGGUARD_* setting (NCCL's param.h pattern, typed): name, kind, default, range or
// choices, scope, description and Python field, in one table (src/core/settings.cc). Everything else is
// derived from it: the typed parsers below (one per kind), the Options and DeviceSettings defaults and
// bounds (options.h), docs/ENV.md and python/ringguard/_settings.py (`ringguard_envdoc`).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

enum class SettingKind : uint8_t {
  kUnsigned,  // decimal digits only (no sign, no space), in [lo, hi]; with zeroMeansDefault 0 too
  kReal,      // a decimal number in [realLo, realHi] (NaN is out of range)
  kChoice,    // one of `choices`, or a choice's alias
  kList,      // comma-separated `choices`, optionally after a leading '^' (everything but those)
  kText,      // any text: paths, edit lists (their readers check the structure)
  kSchedule,  // fault schedule: comma-separated collective:step:slice:rank entries
};
const char* settingKindName(SettingKind kind);  // "unsigned", "real", "choice", "list", "text", "schedule"

// kGroup: a value per communicator / process group (an Options or DeviceSettings field; Python's
// ringguard.Options sets it per group). kProcess: read once for the whole process (the CUDA layer, the
// telemetry sampler, the policy engine, logging and tracing), so no Options field.
enum class SettingScope : uint8_t { kGroup, kProcess };

struct SettingChoice {
  const char* name;
  const char* alias;  // another accepted spelling with the same meaning, or nullptr
};

struct Setting {
  const char* name;  // "RINGGUARD_SLICE_BYTES"
  SettingKind kind;
  SettingScope scope;
  const char* defaultValue;            // as text, valid under the kind (tested)
  uint64_t lo = 0, hi = 0;             // kUnsigned
  bool zeroMeansDefault = false;       // kUnsigned: 0 (the transport's default) is accepted besides [lo, hi]
  double realLo = 0.0, realHi = 0.0;   // kReal
  std::vector<SettingChoice> choices;  // kChoice, kList
  const char* summary;                 // what it does; range, choices and default are not restated here
  const char* pythonField;             // the ringguard.Options field (kGroup), or nullptr (kProcess)
  const char* pythonType;   // the field's annotation where it is not the kind's (timeout: timedelta)
  std::string description;  // summary + the generated range sentence
};

using SettingLookup = std::function<const char*(const char*)>;  // nullptr: unset

// Every setting, per-group ones first, in documentation order.
const std::vector<Setting>& settings();
// The declaration of `name`, or nullptr.
const Setting* findSetting(const std::string& name);
// The declaration of `name`; ENFORCEs that it is declared.
const Setting& declaredSetting(const char* name);

// What the kind accepts, as put after "expected": "[0, 1073741824]", "0 or [2, 64]", "one of off, warn,
// skip, error", "comma-separated core, ring, ..., optionally after ^ (all but those)"; "" for kText.
std::string settingRange(const Setting& s);
// Whether `value` is in the declared range of a kUnsigned setting (0 included where zeroMeansDefault); a
// negative value never is. What Options::validate checks its integer fields with.
bool inSettingRange(const Setting& s, int64_t value);
bool inSettingRange(const Setting& s, uint64_t value);
// The same for a kReal setting (NaN never is).
bool inSettingRange(const Setting& s, double value);
// The choice `text` names (its name or alias), or -1.
int settingChoiceIndex(const Setting& s, const std::string& text);

// Checks `text` against the declaration of `s`: kInvalidArgument "NAME='text': what is wrong: expected
// <settingRange>" otherwise.
Status checkSetting(const Setting& s, const char* text);
// Checks every declared setting that `lookup` answers (a job with a bad value fails when its communicator
// or group is made, also for the settings it has not read yet).
Status checkSettings(const SettingLookup& lookup);

// Typed reads of setting `name` through `lookup`: the value when set and valid, the declared default when
// unset, kInvalidArgument naming the variable and the value (with *out untouched) otherwise. ENFORCEs that
// `name` is declared with a matching kind. E.g. parseSetting("RINGGUARD_TIMELINE_EVENTS", envLookup, &n).
Status parseSetting(const char* name, const SettingLookup& lookup, uint64_t* out);  // kUnsigned
Status parseSetting(const char* name, const SettingLookup& lookup, double* out);    // kReal
Status parseSetting(const char* name, const SettingLookup& lookup,
                    std::string* out);  // other kinds: the text
// The unsigned kind's parser for any `name` and range: decimal digits only (no sign, no space, nothing
// after), in [lo, hi]; kInvalidArgument "NAME='text': not a non-negative decimal integer | too large | out of
// range: expected [lo, hi]" otherwise.
Status parseUnsignedSetting(const char* name, const char* text, uint64_t lo, uint64_t hi, uint64_t* out);
// kChoice: the index of the chosen entry in `choices` (aliases give their entry's index).
Status parseChoiceSetting(const char* name, const SettingLookup& lookup, int* index);

// The declared defaults, typed: what the member initializers of Options and DeviceSettings use, so each
// default is stated once, in the declaration.
uint64_t declaredUnsigned(const char* name);
double declaredReal(const char* name);
std::string declaredText(const char* name);
int declaredChoice(const char* name);

// docs/ENV.md: one table per scope (Type, Default, Range columns) and one of the names the scripts,
// tests and Python package read themselves (src/core/env.h: toolEnvNames).
std::string settingsMarkdown();
// python/ringguard/_settings.py: SETTINGS (every declaration) and the Fields dataclass (one Optional field
// per kGroup setting) that ringguard.Options extends.
std::string settingsPython();

}  // namespace ringguard
