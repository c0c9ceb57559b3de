// ringguard._C.PolicyEngine: the C++ downgrade engine (src/policy) with its telemetry sources (src/telemetry)
// for Python. Rules, hysteresis, dwell, agreement checks and the decision log stay in C++; Python feeds
// torch's allocator statistics and extra signals, registers variants with "enabled" predicates, and calls
// step() at step boundaries (python/ringguard/policy.py is the thin layer on top).
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/excerpt.h"
#include "ringguard/policy/engine.h"
#include "ringguard/policy/process_engine.h"
#include "ringguard/policy/registry.h"
#include "ringguard/policy/rules.h"
#include "ringguard/telemetry/memory.h"
#include "ringguard/telemetry/pcie.h"
#include "ringguard/telemetry/sampler.h"
#include "torch/python/checked_args.h"

namespace py = pybind11;

namespace ringguard {
namespace {

[[noreturn]] void raise(const Status& st) {
  if (st.code() == StatusCode::kInvalidArgument) throw py::value_error(st.message());
  throw std::runtime_error(st.toString());
}

// Numbers from Python, or a ValueError naming `what` and the value (a str, a NaN, a negative count): bad
// telemetry must not reach the rules, nor fail later as a bare cast error.
double finiteNumber(const py::handle& v, const std::string& what, const char* hint = "") {
  double d = 0;
  bool ok = !py::isinstance<py::str>(v);
  if (ok) {
    try {
      d = py::cast<double>(v);
    } catch (const py::cast_error&) {
      ok = false;
    }
  }
  if (!ok || !std::isfinite(d)) {
    throw py::value_error("ringguard.policy: " + what + " must be a finite number" + hint + ", got " +
                          excerpt(std::string(py::repr(v))));
  }
  return d;
}

uint64_t count(const py::handle& v, const std::string& what) {
  try {
    if (py::isinstance<py::int_>(v)) return py::cast<uint64_t>(v);
  } catch (const py::cast_error&) {
  }
  throw py::value_error("ringguard.policy: " + what + " must be a non-negative integer, got " +
                        excerpt(std::string(py::repr(v))));
}

py::object signalValue(const Signal& s) { return s.missing ? py::none() : py::object(py::float_(s.value)); }

py::dict decisionDict(const PolicyDecision& d) {
  py::dict out;
  out["index"] = d.index;
  out["step"] = d.step;
  out["time_ns"] = d.timeNs;
  out["family"] = d.family;
  out["from"] = d.from;
  out["to"] = d.to;
  out["reason"] = d.reason;
  out["agreed"] = d.agreed;
  py::dict signals;
  for (const Signal& s : d.signals) signals[py::str(s.name)] = signalValue(s);
  out["signals"] = signals;
  out["text"] = d.toString();
  return out;
}

class PyPolicyEngine {
 public:
  // rules_json given: parsed as is (origin "python"); else rules_path; else the environment
  // (RINGGUARD_POLICY_RULES, default rules). edits: RINGGUARD_POLICY_SET syntax (else the environment's).
  // nvml_device >= 0 starts a sampler thread with the NVML PCIe source for that NVML index.
  PyPolicyEngine(const py::object& rulesPath, const py::object& rulesJson, const py::object& edits,
                 int nvmlDevice) {
    PolicyRules rules;
    const char* envEdits = envLookup("RINGGUARD_POLICY_SET");
    const std::string e = edits.is_none() ? (envEdits ? envEdits : "")
                                          : noNul(py::cast<std::string>(edits), "policy.load: edits");
    Status st;
    if (!rulesJson.is_none()) {
      st = parseRules(py::cast<std::string>(rulesJson), "python", e, &rules);  // refuses NULs itself
    } else if (!rulesPath.is_none()) {
      st = loadRulesFile(noNul(py::cast<std::string>(rulesPath), "policy.load: rules_path"), e, &rules);
    } else if (edits.is_none()) {
      st = loadRulesFromEnv(&rules);
    } else {
      const char* path = envLookup("RINGGUARD_POLICY_RULES");
      st = path && path[0] ? loadRulesFile(path, e, &rules)
                           : parseRules(defaultRulesJson(), "built-in default", e, &rules);
    }
    if (!st.isOk()) raise(st);
    engine_ = std::make_shared<PolicyEngine>(std::move(rules), &registry_);
    if (nvmlDevice >= 0) {
      // PCIe counters are sampled on the sampler's thread at RINGGUARD_TELEMETRY_INTERVAL_MS, not at step
      // boundaries: a 32-bit counter read once per (long) step would alias, and its rate be reported missing.
      std::chrono::nanoseconds interval{};
      Status ist = telemetryIntervalFromEnv(&interval);
      if (!ist.isOk()) raise(ist);
      sampler_ = std::make_unique<Sampler>(interval);
      sampler_->add(NvmlPcieSource::create(static_cast<unsigned>(nvmlDevice)));
      sampler_->start();
    }
  }

  void registerVariant(const std::string& family, const std::string& name, const py::object& enabled) {
    noNul(family, "policy.register_variant: family");
    noNul(name, "policy.register_variant: name");
    VariantRegistry::Enabled fn;
    if (!enabled.is_none()) {
      fn = [enabled]() {
        py::gil_scoped_acquire gil;
        return py::cast<bool>(enabled());
      };
    }
    Status st = registry_.add(family, name, std::move(fn));
    if (!st.isOk()) raise(st);
  }

  void feedTorchStats(const py::dict& stats, bool asyncBackend) {
    auto get = [&](const char* key) -> uint64_t {
      return stats.contains(key) ? count(stats[key], std::string("torch stat '") + key + "'") : uint64_t{0};
    };
    TorchAllocatorStats t;
    t.reservedBytes = get("reserved_bytes.all.current");
    t.allocatedBytes = get("allocated_bytes.all.current");
    t.inactiveSplitBytes = get("inactive_split_bytes.all.current");
    t.numAllocRetries = get("num_alloc_retries");
    t.numOoms = get("num_ooms");
    t.asyncBackend = asyncBackend;
    torch_.feed(t);
  }

  void feedPoolStats(const std::string& pool, uint64_t reserved, uint64_t used, uint64_t highWater,
                     const py::object& failures) {
    noNul(pool, "policy: pool");
    PoolSource* src = pool == "device" ? &devicePool_ : pool == "pinned" ? &pinnedPool_ : nullptr;
    if (src == nullptr)
      throw py::value_error("policy: pool must be 'device' or 'pinned', not '" + pool + "'");
    PoolStatsSample s;
    s.reservedBytes = reserved;
    s.usedBytes = used;
    s.highWaterBytes = highWater;
    if (!failures.is_none()) s.allocationFailures = count(failures, "the pool's failures");
    src->feed(s);
  }

  // The sample the engine would see now: the fed sources (and NVML when enabled), plus `extra` signals
  // (name -> float, or None for missing) which replace same-named ones. The PCIe signals are the sampler
  // thread's latest (missing until its first two samples).
  Sample sample(const py::object& extra, const py::object& tMs) {
    Sample s;
    s.timeNs = tMs.is_none() ? std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count()
                             : static_cast<int64_t>(finiteNumber(tMs, "t_ms") * 1e6);
    torch_.sample(s.timeNs, &s.signals);
    devicePool_.sample(s.timeNs, &s.signals);
    pinnedPool_.sample(s.timeNs, &s.signals);
    if (sampler_) {
      Sample latest = sampler_->latest();
      for (Signal& sig : latest.signals) s.set(std::move(sig));
    }
    if (!extra.is_none()) {
      for (auto kv : py::cast<py::dict>(extra)) {
        const std::string name = noNul(py::cast<std::string>(kv.first), "policy: a signal's name");
        if (kv.second.is_none()) {
          s.set(Signal::absent(name, "", "python", "None from Python"));
        } else {
          s.set(Signal::present(
              name, finiteNumber(kv.second, "signal '" + excerpt(name) + "'", " (None marks it missing)"), "",
              "python"));
        }
      }
    }
    return s;
  }

  void step(const py::object& extra, const py::object& tMs) {
    const Sample s = sample(extra, tMs);
    Status st;
    {
      // The agreement callback re-takes the GIL itself; the predicates too.
      py::gil_scoped_release release;
      st = engine_->onStep(s);
    }
    if (!st.isOk()) raise(st);
  }

  py::dict signals(const py::object& extra, const py::object& tMs) {
    py::dict out;
    for (const Signal& s : sample(extra, tMs).signals) out[py::str(s.name)] = signalValue(s);
    return out;
  }

  void setAgreement(const py::object& fn) {
    if (fn.is_none()) {
      engine_->setAgreement(nullptr);
      return;
    }
    engine_->setAgreement([fn](std::vector<double>* values) -> Status {
      py::gil_scoped_acquire gil;
      try {
        std::vector<double> out = py::cast<std::vector<double>>(fn(*values));
        if (out.size() != values->size()) {
          return Status(StatusCode::kInternal, "policy: the agreement callback returned " +
                                                   std::to_string(out.size()) + " values for " +
                                                   std::to_string(values->size()));
        }
        *values = std::move(out);
        return Status::ok();
      } catch (const std::exception& e) {
        return Status(StatusCode::kInternal,
                      std::string("policy: the agreement callback failed: ") + e.what());
      }
    });
  }

  py::list decisions() const {
    py::list out;
    for (const PolicyDecision& d : engine_->decisions()) out.append(decisionDict(d));
    return out;
  }

  py::dict counters() const {
    const PolicyCounters c = engine_->counters();
    py::dict out;
    out["steps"] = c.steps;
    out["decisions"] = c.decisions;
    out["dwell_holds"] = c.dwellHolds;
    out["missing_reads"] = c.missingReads;
    out["agreements"] = c.agreements;
    out["switches"] = c.switches;
    return out;
  }

  py::dict families() const {
    py::dict out;
    for (const PolicyFamily& f : engine_->rules().families) {
      py::list variants;
      for (const PolicyVariant& v : f.variants) variants.append(v.name);
      py::dict d;
      d["scope"] = policyScopeName(f.scope);
      d["variants"] = variants;
      out[py::str(f.name)] = d;
    }
    return out;
  }

  PolicyEngine& engine() { return *engine_; }
  VariantRegistry& registry() { return registry_; }
  // Makes this engine the process's: the c10d backend reads its all_gather variant when it issues one.
  void makeProcessEngine() { setProcessPolicyEngine(engine_); }

 private:
  VariantRegistry registry_;              // before engine_: the engine holds a pointer to it
  std::shared_ptr<PolicyEngine> engine_;  // shared with the process slot (held weakly there)
  TorchAllocatorSource torch_;
  PoolSource devicePool_{"device"};
  PoolSource pinnedPool_{"pinned"};
  std::unique_ptr<Sampler> sampler_;  // the NVML source's thread, when asked for
};

}  // namespace
}  // namespace ringguard

// Called from module.cc's PYBIND11_MODULE.
void ringguardRegisterPolicyBindings(py::module_& m) {
  using ringguard::PyPolicyEngine;
  py::class_<PyPolicyEngine>(m, "PolicyEngine")
      .def(py::init<const py::object&, const py::object&, const py::object&, int>(),
           py::arg("rules_path") = py::none(), py::arg("rules_json") = py::none(),
           py::arg("edits") = py::none(), py::arg("nvml_device") = -1)
      .def("register_variant", &PyPolicyEngine::registerVariant, py::arg("family"), py::arg("name"),
           py::arg("enabled") = py::none())
      .def("feed_torch_stats", &PyPolicyEngine::feedTorchStats, py::arg("stats"),
           py::arg("async_backend") = false)
      .def("feed_pool_stats", &PyPolicyEngine::feedPoolStats, py::arg("pool"), py::arg("reserved"),
           py::arg("used"), py::arg("high_water") = 0, py::arg("failures") = py::none())
      .def("step", &PyPolicyEngine::step, py::arg("signals") = py::none(), py::arg("t_ms") = py::none())
      .def("signals", &PyPolicyEngine::signals, py::arg("extra") = py::none(), py::arg("t_ms") = py::none())
      .def("current",
           [](PyPolicyEngine& p, const std::string& family) {
             ringguard::noNul(family, "policy.current: family");
             const auto& fams = p.engine().rules().families;
             if (std::none_of(fams.begin(), fams.end(),
                              [&](const ringguard::PolicyFamily& f) { return f.name == family; })) {
               std::string known;
               for (const ringguard::PolicyFamily& f : fams) known += (known.empty() ? "" : ", ") + f.name;
               throw py::value_error("ringguard.policy: the rules have no family '" +
                                     ringguard::excerpt(family) + "' (they have: " + known + ")");
             }
             return p.engine().current(family);
           })
      .def("first_enabled",
           [](PyPolicyEngine& p, const std::string& family) {
             return p.registry().firstEnabled(ringguard::noNul(family, "policy: family"));
           })
      .def("force",
           [](PyPolicyEngine& p, const std::string& family, const std::string& variant) {
             ringguard::noNul(family, "policy.force: family");
             ringguard::noNul(variant, "policy.force: variant");
             ringguard::Status st = p.engine().force(family, variant);
             if (!st.isOk()) throw py::value_error(st.message());
           })
      .def("configure_from_env",
           [](PyPolicyEngine& p) {
             ringguard::Status st = p.engine().configureFromEnv();
             if (!st.isOk()) throw py::value_error(st.message());
           })
      .def("set_rules_enabled", [](PyPolicyEngine& p, bool on) { p.engine().setRulesEnabled(on); })
      .def("set_agreement", &PyPolicyEngine::setAgreement, py::arg("fn"))
      .def("make_process_engine", &PyPolicyEngine::makeProcessEngine)
      .def("decisions", &PyPolicyEngine::decisions)
      .def("counters", &PyPolicyEngine::counters)
      .def("families", &PyPolicyEngine::families)
      .def("rules_digest", [](PyPolicyEngine& p) { return p.engine().rules().digest; })
      .def("rules_origin", [](PyPolicyEngine& p) { return p.engine().rules().origin; });
  m.def(
      "alloc_conf_selects_async",
      [](const std::string& conf) {
        return ringguard::allocConfSelectsAsync(ringguard::noNul(conf, "PYTORCH_ALLOC_CONF"));
      },
      py::arg("conf"));
  m.def("default_rules_json", [] { return ringguard::defaultRulesJson(); });
}
