// ringguard._C.ReplicaListing: the replica check's listing of what it fingerprints (replica_listing.h).
#include "torch/python/replica_listing.h"

#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <unordered_set>

#include "torch/guard/tensor_buffer.h"

namespace py = pybind11;

namespace ringguard {
namespace {

// owner.<name> for an interned name, a dict in every torch this builds against (a subclass: OrderedDict,
// defaultdict, read without its __missing__, as .get() reads it).
py::object dictOf(const py::handle& owner, const py::str& name) {
  py::object d = py::reinterpret_steal<py::object>(PyObject_GetAttr(owner.ptr(), name.ptr()));
  if (!d) throw py::error_already_set();
  if (!PyDict_Check(d.ptr())) {
    throw py::type_error("replica check: " + name.cast<std::string>() + " of a " +
                         py::type::of(owner).attr("__name__").cast<std::string>() + " is not a dict");
  }
  return d;
}

// d[key] (a new reference), or an empty object when absent.
py::object lookup(PyObject* d, PyObject* key) {
  PyObject* v = PyDict_GetItemWithError(d, key);
  if (v == nullptr && PyErr_Occurred()) throw py::error_already_set();
  return py::reinterpret_borrow<py::object>(v);
}

}  // namespace

ReplicaListing::ReplicaListing(py::object model, py::object optimizer, bool includeState,
                               py::object includeBuffers, py::dict names, py::function marked,
                               py::object dtensor)
    : model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      dtensor_(std::move(dtensor)),
      marked_(std::move(marked)),
      includeState_(includeState && !optimizer_.is_none()),
      parametersName_(py::reinterpret_steal<py::str>(PyUnicode_InternFromString("_parameters"))),
      buffersName_(py::reinterpret_steal<py::str>(PyUnicode_InternFromString("_buffers"))),
      modulesName_(py::reinterpret_steal<py::str>(PyUnicode_InternFromString("_modules"))) {
  if (py::isinstance<py::str>(includeBuffers)) {
    if (includeBuffers.cast<std::string>() != "auto") {
      throw py::value_error("ReplicaListing: include_buffers must be True, False or 'auto'");
    }
    autoBuffers_ = true;
  } else {
    includeBuffers_ = includeBuffers.cast<bool>();
  }
  if (!PyType_Check(dtensor_.ptr())) throw py::type_error("ReplicaListing: dtensor must be a class");
  for (const auto& [id, name] : names) names_[id.cast<uintptr_t>()] = name.cast<std::string>();
  walk();
}

void ReplicaListing::walk() {
  // Built aside and swapped in whole: a walk that fails part way (a Python error in the model) leaves the
  // last complete one, which the next read finds changed and walks again.
  const py::object marked = marked_(model_);
  std::vector<Shape> shapes;
  std::vector<Slot> paramSlots, bufferSlots;
  for (const py::handle item : model_.attr("named_modules")()) {
    const auto pair = item.cast<py::tuple>();
    const std::string mname = pair[0].cast<std::string>();
    const py::object m = pair[1];
    const py::object params = dictOf(m, parametersName_), buffers = dictOf(m, buffersName_),
                     modules = dictOf(m, modulesName_);
    Shape shape{m,
                PyDict_Size(params.ptr()),
                PyDict_Size(buffers.ptr()),
                {},
                paramSlots.size(),
                0,
                bufferSlots.size(),
                0};
    PyObject *k = nullptr, *v = nullptr;
    for (Py_ssize_t pos = 0; PyDict_Next(modules.ptr(), &pos, &k, &v);) {
      shape.children.emplace_back(py::reinterpret_borrow<py::object>(k),
                                  py::reinterpret_borrow<py::object>(v));
    }
    const std::string prefix = mname.empty() ? std::string() : mname + ".";
    for (const py::handle key : params) {
      paramSlots.push_back(
          Slot{prefix + py::str(key).cast<std::string>(), py::reinterpret_borrow<py::object>(key), false});
    }
    for (const py::handle key : buffers) {
      std::string name = prefix + py::str(key).cast<std::string>();
      const bool isMarked = marked.contains(py::str(name));
      bufferSlots.push_back(Slot{std::move(name), py::reinterpret_borrow<py::object>(key), isMarked});
    }
    shape.paramsEnd = paramSlots.size();
    shape.buffersEnd = bufferSlots.size();
    shapes.push_back(std::move(shape));
  }
  shapes_.swap(shapes);
  params_.swap(paramSlots);
  buffers_.swap(bufferSlots);
}

bool ReplicaListing::readWalked(std::vector<Read>* params, std::vector<Read>* buffers) const {
  params->clear();
  buffers->clear();
  std::unordered_set<PyObject*> seenParams, seenBuffers;
  // Each slot holds what it read: a tensor (registered twice: listed once, under its first name), None (left
  // out) or nothing (the key is gone: a key replaced with the counts equal, so walk again).
  const auto readSlots = [](const py::object& d, const std::vector<Slot>& slots, size_t begin, size_t end,
                            std::unordered_set<PyObject*>* seen, std::vector<Read>* out) {
    for (size_t i = begin; i < end; ++i) {
      py::object t = lookup(d.ptr(), slots[i].key.ptr());
      if (!t) return false;
      if (t.is_none() || !seen->insert(t.ptr()).second) continue;
      out->emplace_back(&slots[i], std::move(t));
    }
    return true;
  };
  for (const Shape& s : shapes_) {
    // The structure as walked: each module's counts, and its children the same objects.
    const py::object p = dictOf(s.module, parametersName_), b = dictOf(s.module, buffersName_),
                     m = dictOf(s.module, modulesName_);
    if (PyDict_Size(p.ptr()) != s.params || PyDict_Size(b.ptr()) != s.buffers ||
        PyDict_Size(m.ptr()) != static_cast<Py_ssize_t>(s.children.size())) {
      return false;
    }
    for (const auto& [name, child] : s.children) {
      if (lookup(m.ptr(), name.ptr()).ptr() != child.ptr()) return false;
    }
    if (!readSlots(p, params_, s.paramsBegin, s.paramsEnd, &seenParams, params) ||
        !readSlots(b, buffers_, s.buffersBegin, s.buffersEnd, &seenBuffers, buffers)) {
      return false;
    }
  }
  return true;
}

bool ReplicaListing::readRegistrations(std::vector<Read>* params, std::vector<Read>* buffers) {
  if (readWalked(params, buffers)) return true;
  walk();  // the structure changed since the last walk
  return readWalked(params, buffers);
}

const ReplicaListing::StateLabels& ReplicaListing::labelsFor(PyObject* param, PyObject* state,
                                                             const std::string& parameter) {
  StateLabels& l = state_[param];
  bool same = l.parameter == parameter && static_cast<Py_ssize_t>(l.keys.size()) == PyDict_Size(state);
  PyObject *k = nullptr, *v = nullptr;
  for (Py_ssize_t pos = 0, i = 0; same && PyDict_Next(state, &pos, &k, &v); ++i) {
    const int eq = PyObject_RichCompareBool(l.keys[static_cast<size_t>(i)].ptr(), k, Py_EQ);
    if (eq < 0) throw py::error_already_set();
    same = eq == 1;
  }
  if (same) return l;
  // Made aside and stored whole (a key whose str() fails leaves the cache as it was).
  StateLabels made;
  made.parameter = parameter;
  std::vector<std::pair<std::string, size_t>> order;  // (str(key), insertion index)
  for (Py_ssize_t pos = 0; PyDict_Next(state, &pos, &k, &v);) {
    const auto key = py::reinterpret_borrow<py::object>(k);
    order.emplace_back(py::str(key).cast<std::string>(), made.keys.size());
    made.keys.push_back(key);
  }
  // sorted(st, key=str): by the key's str, stable.
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [text, i] : order)
    made.labels.emplace_back(made.keys[i], "optim:" + parameter + "." + text);
  l = std::move(made);
  return l;
}

Status ReplicaListing::add(Listed* into, size_t index, const std::string& name, PyObject* tensor) {
  PyObject* obj = tensor;
  py::object local;
  // A DTensor (a subclass, so no __instancecheck__ is asked): its local shard.
  if (PyType_IsSubtype(Py_TYPE(obj), reinterpret_cast<PyTypeObject*>(dtensor_.ptr()))) {
    local = py::reinterpret_borrow<py::object>(obj).attr("_local_tensor");
    obj = local.ptr();
  }
  if (!THPVariable_Check(obj)) {
    return Status(StatusCode::kInvalidArgument, "replica check: '" + name + "' is not a tensor");
  }
  at::Tensor t = THPVariable_Unpack(obj);
  GuardBuffer b;
  RINGGUARD_RETURN_IF_ERROR(tensorBuffer(t, name, &b));
  if (index == into->tensors.size()) {
    into->tensors.emplace_back();
    into->held.emplace_back();
  }
  ReplicaTensor& r = into->tensors[index];
  if (r.name != name) r.name = name;
  r.data = b.data;
  r.bytes = b.bytes;
  r.dtype = b.dtype;
  r.kind = b.kind;
  into->held[index] = std::move(t);
  return Status::ok();
}

Status ReplicaListing::list(Listed* into) {
  std::vector<Read> params, buffers;
  if (!readRegistrations(&params, &buffers)) {
    return Status(StatusCode::kInternal, "replica check: the model's registrations changed while listed");
  }
  size_t n = 0;
  std::string label;
  for (const auto& [slot, t] : params) {
    label.assign("param:").append(slot->name);
    RINGGUARD_RETURN_IF_ERROR(add(into, n++, label, t.ptr()));
  }
  if (includeState_) {
    const py::object state = dictOf(optimizer_, stateName_);
    for (const py::handle group : optimizer_.attr("param_groups")) {
      for (const py::handle p : group[py::str("params")]) {
        const py::object st = lookup(state.ptr(), p.ptr());
        if (!st || st.is_none()) continue;
        const auto named = names_.find(reinterpret_cast<uintptr_t>(p.ptr()));
        const std::string parameter = named != names_.end()
                                          ? named->second
                                          : "#" + std::to_string(reinterpret_cast<uintptr_t>(p.ptr()));
        if (!PyDict_Check(st.ptr())) {
          return Status(StatusCode::kInvalidArgument,
                        "replica check: the optimizer's state of '" + parameter + "' is not a dict but a " +
                            py::str(py::type::of(st).attr("__name__")).cast<std::string>());
        }
        if (PyDict_Size(st.ptr()) == 0) continue;  // no state yet
        for (const auto& [key, lab] : labelsFor(p.ptr(), st.ptr(), parameter).labels) {
          const py::object v = lookup(st.ptr(), key.ptr());
          if (v && THPVariable_Check(v.ptr())) RINGGUARD_RETURN_IF_ERROR(add(into, n++, lab, v.ptr()));
        }
      }
    }
  }
  if (includeBuffers_ || autoBuffers_) {
    for (const auto& [slot, t] : buffers) {
      if (autoBuffers_ && slot->marked) continue;
      label.assign("buffer:").append(slot->name);
      RINGGUARD_RETURN_IF_ERROR(add(into, n++, label, t.ptr()));
    }
  }
  into->tensors.resize(n);
  into->held.resize(n);
  return Status::ok();
}

Status ReplicaListing::read(const std::vector<ReplicaTensor>** out) {
  RINGGUARD_RETURN_IF_ERROR(list(&checked_));
  *out = &checked_.tensors;
  return Status::ok();
}

Status ReplicaListing::named(std::vector<std::pair<std::string, at::Tensor>>* out) {
  Listed listed;
  RINGGUARD_RETURN_IF_ERROR(list(&listed));
  out->clear();
  out->reserve(listed.tensors.size());
  for (size_t i = 0; i < listed.tensors.size(); ++i)
    out->emplace_back(listed.tensors[i].name, listed.held[i]);
  return Status::ok();
}

at::Tensor ReplicaListing::tensor(const std::string& name) const {
  // The last of a name, as the Python dict of the listing had it (two keys of one state whose str is equal).
  for (size_t i = checked_.tensors.size(); i-- > 0;) {
    if (checked_.tensors[i].name == name) return checked_.held[i];
  }
  throw py::key_error("replica check: no checked tensor is named '" + name + "'");
}

py::tuple ReplicaListing::registrations() {
  std::vector<Read> params, buffers;
  if (!readRegistrations(&params, &buffers)) {
    throw std::runtime_error("replica check: the model's registrations changed while listed");
  }
  py::list p, b;
  for (const auto& [slot, t] : params) p.append(py::make_tuple(slot->name, t));
  for (const auto& [slot, t] : buffers) b.append(py::make_tuple(slot->name, t, slot->marked));
  return py::make_tuple(p, b);
}

}  // namespace ringguard
