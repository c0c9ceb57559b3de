// ringguard._C.ReplicaListing: the replica check's listing of what it fingerprints (replica_listing.h).
#include "torch/python/replica_listing.h"

#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <atomic>
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

// A dict's version (PEP 509): changed by every change to the dict. Deprecated in 3.12; from 3.13 on an
// object's attributes stay inline beside a materialised __dict__ and are set without touching its version
// (and 3.14 drops the field), so read() lists in full every time there.
#if PY_VERSION_HEX < 0x030D0000
constexpr bool kDictVersions = true;
uint64_t dictVersion(PyObject* d) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  return reinterpret_cast<PyDictObject*>(d)->ma_version_tag;
#pragma GCC diagnostic pop
}
#else
constexpr bool kDictVersions = false;
uint64_t dictVersion(PyObject*) { return 0; }
#endif

}  // namespace

uint64_t ReplicaListing::nextLayoutVersion() {
  // Process-wide, so no two listings' versions are equal (a checker keys its layout hash on them).
  static std::atomic<uint64_t> versions{0};
  return ++versions;
}

ReplicaListing::Nested::Nested(ReplicaListing* l) : owner_(l), refused_(l->busy_) {
  if (!refused_) l->busy_ = true;
}

ReplicaListing::Nested::~Nested() {
  if (!refused_) owner_->busy_ = false;
}

Status ReplicaListing::Nested::error() const {
  return Status(StatusCode::kInvalidArgument,
                "replica check: the listing was asked for while it was listing (from Python code it ran: a "
                "module's __getattr__, a state key's __eq__ or __str__); it lists one at a time");
}

void ReplicaListing::recordOwner(const py::handle& owner,
                                 std::initializer_list<std::pair<py::str, PyObject*>> attrs) {
  if (!recording_) return;
  // Its __dict__ (made now if the interpreter kept the attributes inline): every attribute set goes there.
  PyObject* d = PyObject_GenericGetDict(owner.ptr(), nullptr);
  if (d == nullptr || !PyDict_Check(d)) {
    PyErr_Clear();
    Py_XDECREF(d);
    recordOk_ = false;
    return;
  }
  recordKeys(owner, py::reinterpret_steal<py::object>(d), attrs);
}

void ReplicaListing::recordKeys(const py::handle& owner, py::object dict,
                                std::initializer_list<std::pair<py::str, PyObject*>> keys) {
  if (!recording_) return;
  Owner o{py::reinterpret_borrow<py::object>(owner), std::move(dict), 0, {}};
  o.version = dictVersion(o.dict.ptr());
  for (const auto& [name, obj] : keys) {
    // What the listing read must be that dict's entry (not a property's or a class's value: an optimizer
    // wrapper forwarding `state` to another, say), or nothing here would see it change.
    PyObject* entry = PyDict_GetItemWithError(o.dict.ptr(), name.ptr());
    if (entry == nullptr && PyErr_Occurred()) PyErr_Clear();
    if (entry != obj) recordOk_ = false;
    o.attributes.emplace_back(name, obj);
  }
  owners_.push_back(std::move(o));
}

void ReplicaListing::recordDict(PyObject* d) {
  if (recording_) versioned_.push_back(Versioned{py::reinterpret_borrow<py::object>(d), dictVersion(d)});
}

void ReplicaListing::recordList(PyObject* list) {
  if (!recording_) return;
  if (!PyList_CheckExact(list)) {
    recordOk_ = false;
    return;
  }
  const auto* l = reinterpret_cast<PyListObject*>(list);
  lists_.push_back(Items{py::reinterpret_borrow<py::object>(list),
                         std::vector<PyObject*>(l->ob_item, l->ob_item + PyList_GET_SIZE(list))});
}

bool ReplicaListing::unchanged() {
  for (const Versioned& v : versioned_) {
    if (dictVersion(v.dict.ptr()) != v.version) return false;
  }
  for (Owner& o : owners_) {
    if (!o.object.is_none()) {  // the object's __dict__ itself, not one assigned over it since
      PyObject* d = PyObject_GenericGetDict(o.object.ptr(), nullptr);
      if (d == nullptr) {
        PyErr_Clear();
        return false;
      }
      Py_DECREF(d);  // (the object holds it)
      if (d != o.dict.ptr()) return false;
    }
    const uint64_t now = dictVersion(o.dict.ptr());
    if (now == o.version) continue;
    // Some attribute changed (DDP counts its iterations in one): the same only if those read are.
    for (const auto& [name, obj] : o.attributes) {
      PyObject* current = PyDict_GetItemWithError(o.dict.ptr(), name.ptr());
      if (current == nullptr && PyErr_Occurred()) throw py::error_already_set();
      if (current != obj) return false;
    }
    o.version = now;
  }
  for (const Items& l : lists_) {
    const auto* list = reinterpret_cast<PyListObject*>(l.list.ptr());
    if (static_cast<size_t>(PyList_GET_SIZE(l.list.ptr())) != l.items.size() ||
        !std::equal(l.items.begin(), l.items.end(), list->ob_item)) {
      return false;
    }
  }
  return true;
}

Status ReplicaListing::reread(Listed* into) {
  for (size_t i = 0; i < objects_.size(); ++i)
    RINGGUARD_RETURN_IF_ERROR(add(into, i, *into->labels[i], objects_[i]));
  return Status::ok();
}

void ReplicaListing::touch(const void* p, size_t bytes) {
  constexpr uintptr_t kLine = 64;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(kLine - 1);
  for (uintptr_t a = begin; a < reinterpret_cast<uintptr_t>(p) + bytes; a += kLine)
    touched_.push_back(reinterpret_cast<const void*>(a));
}

void ReplicaListing::touchDict(PyObject* d) {
  // The object, and its table: a header, the index and an entry of three pointers per item, or for a split
  // table the values apart. Sizes estimated from the count (the layout of the keys object is CPython's own).
  const auto* dict = reinterpret_cast<const PyDictObject*>(d);
  touch(dict, sizeof(PyDictObject));
  const size_t used = static_cast<size_t>(dict->ma_used);
  touch(dict->ma_keys, 48 + used * (3 * sizeof(void*) + 2));
  if (dict->ma_values != nullptr) touch(dict->ma_values, 8 + used * sizeof(void*));
}

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
      std::string name = prefix + py::str(key).cast<std::string>();
      std::string label = "param:" + name;
      paramSlots.push_back(
          Slot{std::move(name), py::reinterpret_borrow<py::object>(key), false, std::move(label)});
    }
    for (const py::handle key : buffers) {
      std::string name = prefix + py::str(key).cast<std::string>();
      const bool isMarked = marked.contains(py::str(name));
      std::string label = "buffer:" + name;
      bufferSlots.push_back(
          Slot{std::move(name), py::reinterpret_borrow<py::object>(key), isMarked, std::move(label)});
    }
    shape.paramsEnd = paramSlots.size();
    shape.buffersEnd = bufferSlots.size();
    shapes.push_back(std::move(shape));
  }
  shapes_.swap(shapes);
  params_.swap(paramSlots);
  buffers_.swap(bufferSlots);
  ++labelsEpoch_;
}

bool ReplicaListing::readWalked(std::vector<Read>* params, std::vector<Read>* buffers) {
  params->clear();
  buffers->clear();
  if (recording_) {  // the module part comes first: what a failed pass recorded goes
    versioned_.clear();
    owners_.clear();
    lists_.clear();
  }
  // Each slot holds what it read: a tensor, None (left out) or nothing (the key is gone: a key replaced with
  // the counts equal, so walk again).
  const auto readSlots = [](const py::object& d, const std::vector<Slot>& slots, size_t begin, size_t end,
                            std::vector<Read>* out) {
    for (size_t i = begin; i < end; ++i) {
      py::object t = lookup(d.ptr(), slots[i].key.ptr());
      if (!t) return false;
      if (t.is_none()) continue;
      out->emplace_back(&slots[i], std::move(t));
    }
    return true;
  };
  for (const Shape& s : shapes_) {
    // The structure as walked: each module's counts, and its children the same objects.
    const py::object p = dictOf(s.module, parametersName_), b = dictOf(s.module, buffersName_),
                     m = dictOf(s.module, modulesName_);
    touch(reinterpret_cast<const unsigned char*>(s.module.ptr()) - 64, 192);  // with a managed dict's values
    touchDict(p.ptr());
    touchDict(b.ptr());
    touchDict(m.ptr());
    recordOwner(s.module, {{parametersName_, p.ptr()}, {buffersName_, b.ptr()}, {modulesName_, m.ptr()}});
    recordDict(p.ptr());
    recordDict(b.ptr());
    recordDict(m.ptr());
    if (PyDict_Size(p.ptr()) != s.params || PyDict_Size(b.ptr()) != s.buffers ||
        PyDict_Size(m.ptr()) != static_cast<Py_ssize_t>(s.children.size())) {
      return false;
    }
    for (const auto& [name, child] : s.children) {
      if (lookup(m.ptr(), name.ptr()).ptr() != child.ptr()) return false;
    }
    if (!readSlots(p, params_, s.paramsBegin, s.paramsEnd, params) ||
        !readSlots(b, buffers_, s.buffersBegin, s.buffersEnd, buffers)) {
      return false;
    }
  }
  dropRepeats(params);
  dropRepeats(buffers);
  return true;
}

void ReplicaListing::dropRepeats(std::vector<Read>* reads) {
  // A tensor registered twice (a tied weight) is listed once, under its first name. Rare: a sorted copy of
  // the pointers says whether any repeats (no set of nodes made every check).
  std::vector<PyObject*> sorted;
  sorted.reserve(reads->size());
  for (const Read& r : *reads) sorted.push_back(r.second.ptr());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) return;
  std::unordered_set<PyObject*> seen;
  reads->erase(std::remove_if(reads->begin(), reads->end(),
                              [&](const Read& r) { return !seen.insert(r.second.ptr()).second; }),
               reads->end());
}

bool ReplicaListing::readRegistrations(std::vector<Read>* params, std::vector<Read>* buffers) {
  if (readWalked(params, buffers)) return true;
  walk();  // the structure changed since the last walk
  return readWalked(params, buffers);
}

const ReplicaListing::StateLabels& ReplicaListing::labelsFor(PyObject* param, PyObject* state,
                                                             const std::string& parameter, bool stable) {
  StateLabels& l = state_[param];
  // A name from names_ (`stable`: never changed after construction) is compared by its address.
  bool same = ((stable && l.source == &parameter) || l.parameter == parameter) &&
              static_cast<Py_ssize_t>(l.keys.size()) == PyDict_Size(state);
  PyObject *k = nullptr, *v = nullptr;
  for (Py_ssize_t pos = 0, i = 0; same && PyDict_Next(state, &pos, &k, &v); ++i) {
    const int eq = PyObject_RichCompareBool(l.keys[static_cast<size_t>(i)].ptr(), k, Py_EQ);
    if (eq < 0) throw py::error_already_set();
    same = eq == 1;
  }
  if (same) {
    l.source = stable ? &parameter : nullptr;
    return l;
  }
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
  made.source = stable ? &parameter : nullptr;
  l = std::move(made);
  ++labelsEpoch_;
  return l;
}

Status ReplicaListing::add(Listed* into, size_t index, const std::string& label, PyObject* tensor) {
  if (index == into->tensors.size()) {
    into->tensors.emplace_back();
    into->held.emplace_back();
    into->labels.push_back(nullptr);
  }
  if (into->labelsEpoch != labelsEpoch_) {
    // Labels were made again (a walk, or a parameter's new state keys, which frees that parameter's old
    // strings): no address kept from an earlier listing may be compared. The entries before this one were
    // set in this listing from labels that stay (a parameter's entries follow its labelsFor).
    std::fill(into->labels.begin() + static_cast<std::ptrdiff_t>(std::min(index, into->labels.size())),
              into->labels.end(), nullptr);
    into->labelsEpoch = labelsEpoch_;
  }
  ReplicaTensor& r = into->tensors[index];
  if (into->labels[index] != &label) {
    if (r.name != label) r.name = label;
    into->labels[index] = &label;
  }
  PyObject* obj = tensor;
  py::object local;
  // A DTensor (a subclass, so no __instancecheck__ is asked): its local shard.
  const bool dtensor = PyType_IsSubtype(Py_TYPE(obj), reinterpret_cast<PyTypeObject*>(dtensor_.ptr()));
  if (recording_) {
    if (dtensor || objects_.size() != index) recordOk_ = false;
    objects_.push_back(tensor);
  }
  if (dtensor) {
    local = py::reinterpret_borrow<py::object>(obj).attr("_local_tensor");
    obj = local.ptr();
  }
  if (!THPVariable_Check(obj)) {
    return Status(StatusCode::kInvalidArgument, "replica check: '" + label + "' is not a tensor");
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  touch(obj, sizeof(THPVariable));
  touch(t.unsafeGetTensorImpl(), sizeof(c10::TensorImpl));
  if (t.has_storage()) touch(t.storage().unsafeGetStorageImpl(), sizeof(c10::StorageImpl));
  TensorRange b;
  RINGGUARD_RETURN_IF_ERROR(tensorRange(t, label, &b));
  if (r.bytes != b.bytes || r.dtype != b.dtype) layoutChanged_ = true;
  r.data = b.data;
  r.bytes = b.bytes;
  r.dtype = b.dtype;
  r.kind = b.kind;
  // A small host tensor's bytes too (Adam's `step`): the check reads them next, for its host CRC.
  if (b.kind == MemoryKind::kHost && b.bytes <= 256) touch(b.data, b.bytes);
  // Held already when it is the same tensor: no reference count moved.
  if (into->held[index].unsafeGetTensorImpl() != t.unsafeGetTensorImpl()) into->held[index] = t;
  return Status::ok();
}

Status ReplicaListing::list(Listed* into) {
  touch(into->tensors.data(), into->tensors.size() * sizeof(ReplicaTensor));
  touch(into->held.data(), into->held.size() * sizeof(at::Tensor));
  touch(into->labels.data(), into->labels.size() * sizeof(const std::string*));
  std::vector<Read> params, buffers;
  if (!readRegistrations(&params, &buffers)) {
    return Status(StatusCode::kInternal, "replica check: the model's registrations changed while listed");
  }
  size_t n = 0;
  for (const auto& [slot, t] : params) RINGGUARD_RETURN_IF_ERROR(add(into, n++, slot->label, t.ptr()));
  if (includeState_) {
    const py::object state = dictOf(optimizer_, stateName_);
    // The state's items in its order, each parameter's found by identity as the groups name it: a lookup
    // would hash the parameter, and a tensor's __hash__ is Python code (a call per parameter per check).
    // Owned while used (a key's __eq__ or __str__ in labelsFor is Python code too).
    std::vector<std::pair<PyObject*, PyObject*>> stateEntries;
    stateEntries.reserve(static_cast<size_t>(PyDict_Size(state.ptr())));
    touchDict(state.ptr());
    recordDict(state.ptr());
    PyObject *k = nullptr, *v = nullptr;
    for (Py_ssize_t pos = 0; PyDict_Next(state.ptr(), &pos, &k, &v);) stateEntries.emplace_back(k, v);
    std::vector<py::object> owned;
    owned.reserve(stateEntries.size());
    for (const auto& e : stateEntries) owned.push_back(py::reinterpret_borrow<py::object>(e.second));
    std::unordered_map<PyObject*, PyObject*> byParameter;  // made only if the order differs
    size_t next = 0;
    const py::object groups =
        py::reinterpret_steal<py::object>(PyObject_GetAttr(optimizer_.ptr(), paramGroupsName_.ptr()));
    if (!groups) throw py::error_already_set();
    recordOwner(optimizer_, {{stateName_, state.ptr()}, {paramGroupsName_, groups.ptr()}});
    recordList(groups.ptr());
    for (const py::handle group : groups) {
      const py::object groupParams = group[paramsName_];
      if (PyDict_Check(group.ptr())) {
        touchDict(group.ptr());
        // Only its `params` (a scheduler sets its `lr` every step).
        recordKeys(py::none(), py::reinterpret_borrow<py::object>(group), {{paramsName_, groupParams.ptr()}});
      } else if (recording_) {
        recordOk_ = false;
      }
      recordList(groupParams.ptr());
      if (PyList_Check(groupParams.ptr())) {
        touch(groupParams.ptr(), sizeof(PyListObject));
        touch(reinterpret_cast<PyListObject*>(groupParams.ptr())->ob_item,
              static_cast<size_t>(PyList_GET_SIZE(groupParams.ptr())) * sizeof(PyObject*));
      }
      for (const py::handle p : groupParams) {
        PyObject* found = nullptr;
        if (next < stateEntries.size() && stateEntries[next].first == p.ptr()) {
          found = stateEntries[next++].second;
        } else {
          if (byParameter.empty()) byParameter.insert(stateEntries.begin(), stateEntries.end());
          const auto it = byParameter.find(p.ptr());
          if (it != byParameter.end()) found = it->second;
        }
        if (found == nullptr || found == Py_None) continue;
        const py::object st = py::reinterpret_borrow<py::object>(found);
        const auto named = names_.find(reinterpret_cast<uintptr_t>(p.ptr()));
        std::string unnamed;
        if (named == names_.end()) unnamed = "#" + std::to_string(reinterpret_cast<uintptr_t>(p.ptr()));
        const std::string& parameter = named != names_.end() ? named->second : unnamed;
        if (!PyDict_Check(st.ptr())) {
          return Status(StatusCode::kInvalidArgument,
                        "replica check: the optimizer's state of '" + parameter + "' is not a dict but a " +
                            py::str(py::type::of(st).attr("__name__")).cast<std::string>());
        }
        touchDict(st.ptr());
        recordDict(st.ptr());
        if (PyDict_Size(st.ptr()) == 0) continue;  // no state yet
        for (const auto& [key, lab] : labelsFor(p.ptr(), st.ptr(), parameter, named != names_.end()).labels) {
          const py::object value = lookup(st.ptr(), key.ptr());
          if (value && THPVariable_Check(value.ptr()))
            RINGGUARD_RETURN_IF_ERROR(add(into, n++, lab, value.ptr()));
        }
      }
    }
  }
  if (includeBuffers_ || autoBuffers_) {
    for (const auto& [slot, t] : buffers) {
      if (autoBuffers_ && slot->marked) continue;
      RINGGUARD_RETURN_IF_ERROR(add(into, n++, slot->label, t.ptr()));
    }
  }
  into->tensors.resize(n);
  into->held.resize(n);
  into->labels.resize(n);
  return Status::ok();
}

Status ReplicaListing::read(const std::vector<ReplicaTensor>** out) {
  const Nested nested(this);
  if (nested.refused()) return nested.error();
  for (const void* line : touched_) __builtin_prefetch(line);
  touched_.clear();
  *out = &checked_.tensors;
  // Nothing the last full listing read from changed (no dict's version, no list's items), and its labels
  // are still where they were: the same registrations, so only each tensor is read again (its storage may
  // have moved: `.data =`, a resize).
  if (revalidate_ && checked_.labelsEpoch == labelsEpoch_ && checked_.tensors.size() == objects_.size() &&
      unchanged()) {
    ++revalidated_;
    touch(checked_.tensors.data(), checked_.tensors.size() * sizeof(ReplicaTensor));
    layoutChanged_ = false;
    const Status st = reread(&checked_);
    if (layoutChanged_ || !st.isOk()) layoutVersion_ = nextLayoutVersion();
    return st;
  }
  ++listedInFull_;
  layoutVersion_ = nextLayoutVersion();
  revalidate_ = false;  // until this listing has recorded all it read from
  recording_ = recordOk_ = kDictVersions;
  objects_.clear();
  Status st = Status::ok();
  try {
    st = list(&checked_);
  } catch (...) {
    recording_ = false;
    throw;
  }
  recording_ = false;
  // (Defensive: every entry's label is set by this listing, so none is null after it succeeded.)
  revalidate_ = st.isOk() && recordOk_ &&
                std::find(checked_.labels.begin(), checked_.labels.end(), nullptr) == checked_.labels.end();
  return st;
}

Status ReplicaListing::named(std::vector<std::pair<std::string, at::Tensor>>* out) {
  const Nested nested(this);
  if (nested.refused()) return nested.error();
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

py::list ReplicaListing::checked() const {
  py::list out;
  for (const ReplicaTensor& t : checked_.tensors)
    out.append(py::make_tuple(t.name, reinterpret_cast<uintptr_t>(t.data), t.bytes));
  return out;
}

py::tuple ReplicaListing::registrations() {
  const Nested nested(this);
  if (nested.refused()) throw std::runtime_error(nested.error().message());
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
