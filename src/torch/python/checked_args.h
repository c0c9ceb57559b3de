#pragma once
// Arguments from Python, checked where they cross into C++ so that the error names the parameter:
// - strings arrive whole, NUL bytes included (pybind11 converts by length), but much of what they reach
//   reads C strings: "bitflip\0garbage" would be taken as "bitflip" without a word;
// - integers are compared as Python ints before any cast, so -1 or 10**30 gets the parameter's range rather
//   than pybind11's "Unable to cast Python instance of type <class 'int'> to C++ type '?'".
#include <pybind11/pybind11.h>

#include <string>

#include "core/excerpt.h"

namespace ringguard {

// `s`, or ValueError naming `what` (the parameter, in the Python API's words) and the NUL's offset.
inline const std::string& noNul(const std::string& s, const std::string& what) {
  const size_t at = s.find('\0');
  if (at != std::string::npos) {
    throw pybind11::value_error("ringguard: " + what + " holds a NUL byte at offset " + std::to_string(at) +
                                " ('" + excerpt(s) + "'): strings passed to ringguard cannot hold NULs");
  }
  return s;
}

// `v` as a T when it is a Python int (not a bool) in [lo, hi]; else ValueError naming `what` and the range.
template <typename T>
T integerIn(const pybind11::handle& v, const std::string& what, T lo, T hi) {
  namespace py = pybind11;
  const bool fits = py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v) &&
                    py::reinterpret_borrow<py::object>(v) >= py::int_(lo) &&
                    py::reinterpret_borrow<py::object>(v) <= py::int_(hi);
  if (!fits) {
    throw py::value_error("ringguard: " + what + " must be an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "], got " + excerpt(std::string(py::repr(v))));
  }
  return py::cast<T>(v);
}

}  // namespace ringguard
