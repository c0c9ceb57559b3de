#include "ringguard/policy/rules.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/env.h"
#include "core/excerpt.h"
#include "core/json_input.h"
#include "core/logging.h"
#include "core/regular_file.h"
#include "ringguard/core/crc32.h"

namespace ringguard {

using nlohmann::json;

const char* policyScopeName(PolicyScope s) { return s == PolicyScope::kCollective ? "collective" : "local"; }

std::string PolicyCondition::describe() const {
  return fmt::format("{} {} {:g} (exit {:g})", signal, above ? "above" : "below", enter, exit);
}

const PolicyVariant* PolicyFamily::variant(const std::string& n) const {
  const int i = indexOf(n);
  return i < 0 ? nullptr : &variants[static_cast<size_t>(i)];
}

int PolicyFamily::indexOf(const std::string& n) const {
  for (size_t i = 0; i < variants.size(); ++i) {
    if (variants[i].name == n) return static_cast<int>(i);
  }
  return -1;
}

const PolicyFamily* PolicyRules::family(const std::string& n) const {
  for (const PolicyFamily& f : families) {
    if (f.name == n) return &f;
  }
  return nullptr;
}

std::vector<std::string> PolicyRules::signalsOf(const PolicyFamily& f) const {
  std::set<std::string> names;
  for (const PolicyVariant& v : f.variants) {
    for (const PolicyCondition& c : v.when) names.insert(c.signal);
  }
  return std::vector<std::string>(names.begin(), names.end());
}

namespace {

// Validation: each helper returns false after setting the error, which names the key, value and problem.
class Checker {
 public:
  explicit Checker(std::string origin) : origin_(std::move(origin)) {}

  bool fail(const std::string& key, const json* value, const std::string& problem) {
    if (value != nullptr) {
      error_ = fmt::format("rules {}: key '{}': value {}: {}", origin_, excerpt(key), excerpt(value->dump()),
                           problem);
    } else {
      error_ = fmt::format("rules {}: key '{}': {}", origin_, excerpt(key), problem);
    }
    return false;
  }
  Status status() const { return Status(StatusCode::kInvalidArgument, error_); }

  // Only the keys in `allowed` (a misspelt key would silently do nothing).
  bool onlyKeys(const json& obj, const std::string& at, std::initializer_list<const char*> allowed) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || it.key() == a;
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        return fail(at + "/" + it.key(), &*it, "unknown key (allowed here: " + list + ")");
      }
    }
    return true;
  }
  bool object(const json& parent, const std::string& at, const char* key, const json** out, bool required) {
    *out = nullptr;
    auto it = parent.find(key);
    if (it == parent.end())
      return required ? fail(at + "/" + key, nullptr, "missing (an object is required)") : true;
    if (!it->is_object()) return fail(at + "/" + key, &*it, "expected an object");
    *out = &*it;
    return true;
  }
  bool string(const json& parent, const std::string& at, const char* key, std::string* out, bool required) {
    auto it = parent.find(key);
    if (it == parent.end())
      return required ? fail(at + "/" + key, nullptr, "missing (a string is required)") : true;
    if (!it->is_string()) return fail(at + "/" + key, &*it, "expected a string");
    *out = it->get<std::string>();
    return true;
  }
  bool integer(const json& parent, const std::string& at, const char* key, int64_t lo, int64_t hi,
               int64_t* out) {
    auto it = parent.find(key);
    if (it == parent.end()) return true;
    if (!it->is_number_integer()) return fail(at + "/" + key, &*it, "expected an integer");
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) return fail(at + "/" + key, &*it, fmt::format("out of range [{}, {}]", lo, hi));
    *out = v;
    return true;
  }
  bool number(const json& parent, const std::string& at, const char* key, double* out) {
    auto it = parent.find(key);
    if (it == parent.end()) return fail(at + "/" + key, nullptr, "missing (a number is required)");
    if (!it->is_number()) return fail(at + "/" + key, &*it, "expected a number");
    *out = it->get<double>();
    if (!std::isfinite(*out)) return fail(at + "/" + key, &*it, "must be finite");
    return true;
  }

 private:
  std::string origin_;
  std::string error_;
};

// Rules are a few kilobytes, nested about eight deep.
constexpr JsonLimits kRulesLimits{size_t{1} << 20, 32};

bool validName(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

bool parseCondition(Checker& ck, const json& c, const std::string& at, PolicyCondition* out) {
  if (!c.is_object())
    return ck.fail(at, &c, "expected an object {\"signal\": ..., \"above\"|\"below\": {...}}");
  if (!ck.onlyKeys(c, at, {"signal", "above", "below"})) return false;
  if (!ck.string(c, at, "signal", &out->signal, true)) return false;
  if (!validName(out->signal))
    return ck.fail(at + "/signal", &c["signal"], "not a signal name ([A-Za-z0-9_.-]+)");
  const bool hasAbove = c.contains("above"), hasBelow = c.contains("below");
  if (hasAbove == hasBelow) return ck.fail(at, &c, "needs exactly one of \"above\" and \"below\"");
  out->above = hasAbove;
  const char* dir = hasAbove ? "above" : "below";
  const json* t = nullptr;
  if (!ck.object(c, at, dir, &t, true)) return false;
  const std::string tat = at + "/" + dir;
  if (!ck.onlyKeys(*t, tat, {"enter", "exit"})) return false;
  if (!ck.number(*t, tat, "enter", &out->enter)) return false;
  out->exit = out->enter;
  if (t->contains("exit") && !ck.number(*t, tat, "exit", &out->exit)) return false;
  if (out->above && out->exit > out->enter) {
    return ck.fail(
        tat + "/exit", &(*t)["exit"],
        fmt::format("is above enter {:g}: an \"above\" condition leaves at a lower value than it enters "
                    "(exit <= enter)",
                    out->enter));
  }
  if (!out->above && out->exit < out->enter) {
    return ck.fail(
        tat + "/exit", &(*t)["exit"],
        fmt::format("is below enter {:g}: a \"below\" condition leaves at a higher value than it enters "
                    "(exit >= enter)",
                    out->enter));
  }
  return true;
}

constexpr int64_t kMaxDwellMs = 24LL * 3600 * 1000;
constexpr int64_t kMaxDwellSteps = 100000000;

bool parseFamily(Checker& ck, const std::string& name, const json& f, const std::string& at,
                 PolicyFamily* out) {
  out->name = name;
  if (!validName(name)) return ck.fail(at, nullptr, "family name must match [A-Za-z0-9_.-]+");
  if (!f.is_object()) return ck.fail(at, &f, "expected an object");
  if (!ck.onlyKeys(f, at, {"scope", "description", "min_dwell_ms", "min_dwell_steps", "variants"}))
    return false;
  std::string scope = "local";
  if (!ck.string(f, at, "scope", &scope, false)) return false;
  if (scope == "local") {
    out->scope = PolicyScope::kLocal;
  } else if (scope == "collective") {
    out->scope = PolicyScope::kCollective;
  } else {
    return ck.fail(at + "/scope", &f["scope"], "expected \"local\" or \"collective\"");
  }
  if (!ck.string(f, at, "description", &out->description, false)) return false;
  int64_t dwellMs = 0, dwellSteps = 0;
  if (!ck.integer(f, at, "min_dwell_ms", 0, kMaxDwellMs, &dwellMs)) return false;
  if (!ck.integer(f, at, "min_dwell_steps", 0, kMaxDwellSteps, &dwellSteps)) return false;
  auto vs = f.find("variants");
  if (vs == f.end()) return ck.fail(at + "/variants", nullptr, "missing (a list of variants is required)");
  if (!vs->is_array() || vs->empty()) return ck.fail(at + "/variants", &*vs, "expected a non-empty array");
  bool baseline = false;
  for (size_t i = 0; i < vs->size(); ++i) {
    const json& v = (*vs)[i];
    const std::string vat = fmt::format("{}/variants/{}", at, i);
    if (!v.is_object()) return ck.fail(vat, &v, "expected an object");
    if (!ck.onlyKeys(
            v, vat,
            {"name", "priority", "when", "match", "min_dwell_ms", "min_dwell_steps", "description"})) {
      return false;
    }
    PolicyVariant pv;
    if (!ck.string(v, vat, "name", &pv.name, true)) return false;
    if (!validName(pv.name))
      return ck.fail(vat + "/name", &v["name"], "variant name must match [A-Za-z0-9_.-]+");
    if (out->indexOf(pv.name) >= 0)
      return ck.fail(vat + "/name", &v["name"], "duplicate variant name in the family");
    int64_t prio = 0;
    if (!ck.integer(v, vat, "priority", -1000000, 1000000, &prio)) return false;
    pv.priority = static_cast<int>(prio);
    pv.minDwellMs = dwellMs;
    pv.minDwellSteps = dwellSteps;
    if (!ck.integer(v, vat, "min_dwell_ms", 0, kMaxDwellMs, &pv.minDwellMs)) return false;
    if (!ck.integer(v, vat, "min_dwell_steps", 0, kMaxDwellSteps, &pv.minDwellSteps)) return false;
    if (!ck.string(v, vat, "description", &pv.description, false)) return false;
    std::string match = "all";
    if (!ck.string(v, vat, "match", &match, false)) return false;
    if (match != "all" && match != "any")
      return ck.fail(vat + "/match", &v["match"], "expected \"all\" or \"any\"");
    pv.matchAll = match == "all";
    auto when = v.find("when");
    if (when != v.end()) {
      if (!when->is_array() || when->empty()) {
        return ck.fail(vat + "/when", &*when,
                       "expected a non-empty array of conditions (omit it for a baseline)");
      }
      for (size_t c = 0; c < when->size(); ++c) {
        PolicyCondition pc;
        if (!parseCondition(ck, (*when)[c], fmt::format("{}/when/{}", vat, c), &pc)) return false;
        pv.when.push_back(std::move(pc));
      }
    } else if (v.contains("match")) {
      return ck.fail(vat + "/match", &v["match"], "given without \"when\" conditions");
    }
    baseline = baseline || pv.when.empty();
    out->variants.push_back(std::move(pv));
  }
  if (!baseline) {
    return ck.fail(at + "/variants", nullptr,
                   "no baseline variant (one without \"when\"): the family would have nothing to run when no "
                   "condition holds");
  }
  return true;
}

// RINGGUARD_POLICY_SET: "/pointer=json;/pointer=json". Each value within the rules' own limits.
Status applyEdits(const std::string& edits, const std::string& origin, json* doc) {
  std::stringstream ss(edits);
  std::string item;
  while (std::getline(ss, item, ';')) {
    const size_t first = item.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    item = item.substr(first);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || item[0] != '/') {
      return Status(
          StatusCode::kInvalidArgument,
          fmt::format("RINGGUARD_POLICY_SET entry '{}': expected /json/pointer=value", excerpt(item)));
    }
    const std::string ptr = item.substr(0, eq);
    const std::string text = item.substr(eq + 1);
    const std::string where = fmt::format("RINGGUARD_POLICY_SET entry '{}'", excerpt(item));
    json value;
    const Status parsed = parseJsonInput(text, where + ": value", kRulesLimits, &value);
    if (!parsed.isOk()) {
      return Status(StatusCode::kInvalidArgument,
                    parsed.message() + (parsed.message().find("not valid JSON") != std::string::npos &&
                                                text.find('"') == std::string::npos
                                            ? " (strings need quotes)"
                                            : ""));
    }
    try {
      const json::json_pointer p(ptr);
      // Only existing keys, or a new key in an existing object: a typo must not create a dead subtree.
      if (!doc->contains(p.parent_pointer())) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("{}: key '{}' does not exist in rules {}", where,
                                  excerpt(p.parent_pointer().to_string()), origin));
      }
      (*doc)[p] = std::move(value);
    } catch (const json::exception& e) {
      return Status(StatusCode::kInvalidArgument, fmt::format("{}: {}", where, excerpt(e.what(), 200)));
    }
  }
  return Status::ok();
}

}  // namespace

Status parseRules(const std::string& text, const std::string& origin, const std::string& edits,
                  PolicyRules* out) {
  json doc;
  RINGGUARD_RETURN_IF_ERROR(parseJsonInput(text, "rules " + origin, kRulesLimits, &doc));
  RINGGUARD_RETURN_IF_ERROR(applyEdits(edits, origin, &doc));
  Checker ck(origin);
  PolicyRules r;
  r.origin = origin;
  if (!doc.is_object()) {
    ck.fail("", &doc, "expected an object with \"version\" and \"families\"");
    return ck.status();
  }
  if (!ck.onlyKeys(doc, "", {"version", "description", "families"})) return ck.status();
  auto ver = doc.find("version");
  if (ver == doc.end()) {
    ck.fail("/version", nullptr, "missing (1 is the only version)");
    return ck.status();
  }
  if (!ver->is_number_integer() || ver->get<int64_t>() != 1) {
    ck.fail("/version", &*ver, "unsupported version (1 is the only version)");
    return ck.status();
  }
  const json* fams = nullptr;
  if (!ck.object(doc, "", "families", &fams, true)) return ck.status();
  for (auto it = fams->begin(); it != fams->end(); ++it) {  // nlohmann orders keys: families sorted by name
    PolicyFamily f;
    if (!parseFamily(ck, it.key(), *it, "/families/" + it.key(), &f)) return ck.status();
    r.families.push_back(std::move(f));
  }
  const std::string canonical = doc.dump();
  r.digest = crc32(canonical.data(), canonical.size());
  *out = std::move(r);
  return Status::ok();
}

Status loadRulesFile(const std::string& path, const std::string& edits, PolicyRules* out) {
  std::string text;
  RINGGUARD_RETURN_IF_ERROR(readRegularFile(path, "rules file", kRulesLimits.maxBytes, &text));
  return parseRules(text, "'" + excerpt(path, 200) + "'", edits, out);  // paths are bytes
}

Status loadRulesFromEnv(PolicyRules* out) {
  const char* path = envLookup("RINGGUARD_POLICY_RULES");
  const char* edits = envLookup("RINGGUARD_POLICY_SET");
  const std::string e = edits ? edits : "";
  if (path != nullptr && path[0] != '\0') return loadRulesFile(path, e, out);
  return parseRules(defaultRulesJson(), "built-in default", e, out);
}

}  // namespace ringguard
