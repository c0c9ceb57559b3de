// ringguard._C.GraphGuard: the guard's CUDA graph path (include/ringguard/guard/graph_guard.h) for Python.
// python/ringguard/guard.py's graph() makes the capture torch-aware (the capture stream as torch's current
// stream, the caching allocator's allocations into a private graph pool); this file only binds the class.
// Registered when the build has CUDA; without it, ringguard._C has no GraphGuard.
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <vector>

#if RINGGUARD_GUARD_CUDA
#include "ringguard/guard/graph_guard.h"
#include "torch/guard/tensor_buffer.h"
#include "torch/python/checked_args.h"
#endif

namespace py = pybind11;

#if RINGGUARD_GUARD_CUDA
namespace ringguard {
namespace {

[[noreturn]] void raiseGraph(const Status& st) {
  if (st.code() == StatusCode::kInvalidArgument) throw py::value_error(st.message());
  throw std::runtime_error(st.toString());
}

std::vector<GuardBuffer> buffersOf(const std::vector<std::pair<std::string, at::Tensor>>& list) {
  std::vector<GuardBuffer> out;
  const Status st = tensorBuffers(list, &out);
  if (!st.isOk()) raiseGraph(st);
  return out;
}

// The tensors stay referenced for the graph's life: its nodes hold their addresses.
class PyGraphGuard {
 public:
  PyGraphGuard(int device, const std::string& name,
               const std::vector<std::pair<std::string, at::Tensor>>& state,
               const std::vector<std::pair<std::string, at::Tensor>>& outputs, const py::function& body,
               int maxReplays, const std::vector<py::dict>& faults) {
    noNul(name, "graph_guard: name");
    for (const auto& p : state) noNul(p.first, "graph_guard: a tensor's name");
    for (const auto& p : outputs) noNul(p.first, "graph_guard: a tensor's name");
    for (const auto& p : state) keep_.push_back(p.second);
    for (const auto& p : outputs) keep_.push_back(p.second);
    GraphGuardedOp op;
    op.name = name;
    op.state = buffersOf(state);
    op.outputs = buffersOf(outputs);
    // Called once per capture, on this thread, with the GIL held (create() runs inside this constructor).
    op.body = [body](void* stream) -> Status {
      try {
        body(reinterpret_cast<uintptr_t>(stream));
      } catch (const py::error_already_set& e) {
        return Status(StatusCode::kInvalidArgument, e.what());
      }
      return Status::ok();
    };
    GraphGuardOptions options;
    options.maxReplays = maxReplays;
    for (const py::dict& d : faults) {
      GraphFault f;
      if (d.contains("output"))
        f.output = integerIn<size_t>(d["output"], "graph_guard: a fault's output", 0, SIZE_MAX);
      if (d.contains("element"))
        f.element = integerIn<size_t>(d["element"], "graph_guard: a fault's element", 0, SIZE_MAX);
      if (d.contains("attempts"))
        f.attempts = integerIn<uint32_t>(d["attempts"], "graph_guard: a fault's attempts", 0, UINT32_MAX);
      if (d.contains("value")) {
        const std::string v = noNul(py::cast<std::string>(d["value"]), "graph_guard: a fault's value");
        if (!parseFaultValue(v, &f.value))
          throw py::value_error("graph guard: unknown fault value '" + excerpt(v) + "'");
      }
      options.faults.push_back(f);
    }
    const Status st = GraphGuard::create(device, op, options, &graph_);
    if (!st.isOk()) raiseGraph(st);
  }

  void launch(uintptr_t stream) {
    const Status st = graph_->launch(reinterpret_cast<void*>(stream));
    if (!st.isOk()) raiseGraph(st);
  }

  py::dict report() {
    GraphGuardReport r;
    Status st;
    {
      py::gil_scoped_release release;  // waits for the device
      st = graph_->report(&r);
    }
    if (!st.isOk()) raiseGraph(st);
    py::dict d;
    d["replays"] = r.replays;
    d["clean"] = r.clean;
    d["first_bad_output"] = r.firstBadOutput;
    d["bad_elements"] = r.badElements;
    d["launches"] = r.launches;
    d["total_replays"] = r.totalReplays;
    return d;
  }

  void restore(uintptr_t stream) {
    const Status st = graph_->restore(reinterpret_cast<void*>(stream));
    if (!st.isOk()) raiseGraph(st);
  }

 private:
  std::vector<at::Tensor> keep_;
  std::unique_ptr<GraphGuard> graph_;
};

}  // namespace
}  // namespace ringguard
#endif

// Called from module.cc's PYBIND11_MODULE.
void ringguardRegisterGraphGuardBindings(py::module_& m) {
#if RINGGUARD_GUARD_CUDA
  using ringguard::PyGraphGuard;
  py::class_<PyGraphGuard>(m, "GraphGuard")
      .def(py::init<int, const std::string&, const std::vector<std::pair<std::string, at::Tensor>>&,
                    const std::vector<std::pair<std::string, at::Tensor>>&, const py::function&, int,
                    const std::vector<py::dict>&>(),
           py::arg("device"), py::arg("name"), py::arg("state"), py::arg("outputs"), py::arg("body"),
           py::arg("max_replays") = 2, py::arg("faults") = std::vector<py::dict>{})
      .def("launch", &PyGraphGuard::launch, py::arg("stream"))
      .def("report", &PyGraphGuard::report)
      .def("restore", &PyGraphGuard::restore, py::arg("stream"));
#else
  (void)m;
#endif
}
