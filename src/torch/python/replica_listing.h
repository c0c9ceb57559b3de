#pragma once
// What a replica check fingerprints, listed in C++ every check (docs/REPLICAS.md, "What one check does"):
// the model's parameters and buffers where they are registered (module._parameters[key],
// module._buffers[key], found by one walk of the module tree, redone only when the structure changed) and
// the optimizer's state tensors, as ReplicaTensors the checker reads, with no Python list built or converted.
// In Python this took ~0.15 ms (dev machine) to 0.34 ms (an H100's host) for a small GPT's 309 tensors, plus
// ~55 us to hand the list to C++: host time inside a step that is bound by its launches.
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ringguard/replicas/fingerprint.h"

namespace ringguard {

class ReplicaListing {
 public:
  // includeBuffers: True, False or "auto" (every buffer but those `marked(model)` names: the per-replica
  // running statistics). names: id(parameter) -> its name, for the optimizer state's labels ("#<id>" when
  // absent). dtensor: torch's DTensor class (or a class no tensor is): such tensors are listed by their
  // local shard. optimizer may be None (no state listed).
  ReplicaListing(pybind11::object model, pybind11::object optimizer, bool includeState,
                 pybind11::object includeBuffers, pybind11::dict names, pybind11::function marked,
                 pybind11::object dtensor);

  // The checked tensors as registered now, in the order compared: "param:<name>", then
  // "optim:<parameter name>.<state key>" (keys sorted as str), then "buffer:<name>": the checker's list,
  // valid (and its tensors held) until the next read(). kInvalidArgument naming a tensor that cannot be read
  // as one byte range (python: ValueError). Called with the GIL held, as every method here.
  Status read(const std::vector<ReplicaTensor>** out);
  // The same as (name, tensor) pairs, listed aside (ReplicaCheck.tensors(), which another thread may call
  // while a check uses read()'s list with the GIL released).
  Status named(std::vector<std::pair<std::string, at::Tensor>>* out);
  // The tensor of the last read() named `name` (a repair's broadcast); KeyError when absent.
  at::Tensor tensor(const std::string& name) const;

  // named_parameters() and named_buffers() as registered now (the registrations, DTensors not unwrapped):
  // ([(name, tensor)], [(name, tensor, marked)]).
  pybind11::tuple registrations();

  // The last read()'s list as (name, data address, bytes), and how the reads went: (revalidated, listed
  // in full). Tests.
  pybind11::list checked() const;
  std::pair<uint64_t, uint64_t> reads() const { return {revalidated_, listedInFull_}; }
  // Changed by every read() whose list may differ from the last one's in a name, a dtype, a size or the
  // count (a full listing, or a tensor revalidated with another size): ReplicaChecker::layoutKnown's.
  uint64_t layoutVersion() const { return layoutVersion_; }

 private:
  struct Slot {  // one registration: <module>.<container>[key]
    std::string name;
    pybind11::object key;
    bool marked = false;
    std::string label;  // "param:<name>" or "buffer:<name>"
  };
  struct Shape {  // a module as walked: its counts, children and slots (params_, buffers_ [begin, end))
    pybind11::object module;
    Py_ssize_t params = 0, buffers = 0;
    std::vector<std::pair<pybind11::object, pybind11::object>> children;
    size_t paramsBegin = 0, paramsEnd = 0, buffersBegin = 0, buffersEnd = 0;
  };
  struct StateLabels {  // one parameter's optimizer state: its name, keys in insertion order, labels sorted
    std::string parameter;
    const std::string* source = nullptr;  // where `parameter` was last given from (names_' entry, stable)
    std::vector<pybind11::object> keys;
    std::vector<std::pair<pybind11::object, std::string>> labels;
  };

  using Read = std::pair<const Slot*, pybind11::object>;  // a registration and what it holds now
  struct Listed {  // a listing: the checker's view, and the tensors that keep its pointers valid
    std::vector<ReplicaTensor> tensors;
    std::vector<at::Tensor> held;
    // The label each entry's name was last set from (a Slot's or a StateLabels' string), valid while
    // labelsEpoch is the listing's: an unchanged entry costs a pointer comparison, not a string's.
    std::vector<const std::string*> labels;
    uint64_t labelsEpoch = 0;
  };

  void walk();
  // The registered parameters and buffers, each once, None left out, in one pass over the walked modules;
  // false when the structure changed since the walk (a module's counts or children, or a recorded key gone).
  bool readWalked(std::vector<Read>* params, std::vector<Read>* buffers);
  void dropRepeats(std::vector<Read>* reads);
  bool readRegistrations(std::vector<Read>* params, std::vector<Read>* buffers);
  // stable: `parameter` is an entry of names_ (its address identifies it).
  const StateLabels& labelsFor(PyObject* param, PyObject* state, const std::string& parameter, bool stable);
  Status list(Listed* into);
  Status add(Listed* into, size_t index, const std::string& name, PyObject* tensor);

  pybind11::object model_, optimizer_, dtensor_;
  pybind11::function marked_;
  bool includeState_ = true, includeBuffers_ = true, autoBuffers_ = false;
  pybind11::str parametersName_, buffersName_, modulesName_;  // interned attribute names
  pybind11::str stateName_ = pybind11::str("state");
  std::unordered_map<uintptr_t, std::string> names_;
  std::vector<Shape> shapes_;
  std::vector<Slot> params_, buffers_;
  // By the parameter's identity, checked against its name and state keys at every use (as the Python
  // listing's cache was keyed by (name, keys)): an address reused by another parameter gets new labels.
  std::unordered_map<PyObject*, StateLabels> state_;
  uint64_t labelsEpoch_ = 1;  // bumped whenever a Slot or a StateLabels is made again (their strings move)
  pybind11::str paramGroupsName_ = pybind11::str("param_groups"), paramsName_ = pybind11::str("params");
  // read()'s revalidation (docs/REPLICAS.md, "The listing"): what the last full listing read from, kept with
  // its dicts' versions, so a check whose model and optimizer changed no registration reads each kept
  // tensor again and no dict. Off from Python 3.13 on (an attribute set there leaves the __dict__'s version
  // as it was; 3.14 drops the field), for a listing with a DTensor (its local shard is an attribute, read
  // every time) and where an attribute read is not its owner's own dict entry (a property's).
  struct Versioned {  // a dict the listing read from, and its version then
    pybind11::object dict;
    uint64_t version;
  };
  struct Owner {  // a module's or the optimizer's __dict__ (or a param group) and the entries read from it
    pybind11::object object;  // whose __dict__ it is (None: a dict of its own, as a param group)
    pybind11::object dict;
    uint64_t version;
    std::vector<std::pair<pybind11::object, PyObject*>> attributes;  // (name, the object it named)
  };
  struct Items {  // a list the listing iterated (param_groups, a group's params) and its items then
    pybind11::object list;
    std::vector<PyObject*> items;
  };
  void recordOwner(const pybind11::handle& owner,
                   std::initializer_list<std::pair<pybind11::str, PyObject*>> attrs);
  void recordKeys(const pybind11::handle& owner, pybind11::object dict,
                  std::initializer_list<std::pair<pybind11::str, PyObject*>> keys);
  void recordDict(PyObject* d);
  void recordList(PyObject* list);
  bool unchanged();
  Status reread(Listed* into);
  bool recording_ = false, revalidate_ = false;
  std::vector<Versioned> versioned_;
  std::vector<Owner> owners_;
  std::vector<Items> lists_;
  std::vector<PyObject*>
      objects_;  // each listed tensor's object, in order (alive while its dict is unchanged)
  uint64_t revalidated_ = 0, listedInFull_ = 0;
  uint64_t layoutVersion_ = 0;
  bool layoutChanged_ = false;  // add() saw another dtype or size
  static uint64_t nextLayoutVersion();
  // One listing at a time: read(), named() and registrations() refuse to start inside another (Python
  // code the listing runs could ask for one), whose walk, labels and records they would change under it.
  bool busy_ = false;
  class Nested {
   public:
    explicit Nested(ReplicaListing* l);
    ~Nested();
    bool refused() const { return refused_; }
    Status error() const;

   private:
    ReplicaListing* owner_;
    bool refused_;
  };
  bool recordOk_ = false;  // what this full listing read from was all recorded (revalidate_ after it)

  // The cache lines a listing read (the module and optimizer objects, their dicts' tables, each tensor's
  // object, TensorImpl and StorageImpl), prefetched all at once when the next listing starts: right after an
  // optimizer step they have left the core's caches, and read one by one, each miss waits for the last.
  // Addresses only (a prefetch never faults, so one gone since is harmless).
  void touch(const void* p, size_t bytes);
  void touchDict(PyObject* d);
  std::vector<const void*> touched_;
  Listed checked_;  // read()'s
};

}  // namespace ringguard
