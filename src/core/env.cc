#include "ringguard/core/env.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ringguard/core/log.h"
#include "ringguard/core/status.h"

extern char** environ;

namespace ringguard {

const std::vector<EnvVar>& envRegistry() {
  // Defaults here are documentation; the authoritative defaults are the Options member initializers, and
  // test_options checks that the two agree.
  static const std::vector<EnvVar> registry = {
      {"RINGGUARD_SLICE_BYTES", "0",
       "Payload bytes per slice, the unit that is checksummed and retransmitted (rounded down to the "
       "element size). 0: the transport's default, 1 MiB (MPI, c10d), 4 MiB (host-staged) or 128 MiB "
       "(NCCL, whose per-slice launch cost is high; docs/PERFORMANCE.md). At most 1073741824 (1 GiB)."},
      {"RINGGUARD_SLOTS", "0",
       "Receive slots per link (slices in flight); 2 is double buffering. In [2, 64]. 0: the transport's "
       "default, 2 (MPI, c10d) or 4 (NCCL, host-staged)."},
      {"RINGGUARD_NAN_CHECK", "off",
       "What a collective does when its input holds NaN or +-Inf (floating dtypes): off (no scan), warn "
       "(log rank, collective and first index, then run), skip (every rank skips the collective and leaves "
       "its output as it was; one O(log N) agreement round per collective), error (the collective fails on "
       "every rank, naming the rank and the first index). Never ends the CUDA context. Every rank must use "
       "the same mode (checked when the communicator is made). docs/GUARD.md."},
      {"RINGGUARD_MAX_RETRIES", "3",
       "Repair rounds for a slice that fails verification before the collective returns a Corruption "
       "error. In [0, 100]."},
      {"RINGGUARD_TIMEOUT_MS", "60000",
       "Milliseconds without progress before the collective returns a Timeout error. In [1, 31536000000] "
       "(a year)."},
      {"RINGGUARD_LOG_LEVEL", "warn",
       "spdlog level of the `ringguard` logger: trace, debug, info, warn (or warning), error (or err), "
       "critical or off."},
      {"RINGGUARD_LOG_SUBSYS", "all",
       "Subsystems whose messages are logged, like NCCL_DEBUG_SUBSYS: all, or a comma-separated list of "
       "core, ring, transport, control, runtime, guard, policy, telemetry, cuda, torch; a leading ^ "
       "excludes the listed ones instead. Messages at warn level and above are always logged."},
      {"RINGGUARD_TIMELINE", "",
       "Path prefix of the per-rank timeline: each rank writes <prefix>.<rank>.json, a Chrome trace "
       "(Perfetto's JSON importer reads it) of collectives, ring steps, repair rounds, detections, "
       "retransmissions, control exchanges, guard and downgrade events. Empty: no timeline."},
      {"RINGGUARD_SUMMARY", "",
       "Path prefix of the per-rank run summary: each communicator writes <prefix>.<rank>.json when it is "
       "destroyed (collectives by kind, bytes, slices verified, detections, retransmissions, repair rounds, "
       "time in verification). Empty: the summary is only logged at info level."},
      {"RINGGUARD_TIMELINE_EVENTS", "1048576",
       "Capacity in events of each rank's timeline buffer (about 48 bytes each); events past it are counted "
       "as dropped, never block. In [1024, 268435456]."},
      {"RINGGUARD_FAULT_MODE", "bitflip",
       "How an injected fault damages a slice in transit: bitflip|multibit|burst|garbage|trailer|"
       "retransmit|delay, or control: one bit of a control frame of a collective (fingerprint, verdict, "
       "error), where RINGGUARD_FAULT_SCHEDULE entries read as frame:tag:sender:receiver (frame: the "
       "frame's number on that (sender, receiver, tag), from 0; tags: 1 fingerprint, 2 verdict, 3 error)."},
      {"RINGGUARD_FAULT_PROB", "0",
       "Probability in [0, 1] that a slice transfer is hit by an injected fault. 0 disables random "
       "injection."},
      {"RINGGUARD_FAULT_SCHEDULE", "",
       "Exact injections as comma-separated `collective:step:slice:rank` entries (collective sequence "
       "number, ring step, slice index, receiving rank), in addition to RINGGUARD_FAULT_PROB."},
      {"RINGGUARD_FAULT_SEED", "1", "Seed of the fault injector's random choices (non-negative integer)."},
      {"RINGGUARD_FAULT_BITS", "3", "Distinct bits flipped per fault in multibit mode. In [1, 64]."},
      {"RINGGUARD_FAULT_BURST_BITS", "32",
       "Maximum length in bits of a burst in burst mode (first and last bit flipped). In [2, 32]."},
      {"RINGGUARD_FAULT_DELAY_MS", "50", "Milliseconds a slice is held back in delay mode. In [0, 600000]."},
      {"RINGGUARD_FAULT_REPEAT", "1",
       "Consecutive transfer attempts of a hit slice that are corrupted (1 = only the first); a value "
       "above RINGGUARD_MAX_RETRIES makes the corruption persistent. At least 1."},
      {"RINGGUARD_DEVICE_TRANSPORT", "auto",
       "Transport of a device communicator: auto (NCCL when built with it and no two local ranks share a "
       "GPU, staged otherwise), nccl, or staged (device <-> pinned host <-> MPI)."},
      {"RINGGUARD_CPU_TRANSPORT", "auto",
       "Transport of CPU tensors in the torch.distributed backend: auto (MPI when the process was started by "
       "mpirun and ringguard was built with MPI, else the Gloo helper), mpi, or gloo."},
      {"RINGGUARD_NCCL_LANES", "4",
       "NCCL communicators (each with a stream of its own) that consecutive slices to a peer alternate "
       "over, so their groups overlap on the GPU. In [1, 8]."},
      {"RINGGUARD_KERNEL_SMS", "0",
       "SMs' worth of resident blocks that ringguard's CRC, verify + reduce and NaN-scan kernels may fill "
       "(0: the whole device). Leaving SMs free lets NCCL's kernels run beside ours (like NCCL_MAX_CTAS)."},
      {"RINGGUARD_POOL_RELEASE_BYTES", "268435456",
       "Release threshold of the device memory pool: freed memory it may keep cached across "
       "synchronisations; the rest goes back to the driver (and so to PyTorch's allocator). In [0, 2^48]."},
      {"RINGGUARD_TELEMETRY_INTERVAL_MS", "20",
       "Milliseconds between two samples of the telemetry sampler thread (docs/DOWNGRADE.md). NVML's 32-bit "
       "PCIe byte counters wrap every ~70 ms at 58 GB/s: a rate over an interval in which the link could "
       "have moved "
       "2^32 bytes at its maximum rate is reported missing. In [1, 60000]."},
      {"RINGGUARD_POLICY", "on",
       "on: the downgrade engine switches operator variants by its rules; off: every family stays on its "
       "first enabled variant."},
      {"RINGGUARD_POLICY_RULES", "",
       "Path of the downgrade rules file (JSON, docs/DOWNGRADE.md). Empty: the built-in default rules "
       "(share/ringguard/rules/default.json)."},
      {"RINGGUARD_POLICY_SET", "",
       "Edits of the rules applied before validation: `;`-separated `/json/pointer=value` entries, the value "
       "in JSON, e.g. `/families/attention/variants/2/when/0/enter=0.5`."},
      {"RINGGUARD_POLICY_FORCE", "",
       "Pins operator families to one variant, bypassing the rules: comma-separated `family=variant` (the "
       "variant must be in the rules)."},
  };
  return registry;
}

const char* envLookup(const char* name) {
  bool registered = false;
  for (const EnvVar& v : envRegistry()) {
    if (std::strcmp(v.name, name) == 0) {
      registered = true;
      break;
    }
  }
  // Reading an unregistered variable would make it invisible to docs/ENV.md.
  RINGGUARD_ENFORCE(registered, std::string("environment variable ") + name + " is not in the registry");
  return std::getenv(name);
}

namespace {

// RINGGUARD_* names that are not library settings: read by scripts/, the tests, the benchmarks and the Python
// package's autoload, so an unknown-variable warning about them would be noise.
constexpr const char* kToolNames[] = {"RINGGUARD_AUTOLOAD",      "RINGGUARD_BUILD_DIR",
                                      "RINGGUARD_CMAKE_ARGS",    "RINGGUARD_SKIP_INSTALL_DEPS",
                                      "RINGGUARD_GPU_BUILD_DIR", "RINGGUARD_MPIRUN_TIMEOUT",
                                      "RINGGUARD_SANITIZER_DIR"};
constexpr const char* kToolPrefixes[] = {"RINGGUARD_TEST_", "RINGGUARD_BENCH_"};

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
  for (const char* n : kToolNames) {
    if (name == n) return true;
  }
  for (const char* p : kToolPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

// Table cells must not contain a bare '|', which would start a new column.
std::string escapeCell(const char* text) {
  std::string out;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p == '|') out += '\\';
    out += *p;
  }
  return out;
}

}  // namespace

const EnvVar* findEnvVar(const std::string& name) {
  for (const EnvVar& v : envRegistry()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

std::string closestEnvName(const std::string& name) {
  std::string best;
  size_t bestDistance = std::string::npos;
  for (const EnvVar& v : envRegistry()) {
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
    if (name.rfind("RINGGUARD_", 0) != 0 || findEnvVar(name) || isToolName(name)) continue;
    out.push_back("environment variable " + name +
                  " is not a ringguard setting and is ignored (did you mean " + closestEnvName(name) +
                  "? see docs/ENV.md)");
  }
  return out;
}

void warnUnknownEnv() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& w : unknownEnvWarnings(environ)) logger()->warn("{}", w);
  });
}

std::string envMarkdown() {
  std::string md;
  md += "# Environment variables\n\n";
  md +=
      "Every `RINGGUARD_*` variable the library reads; unset variables take the default. Generated by "
      "`ringguard_envdoc` from the registry in `src/core/env.cc`: do not edit by hand.\n\n";
  md += "| Variable | Default | Description |\n";
  md += "|---|---|---|\n";
  for (const EnvVar& v : envRegistry()) {
    md += "| `";
    md += v.name;
    md += "` | ";
    if (v.defaultValue[0] == '\0') {
      md += "(empty)";
    } else {
      md += '`';
      md += escapeCell(v.defaultValue);
      md += '`';
    }
    md += " | ";
    md += escapeCell(v.description);
    md += " |\n";
  }
  return md;
}

}  // namespace ringguard
