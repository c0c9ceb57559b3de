#include "core/env.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/excerpt.h"
#include "core/logging.h"
#include "ringguard/core/status.h"

extern char** environ;

namespace ringguard {

const char* envLookup(const char* name) {
  // Reading an undeclared variable would make it invisible to docs/ENV.md.
  RINGGUARD_ENFORCE(findSetting(name) != nullptr,
                    std::string("environment variable ") + name + " is not in the registry");
  return std::getenv(name);
}

const std::vector<ToolEnvName>& toolEnvNames() {
  // Not read by the library, so an unknown-variable warning about them would be noise.
  static const std::vector<ToolEnvName> names = {
      {"RINGGUARD_AUTOLOAD", "Python package",
       "0, false, off or no: the `torch.backends` entry point does not register the `ringguard` backend "
       "when torch is imported (docs/TORCH.md); any other value or unset: it does. `ringguard-run` exports "
       "1."},
      {"RINGGUARD_BUILD_DIR", "scripts/run_tests.sh", "Build directory to test (default `build`)."},
      {"RINGGUARD_CMAKE_ARGS", "scripts/build.sh", "Extra cmake arguments, whitespace-separated."},
      {"RINGGUARD_SKIP_INSTALL_DEPS", "scripts/install_deps.sh", "1: install nothing."},
      {"RINGGUARD_SKIP_SANITIZERS", "scripts/run_extended_tests.sh",
       "1: skip the ASan + UBSan and TSan runs (scripts/run_sanitizers.sh) there; CI never sets it."},
      {"RINGGUARD_NO_CCACHE", "scripts/compiler_cache.sh", "1: compile without ccache."},
      {"RINGGUARD_GPU_BUILD_DIR", "scripts/gpu_*.sh",
       "Build directory of the GPU checks (default `build-gpu`, `build-engine`, ...)."},
      {"RINGGUARD_MPIRUN_TIMEOUT", "launch/mpirun_local.sh",
       "Seconds before a local mpirun job is killed (default 600)."},
      {"RINGGUARD_SANITIZER_DIR", "scripts/run_sanitizers.sh",
       "Parent of the asan and tsan build directories (default `build-sanitizers`)."},
      {"RINGGUARD_FUZZ_*", "scripts/run_fuzz.sh",
       "Fuzzing knobs: build directory (`RINGGUARD_FUZZ_DIR`), libFuzzer arguments, jobs, corpus merge."},
      {"RINGGUARD_SOAK_*", "scripts/run_soak.sh",
       "Fault soak knobs: build directory (`RINGGUARD_SOAK_BUILD_DIR`, default `build-soak`), build jobs."},
      {"RINGGUARD_TEST_*", "tests", "Test knobs (sizes, output folders, expected transports, smoke runs)."},
      {"RINGGUARD_BENCH_*", "bench", "Benchmark knobs (device, iterations, NCCL comparison)."},
  };
  return names;
}

namespace {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool isToolName(const std::string& name) {
  for (const ToolEnvName& t : toolEnvNames()) {
    const std::string n = t.name;
    const bool prefix = !n.empty() && n.back() == '*';
    if (prefix ? name.rfind(n.substr(0, n.size() - 1), 0) == 0 : name == n) return true;
  }
  return false;
}

}  // namespace

Status checkSettingMap(const std::map<std::string, std::string>& settings) {
  for (const auto& [name, value] : settings) {
    if (const size_t at = name.find('\0'); at != std::string::npos) {
      return Status(StatusCode::kInvalidArgument,
                    "setting name '" + excerpt(name) + "' holds a NUL byte at offset " + std::to_string(at));
    }
    if (const size_t at = value.find('\0'); at != std::string::npos) {
      return Status(StatusCode::kInvalidArgument, name + "='" + excerpt(value) +
                                                      "': holds a NUL byte at offset " + std::to_string(at) +
                                                      " (nothing after it would be read)");
    }
  }
  return Status::ok();
}

std::string closestEnvName(const std::string& name) {
  std::string best;
  size_t bestDistance = std::string::npos;
  for (const Setting& v : settings()) {
    const size_t d = editDistance(name, v.name);
    if (d < bestDistance) {
      bestDistance = d;
      best = v.name;
    }
  }
  return best;
}

std::vector<std::string> unknownEnvWarnings(char** env) {
  std::vector<std::string> out;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    const std::string name = eq ? std::string(*e, size_t(eq - *e)) : std::string(*e);
    if (name.rfind("RINGGUARD_", 0) != 0 || findSetting(name) || isToolName(name)) continue;
    out.push_back("environment variable " + name +
                  " is not a ringguard setting and is ignored (did you mean " + closestEnvName(name) +
                  "? see docs/ENV.md)");
  }
  return out;
}

void warnUnknownEnv() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& w : unknownEnvWarnings(environ)) logWarn(Subsys::kCore, "{}", w);
  });
}

}  // namespace ringguard
