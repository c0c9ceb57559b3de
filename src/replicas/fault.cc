// The replica fault spec and where its flip lands.
#include "ringguard/replicas/fault.h"

#include <charconv>
#include <climits>
#include <set>
#include <sstream>

namespace ringguard {

namespace {

constexpr const char* kSetting = "RINGGUARD_REPLICA_FAULT";

Status bad(const std::string& what) {
  return Status(StatusCode::kInvalidArgument, std::string(kSetting) + ": " + what +
                                                  " (expected rank=R,step=S,tensor=NAME|#INDEX[,element=E]"
                                                  "[,bit=B][,repeat=N])");
}

bool parseU64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

std::string ReplicaFault::toString() const {
  return "rank=" + std::to_string(rank) + ",step=" + std::to_string(step) + ",tensor=" + tensor +
         ",element=" + std::to_string(element) + ",bit=" + std::to_string(bit) +
         ",repeat=" + std::to_string(repeat);
}

Status parseReplicaFault(const std::string& text, ReplicaFault* out, bool* enabled) {
  *enabled = false;
  if (text.empty()) return Status::ok();
  ReplicaFault f;
  std::set<std::string> seen;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("'" + item + "' is not key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!seen.insert(key).second) return bad("key '" + key + "' given twice");
    if (key == "tensor") {
      if (value.empty()) return bad("tensor is empty");
      f.tensor = value;
      continue;
    }
    uint64_t v = 0;
    if (!parseU64(value, &v)) return bad(key + "='" + value + "' is not a non-negative decimal integer");
    if (key == "rank") {
      if (v > INT_MAX) return bad("rank=" + value + " is out of range");
      f.rank = static_cast<int>(v);
    } else if (key == "step") {
      f.step = v;
    } else if (key == "element") {
      f.element = v;
    } else if (key == "bit") {
      if (v >= 128) return bad("bit=" + value + " is past the widest element (128 bits)");
      f.bit = static_cast<uint32_t>(v);
    } else if (key == "repeat") {
      if (v == 0) return bad("repeat=0 would never fire");
      f.repeat = v;
    } else {
      return bad("unknown key '" + key + "'");
    }
  }
  for (const char* required : {"rank", "step", "tensor"}) {
    if (!seen.count(required)) return bad(std::string("missing ") + required);
  }
  *out = f;
  *enabled = true;
  return Status::ok();
}

Status locateReplicaFault(const ReplicaFault& f, const std::vector<ReplicaTensor>& tensors, size_t* index,
                          size_t* byteOffset, uint8_t* mask) {
  size_t i = tensors.size();
  if (!f.tensor.empty() && f.tensor[0] == '#') {
    uint64_t v = 0;
    if (!parseU64(f.tensor.substr(1), &v) || v >= tensors.size()) {
      return bad("tensor=" + f.tensor + " is not an index below " + std::to_string(tensors.size()));
    }
    i = static_cast<size_t>(v);
  } else {
    for (size_t k = 0; k < tensors.size(); ++k) {
      if (tensors[k].name == f.tensor) {
        i = k;
        break;
      }
    }
    if (i == tensors.size()) {
      std::string names;
      for (size_t k = 0; k < tensors.size() && k < 6; ++k) names += (k ? ", " : "") + tensors[k].name;
      return bad("no tensor named '" + f.tensor + "' among the " + std::to_string(tensors.size()) +
                 " checked (" + names + (tensors.size() > 6 ? ", ..." : "") + ")");
    }
  }
  const ReplicaTensor& t = tensors[i];
  const size_t width = dataTypeSize(t.dtype);
  if (f.element >= t.count()) {
    return bad("element " + std::to_string(f.element) + " is past the end of '" + t.name + "' (" +
               std::to_string(t.count()) + " elements)");
  }
  if (f.bit >= 8 * width) {
    return bad("bit " + std::to_string(f.bit) + " is past the " + std::to_string(8 * width) +
               "-bit elements of '" + t.name + "'");
  }
  *index = i;
  *byteOffset = static_cast<size_t>(f.element) * width + f.bit / 8;
  *mask = static_cast<uint8_t>(1u << (f.bit % 8));
  return Status::ok();
}

}  // namespace ringguard
