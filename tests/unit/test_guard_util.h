#pragma once
// A small guarded "training step" over host memory for the guard's unit tests: integer-valued floats, so
// every result is exact and a replayed run can be compared bit for bit with a fault-free one.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ringguard/guard/guard.h"

namespace ringguard {
namespace guard_test {

inline GuardBuffer buf(const std::string& name, std::vector<float>& v) {
  return GuardBuffer{name, v.data(), v.size() * sizeof(float), DataType::kFloat32, MemoryKind::kHost};
}

inline std::vector<uint32_t> bitsOf(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// y = x * w + 1 (output), then w += fmod(y, 7) - 3 (state, in place): integer-valued, exact, and every step
// depends on the state the previous steps left.
struct Affine {
  std::vector<float> x, w, y;
  int bodyRuns = 0;
  int fallbackRuns = 0;

  explicit Affine(size_t n) : x(n), w(n), y(n) {
    for (size_t i = 0; i < n; ++i) w[i] = static_cast<float>(i % 5);
  }
  void feed(int step) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((step + static_cast<int>(i)) % 4);
  }
  void compute() {
    for (size_t i = 0; i < x.size(); ++i) {
      y[i] = x[i] * w[i] + 1.0f;
      w[i] += std::fmod(y[i], 7.0f) - 3.0f;  // exact for integers; NaN in, NaN out (no UB cast)
    }
  }
  GuardedOp op(const std::string& name = "affine") {
    GuardedOp o;
    o.name = name;
    o.inputs = {buf("x", x)};
    o.state = {buf("w", w)};
    o.outputs = {buf("y", y)};
    o.body = [this] {
      ++bodyRuns;
      compute();
      return Status::ok();
    };
    o.fallback = [this] {
      ++fallbackRuns;
      compute();
      return Status::ok();
    };
    return o;
  }
};

inline GuardPolicy policyWith(GuardAction onDetect, int replays = 2,
                              GuardAction escalation = GuardAction::kRaise) {
  GuardPolicy p;
  p.onDetect = onDetect;
  p.replays = replays;
  p.escalation = escalation;
  return p;
}

inline std::unique_ptr<Guard> hostGuard(const GuardPolicy& p) {
  return std::make_unique<Guard>(p, makeHostGuardBackend(), nullptr);
}

inline GuardFaultRule rule(const std::string& op, int64_t call, int attempts = 1,
                           FaultValue v = FaultValue::kNaN, uint64_t element = 0) {
  GuardFaultRule r;
  r.op = op;
  r.call = call;
  r.attempts = attempts;
  r.value = v;
  r.element = element;
  return r;
}

}  // namespace guard_test
}  // namespace ringguard
