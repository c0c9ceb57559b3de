// ringguard._C: the Python face of the "ringguard" c10d backend. Built against the installed torch and its
// bundled pybind11, so our class derives from torch._C._distributed_c10d.Backend and torch accepts it as one.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <stdexcept>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "core/env.h"
#include "ringguard/observability/observability.h"
#include "ringguard/torch/process_group.h"
#include "torch/completion.h"
#include "torch/python/checked_args.h"

namespace py = pybind11;

namespace {

// torch binds its backends with a holder that drops the GIL while the last reference goes away (a
// backend's destructor joins threads that may need the GIL); ours is the same, and has the same layout as
// the intrusive_ptr that torch casts backends to.
template <typename T>
class IntrusivePtrNoGilDestructor {
 public:
  IntrusivePtrNoGilDestructor() = default;
  IntrusivePtrNoGilDestructor(const IntrusivePtrNoGilDestructor&) = default;
  IntrusivePtrNoGilDestructor(IntrusivePtrNoGilDestructor&&) noexcept = default;
  IntrusivePtrNoGilDestructor& operator=(const IntrusivePtrNoGilDestructor&) = default;
  IntrusivePtrNoGilDestructor& operator=(IntrusivePtrNoGilDestructor&&) noexcept = default;
  explicit IntrusivePtrNoGilDestructor(c10::intrusive_ptr<T> impl) : impl_(std::move(impl)) {}
  explicit IntrusivePtrNoGilDestructor(T* impl) : impl_(c10::intrusive_ptr<T>::unsafe_steal_from_new(impl)) {}
  ~IntrusivePtrNoGilDestructor() {
    if (impl_) {
      if (PyGILState_Check()) {
        py::gil_scoped_release release;
        impl_.reset();
      } else {
        impl_.reset();
      }
    }
  }
  T& operator*() const noexcept { return *impl_; }
  T* operator->() const noexcept { return impl_.get(); }
  T* get() const noexcept { return impl_.get(); }
  void reset() noexcept { impl_.reset(); }
  operator bool() const noexcept { return impl_; }

 private:
  c10::intrusive_ptr<T> impl_;
};

py::dict countersDict(const ringguard::Counters& c) {
  py::dict d;
  d["collectives"] = c.collectives;
  d["bytes_sent"] = c.bytesSent;
  d["slices_sent"] = c.slicesSent;
  d["slices_verified"] = c.slicesVerified;
  d["injected"] = c.injected;
  d["detected"] = c.detected;
  d["retransmitted"] = c.retransmitted;
  d["escaped"] = c.escaped;
  d["delayed"] = c.delayed;
  d["repair_rounds"] = c.repairRounds;
  d["control_frames"] = c.controlFrames;
  d["control_bytes"] = c.controlBytes;
  d["non_finite_inputs"] = c.nonFiniteInputs;
  d["skipped"] = c.skipped;
  return d;
}

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, IntrusivePtrNoGilDestructor<T>, true)

PYBIND11_MODULE(_C, m) {
  m.doc() = "ringguard: CRC32-verified collectives as a torch.distributed backend";
  m.attr("__torch_version__") = RINGGUARD_TORCH_VERSION;  // torch.__version__ at configure time
  {
    void ringguardRegisterGuardBindings(py::module_&);  // ringguard._C.Guard: guard_bindings.cc
    ringguardRegisterGuardBindings(m);
    void ringguardRegisterGraphGuardBindings(py::module_&);  // ringguard._C.GraphGuard (CUDA builds)
    ringguardRegisterGraphGuardBindings(m);
  }
  void ringguardRegisterPolicyBindings(py::module_&);  // ringguard._C.PolicyEngine: policy_bindings.cc
  ringguardRegisterPolicyBindings(m);
  void ringguardRegisterMemoryBindings(py::module_&);  // ringguard._C.pool_stats: memory_bindings.cc
  ringguardRegisterMemoryBindings(m);
  void ringguardRegisterMpiBindings(py::module_&);  // ringguard._C.mpi_broadcast: mpi_bindings.cc
  ringguardRegisterMpiBindings(m);
  void ringguardRegisterIssueLaneBindings(py::module_&);  // ringguard._C.IssueLane: issue_lane_bindings.cc
  ringguardRegisterIssueLaneBindings(m);
  void ringguardRegisterReplicaBindings(py::module_&);  // ringguard._C.ReplicaCheck: replica_bindings.cc
  ringguardRegisterReplicaBindings(m);

  m.def("option_names", [] {
    std::vector<std::string> names;
    for (const auto& v : ringguard::envRegistry()) names.emplace_back(v.name);
    return names;
  });

  // The run summary and the timeline (docs/GUIDE.md): RINGGUARD_TIMELINE starts recording at import, so
  // guard-only runs (no communicator) have a timeline too. A bad setting is logged here and raised when a
  // process group is made (Options::fromEnv checks every setting).
  (void)ringguard::observability::init();
  m.def("summary_json", &ringguard::observability::summaryJson);
  m.def("timeline_json", &ringguard::observability::timelineJson);
  m.def("file_rank", &ringguard::observability::fileRank);
  m.def(
      "write_observability_files",
      [](const std::string& timeline, const std::string& summary) {
        ringguard::noNul(timeline, "write_files: timeline_prefix");
        ringguard::noNul(summary, "write_files: summary_prefix");
        const ringguard::Status st = ringguard::observability::writeFiles(timeline, summary);
        if (!st.isOk()) throw std::runtime_error("ringguard: " + st.message());
      },
      py::arg("timeline") = "", py::arg("summary") = "");

  // Before the interpreter finalises, the threads that complete Works must be done with Python's tensors
  // (torch/completion.h, ExitWindow): a group that destroy_process_group never drained may still be
  // releasing the last collective's when the script ends. atexit runs while other threads can take the GIL.
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    py::gil_scoped_release release;
    ringguard::ExitWindow::closeForExit(std::chrono::seconds(10));
  }));

  py::object backendBase = py::module_::import("torch._C._distributed_c10d").attr("Backend");
  py::class_<ringguard::ProcessGroupRingguard, IntrusivePtrNoGilDestructor<ringguard::ProcessGroupRingguard>>(
      m, "ProcessGroupRingguard", backendBase)
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, std::map<std::string, std::string> options,
                       const c10::intrusive_ptr<c10d::Backend>& gloo, const std::vector<int>& globalRanks) {
             // The process group's timeout, unless RINGGUARD_TIMEOUT_MS is set (options, then environment).
             if (!options.count("RINGGUARD_TIMEOUT_MS") && !ringguard::envLookup("RINGGUARD_TIMEOUT_MS")) {
               options["RINGGUARD_TIMEOUT_MS"] = std::to_string(timeout.count());
             }
             return IntrusivePtrNoGilDestructor<ringguard::ProcessGroupRingguard>(
                 c10::make_intrusive<ringguard::ProcessGroupRingguard>(store, rank, size, options, gloo,
                                                                       globalRanks));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("options"),
           py::arg("gloo"), py::arg("global_ranks") = std::vector<int>(),
           py::call_guard<py::gil_scoped_release>())
      .def(
          "counters",
          [](const ringguard::ProcessGroupRingguard& self) { return countersDict(self.counters()); },
          "Integrity counters of this rank, summed over the group's communicators.")
      .def(
          "set_fault",
          [](ringguard::ProcessGroupRingguard& self, const std::map<std::string, std::string>& fault) {
            // A name the registry does not know would be ignored: nothing injected and nothing said.
            for (const auto& kv : fault) {
              ringguard::noNul(kv.first, "set_fault: a setting's name");
              ringguard::noNul(kv.second, "set_fault: " + kv.first);
              if (!ringguard::findEnvVar(kv.first)) {
                throw std::invalid_argument("ringguard: set_fault: unknown setting '" + kv.first +
                                            "' (did you mean " + ringguard::closestEnvName(kv.first) + "?)");
              }
            }
            self.setFault(fault);
          },
          py::arg("options"), "Fault injection (RINGGUARD_FAULT_* names) for collectives issued from now on.")
      .def("fault", &ringguard::ProcessGroupRingguard::fault)
      .def(
          "transport",
          [](const ringguard::ProcessGroupRingguard& self, const std::string& deviceType) {
            return self.transport(ringguard::noNul(deviceType, "transport: device"));
          },
          py::arg("device_type"))
      .def("staged_all_gathers", &ringguard::ProcessGroupRingguard::stagedAllgathers,
           "All-gathers of CUDA tensors run as the all_gather family's staged_chunked variant.")
      .def("staged_all_reduces", &ringguard::ProcessGroupRingguard::stagedAllreduces,
           "Allreduces of CUDA tensors run as the all_reduce family's staged_chunked variant.");
}
