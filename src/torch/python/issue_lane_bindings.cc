// ringguard._C.IssueLane: the issue lane (ringguard/core/issue_lane.h) as a Python context manager, for
// python/ringguard/issue_lane.py. The lane is the calling OS thread's: __enter__ and __exit__ must run on
// one thread, which a `with` block does.
#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "ringguard/core/issue_lane.h"
#include "torch/python/checked_args.h"

namespace py = pybind11;

namespace {

class PyIssueLane {
 public:
  explicit PyIssueLane(std::string name) : name_(std::move(name)) {
    ringguard::noNul(name_, "issue_lane: name");
    check();
  }
  void enter() {
    if (lane_) throw std::runtime_error("ringguard.issue_lane('" + name_ + "') is already entered");
    check();  // again: a colliding name may have been entered since (IssueLane would end the process)
    lane_ = std::make_unique<ringguard::IssueLane>(name_);
    thread_ = std::this_thread::get_id();
  }
  void exit() {
    if (!lane_) return;
    // Left on another thread it would restore that thread's lane with this one's enclosing lane.
    if (thread_ != std::this_thread::get_id()) {
      throw std::runtime_error("ringguard.issue_lane('" + name_ +
                               "') left on another thread than it was entered on");
    }
    lane_.reset();
  }
  const std::string& name() const { return name_; }
  uint32_t id() const { return ringguard::issueLaneId(name_); }

 private:
  void check() const {
    const ringguard::Status valid = ringguard::checkIssueLaneName(name_);
    if (!valid.isOk()) throw std::invalid_argument("ringguard.issue_lane: " + valid.message());
  }

  std::string name_;
  std::unique_ptr<ringguard::IssueLane> lane_;
  std::thread::id thread_;
};

}  // namespace

void ringguardRegisterIssueLaneBindings(py::module_& m) {
  py::class_<PyIssueLane>(m, "IssueLane")
      .def(py::init<std::string>(), py::arg("name"))
      .def(
          "__enter__",
          [](PyIssueLane& self) -> PyIssueLane& {
            self.enter();
            return self;
          },
          py::return_value_policy::reference)
      .def("__exit__",
           [](PyIssueLane& self, const py::object&, const py::object&, const py::object&) { self.exit(); })
      .def_property_readonly("name", &PyIssueLane::name)
      .def_property_readonly("id", &PyIssueLane::id);
  m.def("current_issue_lane", [] { return ringguard::currentIssueLane(); });
}
