// ringguard._C.Guard: the C++ guard (src/guard) driven from Python. The state machine stays in C++, so C++
// and Python callers share one implementation; Python supplies the op bodies as callables and the tensors as
// declarations (python/ringguard/guard.py is the thin layer on top).
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/excerpt.h"
#include "ringguard/guard/guard.h"
#include "torch/guard/tensor_buffer.h"
#include "torch/python/checked_args.h"
#if RINGGUARD_GUARD_CUDA
#include "ringguard/guard/device_backend.h"  // makeDeviceGuardBackend
#endif

namespace py = pybind11;

namespace ringguard {
namespace {

// Status -> Python exception: bad declarations are ValueError, a raised non-finite result is GuardError.
[[noreturn]] void raise(const Status& st) {
  if (st.code() == StatusCode::kInvalidArgument) throw py::value_error(st.message());
  if (st.code() == StatusCode::kCorruption) {
    // The Python package owns the type, so `except ringguard.GuardError` matches it.
    const py::object type = py::module_::import("ringguard.guard").attr("GuardError");
    PyErr_SetString(type.ptr(), st.message().c_str());
    throw py::error_already_set();
  }
  throw std::runtime_error(st.toString());
}

template <typename T>
T parsed(const py::dict& d, const char* key, T fallback, bool (*parse)(const std::string&, T*)) {
  if (!d.contains(key)) return fallback;
  const py::object o = d[key];
  if (!py::isinstance<py::str>(o)) {
    throw py::type_error(std::string("guard: ") + key + " must be a str, got " +
                         excerpt(std::string(py::repr(o))));
  }
  const std::string s = noNul(py::cast<std::string>(o), std::string("guard: ") + key);
  T v;
  if (!parse(s, &v)) throw py::value_error(std::string("guard: unknown ") + key + " '" + excerpt(s) + "'");
  return v;
}

GuardPolicy policyFrom(const py::dict& d) {
  GuardPolicy p;
  p.mode = parsed(d, "mode", p.mode, parseVerdictMode);
  p.onDetect = parsed(d, "policy", p.onDetect, parseGuardAction);
  p.escalation = parsed(d, "escalation", p.escalation, parseGuardAction);
  p.afterFallback = parsed(d, "after_fallback", p.afterFallback, parseGuardAction);
  if (d.contains("replays"))
    p.replays = integerIn<int>(d["replays"], "guard: replays", 0, GuardPolicy::kMaxReplays);
  if (d.contains("snapshot_budget_bytes")) {
    p.snapshotBudgetBytes =
        integerIn<uint64_t>(d["snapshot_budget_bytes"], "guard: snapshot_budget_bytes", 0, UINT64_MAX);
  }
  if (d.contains("scan_state")) p.scanState = py::cast<bool>(d["scan_state"]);
  if (d.contains("scan_inputs")) p.scanInputs = py::cast<bool>(d["scan_inputs"]);
  if (d.contains("check_inputs")) p.checkInputs = py::cast<bool>(d["check_inputs"]);
  const Status st = p.validate();
  if (!st.isOk()) raise(st);
  return p;
}

py::dict countersDict(const GuardCounters& c) {
  py::dict d;
  d["calls"] = c.calls;
  d["steps"] = c.steps;
  d["detections"] = c.detections;
  d["rollbacks"] = c.rollbacks;
  d["replays"] = c.replays;
  d["fallbacks"] = c.fallbacks;
  d["escalations"] = c.escalations;
  d["sanitized"] = c.sanitized;
  d["skipped_steps"] = c.skippedSteps;
  d["raised"] = c.raised;
  d["injected"] = c.injected;
  d["bytes_snapshotted"] = c.bytesSnapshotted;
  d["host_waits"] = c.hostWaits;
  return d;
}

void appendTensors(const py::handle& obj, const std::string& prefix, std::vector<GuardBuffer>* out,
                   std::vector<at::Tensor>* keep) {
  auto add = [&](const at::Tensor& t, const std::string& name) {
    GuardBuffer b;
    const Status st = tensorBuffer(t, name, &b);
    if (!st.isOk()) raise(st);
    out->push_back(b);
    keep->push_back(t);
  };
  if (obj.is_none()) return;
  if (THPVariable_Check(obj.ptr())) {
    add(THPVariable_Unpack(obj.ptr()), prefix);
    return;
  }
  // A flat tuple or list of tensors (and Nones), the common case, here; anything else (nested, dicts,
  // namedtuples, pytree types) through guard.py's _flatten, which names each tensor by its path and
  // raises for an object hiding tensors, so no returned tensor goes unscanned.
  const bool sequence = py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj);
  bool flat = sequence && !hasattr(obj, "_fields");  // a namedtuple names its fields
  if (flat) {
    for (const py::handle& item : obj) flat = flat && (item.is_none() || THPVariable_Check(item.ptr()));
  }
  if (flat) {
    size_t i = 0;
    for (const py::handle& item : obj) {
      if (!item.is_none()) add(THPVariable_Unpack(item.ptr()), prefix + "[" + std::to_string(i) + "]");
      ++i;
    }
    return;
  }
  const py::object flatten = py::module_::import("ringguard.guard").attr("_flatten");
  for (const py::handle& pair : flatten(obj, prefix)) {
    const py::tuple named = py::reinterpret_borrow<py::tuple>(pair);
    add(py::cast<at::Tensor>(named[1]), noNul(py::cast<std::string>(named[0]), "guard: an output's name"));
  }
}

// Tensors with their names, as Python passes them: a list of (name, tensor) pairs.
std::vector<GuardBuffer> declared(const std::vector<std::pair<std::string, at::Tensor>>& list,
                                  std::vector<at::Tensor>* keep) {
  for (const auto& p : list) noNul(p.first, "guard: a tensor's name");
  std::vector<GuardBuffer> out;
  const Status st = tensorBuffers(list, &out);
  if (!st.isOk()) raise(st);
  for (const auto& p : list) keep->push_back(p.second);
  return out;
}

// A returned tensor whose bytes lie within a declared state (an in-place op returns its state: w.add_
// returns w; or a view of part of it) is covered by that state, as an argument within a state is
// (guard.py's _covered): scanned as state, restored with it. Any other returned tensor is an output and
// scanned, whatever it overlaps: a result is not a declaration (docs/GUARD.md, "Aliased arguments").
bool withinState(const GuardedOp& op, const GuardBuffer& b) {
  const auto* p = static_cast<const unsigned char*>(b.data);
  for (const GuardBuffer& s : op.state) {
    const auto* q = static_cast<const unsigned char*>(s.data);
    if (s.kind == b.kind && q <= p && p + b.bytes <= q + s.bytes) return true;
  }
  return false;
}

const char* resolutionName(GuardResolution r) { return guardResolutionName(r); }

class PyGuard {
 public:
  PyGuard(const py::dict& policy, int cudaDevice) {
    std::unique_ptr<GuardBackend> device;
#if RINGGUARD_GUARD_CUDA
    if (cudaDevice >= 0) {
      DeviceGuardBackendOptions o;
      o.device = cudaDevice;
      const Status st = makeDeviceGuardBackend(o, &device);
      if (!st.isOk()) raise(st);
    }
#else
    if (cudaDevice >= 0)
      throw std::runtime_error("ringguard was built without CUDA: the guard has no device backend");
#endif
    guard_ = std::make_unique<Guard>(policyFrom(policy), makeHostGuardBackend(), std::move(device));
  }

  // Runs `body` (and on the policy's say `fallback`) as one guarded call. Returns (result of the last run,
  // report). Outputs are the declared ones plus every tensor the body returns.
  py::tuple run(const std::string& name, const std::vector<std::pair<std::string, at::Tensor>>& inputs,
                const std::vector<std::pair<std::string, at::Tensor>>& state,
                const std::vector<std::pair<std::string, at::Tensor>>& outputs, const py::function& body,
                const py::object& fallback, uintptr_t stream) {
    noNul(name, "guard: the op's name");
    std::vector<at::Tensor> keep;
    GuardedOp op;
    op.name = name;
    op.inputs = declared(inputs, &keep);
    op.state = declared(state, &keep);
    const std::vector<GuardBuffer> fixedOutputs = declared(outputs, &keep);
    op.outputs = fixedOutputs;
    op.stream = reinterpret_cast<void*>(stream);
    py::object result = py::none();
    std::exception_ptr pending;
    std::vector<at::Tensor> produced;
    auto wrap = [&](py::object fn) {
      return [&, fn]() -> Status {
        try {
          py::object r = fn();
          produced.clear();
          op.outputs = fixedOutputs;
          appendTensors(r, "out", &op.outputs, &produced);
          op.outputs.erase(
              std::remove_if(op.outputs.begin() + static_cast<std::ptrdiff_t>(fixedOutputs.size()),
                             op.outputs.end(), [&](const GuardBuffer& b) { return withinState(op, b); }),
              op.outputs.end());
          result = r;
          return Status::ok();
        } catch (...) {
          // The exception goes back to Python as it was, after the guard has restored the state.
          pending = std::current_exception();
          return Status(StatusCode::kInternal, "guard: the op raised");
        }
      };
    };
    op.body = wrap(body);
    if (!fallback.is_none()) op.fallback = wrap(fallback);
    CallReport report;
    const Status st = guard_->run(op, &report);
    if (pending) std::rethrow_exception(pending);
    if (!st.isOk()) raise(st);
    py::dict rep;
    rep["call"] = report.call;
    rep["attempts"] = report.attempts;
    rep["resolution"] = resolutionName(report.resolution);
    return py::make_tuple(result, rep);
  }

  py::dict runStep(const py::function& region) {
    StepSlot slot(this, "Guard.step");
    std::exception_ptr pending;
    StepReport report;
    const Status st = guard_->runStep(
        [&]() -> Status {
          try {
            region();
            return Status::ok();
          } catch (...) {
            pending = std::current_exception();
            return Status(StatusCode::kInternal, "guard: the step raised");
          }
        },
        &report);
    if (pending) std::rethrow_exception(pending);
    if (!st.isOk()) raise(st);
    py::dict rep;
    rep["attempts"] = report.attempts;
    rep["resolution"] = resolutionName(report.resolution);
    rep["severity"] = report.severity;
    return rep;
  }

  // runStepToFlag: the verdict lands in `flag` (one f32 element on the step's device), no host wait.
  void runStepToFlag(const py::function& region, const at::Tensor& flag, uintptr_t stream) {
    StepSlot slot(this, "Guard.step_flag");
    GuardBuffer f;
    const Status conv = tensorBuffer(flag, "flag", &f);
    if (!conv.isOk()) raise(conv);
    std::exception_ptr pending;
    const Status st = guard_->runStepToFlag(
        [&]() -> Status {
          try {
            region();
            return Status::ok();
          } catch (...) {
            pending = std::current_exception();
            return Status(StatusCode::kInternal, "guard: the step raised");
          }
        },
        f, reinterpret_cast<void*>(stream));
    if (pending) std::rethrow_exception(pending);
    if (!st.isOk()) raise(st);
  }

  void setAgreement(const py::object& fn) {
    if (fn.is_none()) {
      guard_->setAgreement(nullptr);
      return;
    }
    guard_->setAgreement([fn](uint64_t* severity) -> Status {
      try {
        *severity =
            integerIn<uint64_t>(fn(*severity), "guard: the agreement callback's result", 0, UINT64_MAX);
        return Status::ok();
      } catch (const std::exception& e) {
        return Status(StatusCode::kInternal,
                      std::string("guard: the agreement callback failed: ") + e.what());
      }
    });
  }

  void addFault(const std::string& op, int64_t call, int attempts, int output, uint64_t element,
                const std::string& value, double probability) {
    noNul(op, "Guard.inject: op");
    noNul(value, "Guard.inject: value");
    GuardFaultRule r;
    r.op = op;
    r.call = call;
    r.attempts = attempts;
    r.output = output;
    r.element = element;
    if (!parseFaultValue(value, &r.value))
      throw py::value_error("guard: unknown fault value '" + excerpt(value) + "'");
    r.probability = probability;
    const Status st = guard_->faults().addRule(r);
    if (!st.isOk()) raise(st);
  }

  Guard& guard() { return *guard_; }

 private:
  // One step at a time per guard: a step gathers every guarded call made until it ends (the calls that
  // autograd's device threads make during the step's backward included), restores them all and replays the
  // step as a whole, so a second step could only be nested in it or interleaved with it. The bindings run
  // under the GIL, which the step's Python code gives up between bytecodes: the slot is taken and checked
  // with the GIL held, and the error says which of the two it was in the Python API's words.
  class StepSlot {
   public:
    StepSlot(PyGuard* g, const char* what) : g_(g) {
      const std::thread::id me = std::this_thread::get_id();
      if (g->inStep_ && g->stepThread_ != me) {
        throw std::runtime_error(
            std::string("ringguard.guard: ") + what +
            " while another thread runs a step of the same guard: a guard runs one step at a time (each "
            "step gathers, restores and replays every guarded call made until it ends); give each thread "
            "its own ringguard.guard(...), or run the steps one after another");
      }
      if (g->inStep_) {
        throw py::value_error(std::string("ringguard.guard: ") + what +
                              " inside a step of the same guard: steps do not nest (call the inner function "
                              "directly: its guarded calls are part of the outer step)");
      }
      g->inStep_ = true;
      g->stepThread_ = me;
    }
    ~StepSlot() { g_->inStep_ = false; }
    StepSlot(const StepSlot&) = delete;
    StepSlot& operator=(const StepSlot&) = delete;

   private:
    PyGuard* g_;
  };

  std::unique_ptr<Guard> guard_;
  bool inStep_ = false;         // read and written with the GIL held
  std::thread::id stepThread_;  // the thread whose step it is, while inStep_
};

}  // namespace
}  // namespace ringguard

// Called from module.cc's PYBIND11_MODULE.
void ringguardRegisterGuardBindings(py::module_& m) {
  using ringguard::PyGuard;
  py::class_<PyGuard>(m, "Guard")
      .def(py::init<const py::dict&, int>(), py::arg("policy"), py::arg("cuda_device") = -1)
      .def("run", &PyGuard::run, py::arg("name"), py::arg("inputs"), py::arg("state"), py::arg("outputs"),
           py::arg("body"), py::arg("fallback") = py::none(), py::arg("stream") = 0)
      .def("run_step", &PyGuard::runStep, py::arg("region"))
      .def("run_step_to_flag", &PyGuard::runStepToFlag, py::arg("region"), py::arg("flag"),
           py::arg("stream") = 0)
      .def("set_agreement", &PyGuard::setAgreement, py::arg("fn"))
      .def("add_fault", &PyGuard::addFault, py::arg("op") = "", py::arg("call") = -1, py::arg("attempts") = 1,
           py::arg("output") = 0, py::arg("element") = 0, py::arg("value") = "nan",
           py::arg("probability") = 1.0)
      .def("set_fault_seed", [](PyGuard& g, uint64_t seed) { g.guard().faults().setSeed(seed); })
      .def("clear_faults", [](PyGuard& g) { g.guard().faults().clear(); })
      .def("counters", [](PyGuard& g) { return ringguard::countersDict(g.guard().counters()); })
      .def("held_snapshot_bytes", [](PyGuard& g) { return g.guard().heldSnapshotBytes(); });
}
