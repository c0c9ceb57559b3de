#include "ringguard/core/settings.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "core/excerpt.h"
#include "ringguard/core/non_finite.h"
#include "ringguard/core/options.h"

namespace ringguard {

namespace {

// Builds one declaration; the table below reads as one line of facts per setting.
struct Decl {
  Setting s;
  // A per-group setting: an Options or DeviceSettings field, and ringguard.Options.`field` in Python.
  Decl& group(const char* field, const char* pythonType = nullptr) {
    s.scope = SettingScope::kGroup;
    s.pythonField = field;
    s.pythonType = pythonType;
    return *this;
  }
  Decl& zeroMeansDefault() {
    s.zeroMeansDefault = true;
    return *this;
  }
  operator Setting() const { return s; }  // NOLINT(google-explicit-constructor): the table's entries
};

Decl declare(const char* name, SettingKind kind, const char* defaultValue, const char* summary) {
  Decl d;
  d.s.name = name;
  d.s.kind = kind;
  d.s.scope = SettingScope::kProcess;
  d.s.defaultValue = defaultValue;
  d.s.summary = summary;
  d.s.pythonField = nullptr;
  d.s.pythonType = nullptr;
  return d;
}
Decl unsignedSetting(const char* name, const char* defaultValue, uint64_t lo, uint64_t hi,
                     const char* summary) {
  Decl d = declare(name, SettingKind::kUnsigned, defaultValue, summary);
  d.s.lo = lo;
  d.s.hi = hi;
  return d;
}
Decl realSetting(const char* name, const char* defaultValue, double lo, double hi, const char* summary) {
  Decl d = declare(name, SettingKind::kReal, defaultValue, summary);
  d.s.realLo = lo;
  d.s.realHi = hi;
  return d;
}
Decl choiceSetting(const char* name, const char* defaultValue, std::vector<SettingChoice> choices,
                   const char* summary) {
  Decl d = declare(name, SettingKind::kChoice, defaultValue, summary);
  d.s.choices = std::move(choices);
  return d;
}
Decl listSetting(const char* name, const char* defaultValue, std::vector<SettingChoice> choices,
                 const char* summary) {
  Decl d = choiceSetting(name, defaultValue, std::move(choices), summary);
  d.s.kind = SettingKind::kList;
  return d;
}
Decl textSetting(const char* name, const char* summary) {
  return declare(name, SettingKind::kText, "", summary);
}

// The names of an enum's values 0, 1, ... in order (the enum's own name function is the one list of them),
// so that a choice's index is the enum value.
template <typename E>
std::vector<SettingChoice> enumChoices(const char* (*nameOf)(E), int count) {
  std::vector<SettingChoice> out;
  for (int i = 0; i < count; ++i) out.push_back({nameOf(E(i)), nullptr});
  return out;
}

std::string decimal(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string choiceList(const Setting& s) {
  std::string out;
  for (const SettingChoice& c : s.choices) {
    if (!out.empty()) out += ", ";
    out += c.name;
    if (c.alias != nullptr) out += std::string(" (or ") + c.alias + ")";
  }
  return out;
}

std::string interval(const Setting& s) {
  return s.kind == SettingKind::kReal ? "[" + decimal(s.realLo) + ", " + decimal(s.realHi) + "]"
                                      : "[" + std::to_string(s.lo) + ", " + std::to_string(s.hi) + "]";
}

// The sentence the description ends with.
std::string rangeSentence(const Setting& s) {
  switch (s.kind) {
    case SettingKind::kUnsigned:
      return std::string(s.zeroMeansDefault ? "0 or in " : "In ") + interval(s) + ".";
    case SettingKind::kReal:
      return "In " + settingRange(s) + ".";
    case SettingKind::kChoice:
      return "One of: " + choiceList(s) + ".";
    case SettingKind::kList:
      return "A comma-separated list of: " + choiceList(s) + "; a leading ^ selects all but those.";
    case SettingKind::kSchedule:
      return "Comma-separated collective:step:slice:rank entries (non-negative integers).";
    case SettingKind::kText:
      return "";
  }
  return "";
}

std::vector<Setting> declarations() {
  std::vector<Setting> table = {
      // Per group: Options, DeviceSettings and the c10d backend's CPU transport.
      unsignedSetting("RINGGUARD_SLICE_BYTES", "0", 0, Options::kMaxSliceBytes,
                      "Payload bytes per slice, the unit that is checksummed and retransmitted (rounded down "
                      "to the element size). 0: the transport's default, 1 MiB (MPI, c10d), 4 MiB "
                      "(host-staged) or 128 MiB (NCCL, whose per-slice launch cost is high; "
                      "docs/PERFORMANCE.md).")
          .group("slice_bytes"),
      unsignedSetting("RINGGUARD_SLOTS", "0", 2, 64,
                      "Receive slots per link (slices in flight); 2 is double buffering. 0: the transport's "
                      "default, 2 (MPI, c10d) or 4 (NCCL, host-staged).")
          .zeroMeansDefault()
          .group("slots"),
      unsignedSetting("RINGGUARD_MAX_RETRIES", "3", 0, 100,
                      "Repair rounds for a slice that fails verification before the collective returns a "
                      "Corruption error.")
          .group("max_retries"),
      unsignedSetting(
          "RINGGUARD_TIMEOUT_MS", "60000", 1, uint64_t(Options::kMaxTimeoutMs),
          "Milliseconds without progress before the collective returns a Timeout error (at most a "
          "year). In Python a `datetime.timedelta`; the process group's timeout when unset.")
          .group("timeout", "timedelta"),
      choiceSetting("RINGGUARD_LOG_LEVEL", "warn",
                    {{"trace", nullptr},
                     {"debug", nullptr},
                     {"info", nullptr},
                     {"warn", "warning"},
                     {"error", "err"},
                     {"critical", nullptr},
                     {"off", nullptr}},
                    "spdlog level of the `ringguard` logger.")
          .group("log_level"),
      choiceSetting(
          "RINGGUARD_NAN_CHECK", "off", enumChoices(nanCheckName, 4),
          "What a collective does when its input holds NaN or +-Inf (floating dtypes, float8 and complex "
          "included): off (no scan), warn (log rank, collective and first index, then run), skip (every "
          "rank skips the collective and leaves its output as it was; one O(log N) agreement round per "
          "collective), error (the collective fails on every rank, naming the rank and the first index). "
          "Never ends the CUDA context. Every rank must use the same mode (checked when the communicator is "
          "made). The scan is a host step: on a device communicator anything but off keeps every collective "
          "off the peer windows (auto) or refuses RINGGUARD_DEVICE_TRANSPORT=peer. docs/GUARD.md.")
          .group("nan_check"),
      choiceSetting("RINGGUARD_FAULT_MODE", "bitflip", enumChoices(faultModeName, 8),
                    "How an injected fault damages a slice in transit: one bit (bitflip), "
                    "RINGGUARD_FAULT_BITS bits (multibit), a burst of up to RINGGUARD_FAULT_BURST_BITS bits "
                    "(burst), the whole payload (garbage), one bit of the trailer (trailer), the first "
                    "transfer and the first retransmission (retransmit), RINGGUARD_FAULT_DELAY_MS late "
                    "(delay); or control: one bit of a control frame of a collective (fingerprint, verdict, "
                    "error), where RINGGUARD_FAULT_SCHEDULE entries read as frame:tag:sender:receiver "
                    "(frame: the frame's number on that (sender, receiver, tag), from 0; tags: 1 "
                    "fingerprint, 2 verdict, 3 error).")
          .group("fault_mode"),
      realSetting("RINGGUARD_FAULT_PROB", "0", 0.0, 1.0,
                  "Probability that a slice transfer is hit by an injected fault. 0 disables random "
                  "injection. A decimal number beyond a double (1e-400, 1e400) is refused as underflowing or "
                  "overflowing it.")
          .group("fault_prob"),
      declare("RINGGUARD_FAULT_SCHEDULE", SettingKind::kSchedule, "",
              "Exact injections, in addition to RINGGUARD_FAULT_PROB: the transfer of slice `slice` at ring "
              "step `step` of collective number `collective` (the communicator's sequence number, from 0) "
              "into receiving rank `rank`. In Python also a list of 4-tuples. The peer windows' kernels do "
              "not apply it: a schedule on any rank keeps RINGGUARD_DEVICE_TRANSPORT=auto on the host-driven "
              "path, and peer refuses it. Compare such a run against a fault-free run of that path "
              "(RINGGUARD_DEVICE_TRANSPORT=staged, or nccl where auto picks NCCL): at 3 ranks and more the "
              "windows add in another order.")
          .group("fault_schedule"),
      unsignedSetting("RINGGUARD_FAULT_SEED", "1", 0, UINT64_MAX,
                      "Seed of the fault injector's random choices.")
          .group("fault_seed"),
      unsignedSetting("RINGGUARD_FAULT_BITS", "3", 1, 64, "Distinct bits flipped per fault in multibit mode.")
          .group("fault_bits"),
      unsignedSetting("RINGGUARD_FAULT_BURST_BITS", "32", 2, 32,
                      "Maximum length in bits of a burst in burst mode (first and last bit flipped).")
          .group("fault_burst_bits"),
      unsignedSetting("RINGGUARD_FAULT_DELAY_MS", "50", 0, 600000,
                      "Milliseconds a slice is held back in delay mode.")
          .group("fault_delay_ms"),
      unsignedSetting(
          "RINGGUARD_FAULT_REPEAT", "1", 1, INT_MAX,
          "Consecutive transfer attempts of a hit slice that are corrupted (1 = only the first); a "
          "value above RINGGUARD_MAX_RETRIES makes the corruption persistent.")
          .group("fault_repeat"),
      choiceSetting(
          "RINGGUARD_DEVICE_TRANSPORT", "auto",
          {{"auto", nullptr}, {"nccl", nullptr}, {"staged", nullptr}, {"peer", nullptr}},
          "Transport of a device communicator: auto (NCCL when built with it and no two local ranks "
          "share a GPU, staged otherwise; and when every rank is on one host, the peer-window path for "
          "what it takes (not with RINGGUARD_NAN_CHECK on), or a warning naming why the windows could not be "
          "mapped), nccl, staged (device <-> pinned host <-> MPI), or peer (as auto, but an error where the "
          "windows cannot be mapped or a NaN check is on, and send/recv and the split all-to-all, which can "
          "fail on the windows where the pipeline succeeds, take the windows too; docs/GPU.md).")
          .group("device_transport"),
      choiceSetting(
          "RINGGUARD_CPU_TRANSPORT", "auto",
          {{"auto", nullptr}, {"mpi", nullptr}, {"shm", nullptr}, {"gloo", nullptr}},
          "Transport of host memory between ranks. auto: shared memory for the data when every rank of "
          "the group can map every other's segment (the ranks of one host), over MPI under mpirun (C++ "
          "jobs, and the torch backend's CPU tensors when ringguard was built with MPI) or else the torch "
          "backend's Gloo helper, which keep what shared memory cannot tell (a peer that left); otherwise "
          "MPI or the Gloo helper alone. shm: the same, but an error where the ranks cannot share memory "
          "(in the torch backend always over the Gloo helper). mpi: MPI alone (mpirun jobs). gloo: the Gloo "
          "helper alone (torch backend only). Every rank of a group must set the same.")
          .group("cpu_transport"),
      unsignedSetting("RINGGUARD_SHM_RING_BYTES", "2162688", 4096, uint64_t(1) << 32,
                      "Bytes of each shared-memory ring (one per ordered pair of ranks, in the receiver's "
                      "segment under /dev/shm): the default holds two default slices with their trailers, so "
                      "a sender rarely waits for its reader; a longer message streams through.")
          .group("shm_ring_bytes"),
      unsignedSetting(
          "RINGGUARD_SHM_WINDOW_BYTES", "262144", 0, uint64_t(1) << 30,
          "Payload bytes of each half of a rank's shared-memory window (two halves, in its segment "
          "under /dev/shm): a collective of host memory whose bytes one rank publishes fit it "
          "runs the one-sided protocol (no control frame when nothing fails); a larger one, or "
          "every one with 0, the two-sided ring. Send/recv messages up to 64 KiB (or the half, if "
          "smaller) travel in a slot per peer after the halves. Every rank of a group must set the same.")
          .group("shm_window_bytes"),
      unsignedSetting(
          "RINGGUARD_SHM_SINGLE_COPY_BYTES", "65536", 0, uint64_t(1) << 40,
          "Send/recv messages of at least this many bytes, and one-sided collective blocks (all-gather, "
          "broadcast, all-to-all) of at least twice it, are read single-copy: the reader copies them "
          "straight "
          "from the publisher's buffer (Linux process_vm_readv) and checks their CRC, instead of the "
          "publisher copying them into its shared-memory window first. Used only where every rank of the "
          "group can read every other's memory (checked at setup); otherwise, or with 0, every payload is "
          "copied through the windows. Unset, the default holds only where every rank of the group can have "
          "a core of its own (where ranks share cores, copying through the windows is faster), and drops to "
          "8192 where every rank measured, at setup, the kernel's copy of 64 KiB at less than 3x a memcpy "
          "(docs/design/protocol.md, \"Single-copy read\").")
          .group("shm_single_copy_bytes"),
      unsignedSetting("RINGGUARD_POOL_RELEASE_BYTES", "268435456", 0, uint64_t(1) << 48,
                      "Release threshold of the device memory pool: freed memory it may keep cached across "
                      "synchronisations; the rest goes back to the driver (and so to PyTorch's allocator).")
          .group("pool_release_bytes"),
      unsignedSetting("RINGGUARD_PEER_BYTES", "33554432", 1024, uint64_t(1) << 34,
                      "Payload bytes per collective of the peer-window path (device communicators of the "
                      "ranks of one host); each rank maps two halves of it per communicator, and larger "
                      "collectives take the host-driven path.")
          .group("peer_bytes"),
      unsignedSetting(
          "RINGGUARD_PEER_TWO_SHOT_BYTES", "4194304", 0, uint64_t(1) << 34,
          "Allreduces of the peer-window path from this many bytes on take the two-shot kernel "
          "(each rank reduces a share, then reads the others' results) instead of the one-shot "
          "(every rank reads every rank's whole input); the bits are the same. Every rank must set "
          "the same. The default is where the two-shot began to win on an H100 (2 processes "
          "level at 4 MiB, 4 processes 0.72x the one-shot's time; at 1 MiB the one-shot was "
          "faster at both).")
          .group("peer_two_shot_bytes"),
      unsignedSetting(
          "RINGGUARD_PEER_ARRIVAL_BYTES", "1048576", 0, uint64_t(1) << 34,
          "Collectives of the peer-window path that move more than this many bytes per rank (an allreduce's "
          "or broadcast's count, an all-gather's send, a reduce-scatter's or all-to-all's send) launch a "
          "one-block kernel that waits for every rank's arrival before their grid, so a rank that comes "
          "early holds one block, not a share of the GPU's SMs, while its peers still compute (DDP's bucket "
          "all-reduces, ranks sharing a GPU). It costs each such call a few microseconds (a second kernel), "
          "so the default leaves calls of up to 1 MiB without it; a value at or above RINGGUARD_PEER_BYTES "
          "turns it off. Ranks may differ.")
          .group("peer_arrival_bytes"),
      unsignedSetting(
          "RINGGUARD_PEER_P2P_BYTES", "1048576", 0, uint64_t(1) << 34,
          "Payload bytes per slot of the peer-window path's send/recv channels: each rank maps two "
          "slots per destination (rounded up to whole KiB), and a larger message streams through "
          "them in rounds. 0 leaves send/recv on the host-driven path. Used only with "
          "RINGGUARD_DEVICE_TRANSPORT=peer (auto leaves send/recv to the host-driven path), and every rank "
          "must set the same.")
          .group("peer_p2p_bytes"),
      choiceSetting("RINGGUARD_PEER_HANDLES", "auto", {{"auto", nullptr}, {"vmm", nullptr}, {"ipc", nullptr}},
                    "How the peer-window path shares its device windows between the ranks' processes: vmm "
                    "(CUDA VMM allocations whose file descriptors move with pidfd_getfd, which needs the "
                    "same user and ptrace access), ipc (the legacy CUDA IPC handles), or auto (vmm, and ipc "
                    "on every rank, with a warning, when any rank cannot). Every rank must set the same.")
          .group("peer_handles"),
      unsignedSetting("RINGGUARD_NCCL_LANES", "4", 1, 8,
                      "NCCL communicators (each with a stream of its own) that consecutive slices to a peer "
                      "alternate over, so their groups overlap on the GPU.")
          .group("nccl_lanes"),

      // Process-wide: read once, by the CUDA layer, logging and tracing, telemetry and the policy engine.
      unsignedSetting(
          "RINGGUARD_KERNEL_SMS", "0", 0, 100000,
          "SMs' worth of resident blocks that ringguard's CRC, verify + reduce and NaN-scan kernels "
          "may fill (0: the whole device). Leaving SMs free lets NCCL's kernels run beside ours "
          "(like NCCL_MAX_CTAS)."),
      listSetting("RINGGUARD_LOG_SUBSYS", "all",
                  {{"all", nullptr},
                   {"core", nullptr},
                   {"ring", nullptr},
                   {"transport", nullptr},
                   {"control", nullptr},
                   {"runtime", nullptr},
                   {"guard", nullptr},
                   {"policy", nullptr},
                   {"telemetry", nullptr},
                   {"cuda", nullptr},
                   {"torch", nullptr}},
                  "Subsystems whose messages are logged, like NCCL_DEBUG_SUBSYS (all: every subsystem). "
                  "Messages at warn level and above are always logged."),
      textSetting(
          "RINGGUARD_TIMELINE",
          "Path prefix of the per-rank timeline: each rank writes <prefix>.<rank>.json, a Chrome trace "
          "(Perfetto's JSON importer reads it) of collectives, ring steps, repair rounds, detections, "
          "retransmissions, control exchanges, guard and downgrade events. Empty: no timeline."),
      textSetting(
          "RINGGUARD_SUMMARY",
          "Path prefix of the per-rank run summary: each communicator writes <prefix>.<rank>.json when "
          "it is destroyed (collectives by kind, bytes, slices verified, detections, retransmissions, "
          "repair rounds, time in verification). Empty: the summary is only logged at info level."),
      unsignedSetting(
          "RINGGUARD_TIMELINE_EVENTS", "262144", 1024, 268435456,
          "Capacity in events of each process's timeline buffer, allocated when RINGGUARD_TIMELINE is set "
          "(88 bytes an event: 22 MiB at the default); events past it are counted as dropped, never "
          "block."),
      unsignedSetting(
          "RINGGUARD_STAGED_CHUNK_BYTES", "4194304", 16, uint64_t(1) << 30,
          "Chunk size of the all-gather and the allreduce staged through pinned host memory (the "
          "staged_chunked variants of the all_gather and all_reduce families, docs/DOWNGRADE.md), rounded "
          "down to whole elements: each chunk is copied to the host, all-gathered or allreduced by the "
          "group's host communicator and copied back, while the copies of the next and previous chunks "
          "run. Pinned memory held: 2 x (ranks + 1) chunks (all-gather), 4 chunks (allreduce)."),
      unsignedSetting(
          "RINGGUARD_TELEMETRY_INTERVAL_MS", "20", 1, 60000,
          "Milliseconds between two samples of the telemetry sampler thread (docs/DOWNGRADE.md). "
          "NVML's 32-bit PCIe byte counters wrap every ~70 ms at 58 GB/s: a rate over an interval "
          "in which the link could have moved 2^32 bytes at its maximum rate is reported missing."),
      choiceSetting(
          "RINGGUARD_POLICY", "on", {{"on", "1"}, {"off", "0"}},
          "on: the downgrade engine switches operator variants by its rules; off: every family stays "
          "on its first enabled variant."),
      textSetting(
          "RINGGUARD_REPLICA_FAULT",
          "Fault injection of the replica check (docs/REPLICAS.md): flips one bit of one element of one "
          "checked tensor on one rank of the replica group after an optimizer step, "
          "`rank=R,step=S,tensor=NAME|#INDEX[,element=E][,bit=B][,repeat=N]` (steps from 0; repeat: steps "
          "hit from S on, a large value is a persistently faulty device). Read when a ReplicaCheck is made; "
          "Python's set_fault(replica=...) sets it for the checks made afterwards. Empty: off."),
      textSetting(
          "RINGGUARD_POLICY_RULES",
          "Path of the downgrade rules file (JSON, docs/DOWNGRADE.md). Empty: the built-in default "
          "rules (share/ringguard/rules/default.json). Only a regular file is read (a directory, FIFO "
          "or device is refused without opening it for a blocking read), of at most 1 MiB, in UTF-8, "
          "nested at most 32 deep, with no NUL byte and no key twice in an object."),
      textSetting(
          "RINGGUARD_POLICY_SET",
          "Edits of the rules applied before validation: `;`-separated `/json/pointer=value` entries, "
          "the value in JSON, e.g. `/families/attention/variants/2/when/0/enter=0.5`. Each value within "
          "the rules file's limits (RINGGUARD_POLICY_RULES)."),
      textSetting("RINGGUARD_POLICY_FORCE",
                  "Pins operator families to one variant, bypassing the rules: comma-separated "
                  "`family=variant` (the variant must be in the rules; each family at most once)."),
  };
  for (Setting& s : table) {
    const std::string range = rangeSentence(s);
    s.description = range.empty() ? s.summary : std::string(s.summary) + " " + range;
  }
  return table;
}

Status badValue(const char* name, const std::string& value, const std::string& expected) {
  return Status(StatusCode::kInvalidArgument, std::string(name) + "='" + excerpt(value) + "': " + expected);
}

// Whole-string unsigned parse: digits only.
bool parseDigits(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// The unsigned kind: on failure says whether the text is not a number, too large, or out of `range`.
Status parseUnsignedText(const char* name, const std::string& s, uint64_t lo, uint64_t hi, bool zeroOk,
                         const std::string& range, uint64_t* out) {
  uint64_t v = 0;
  if (!parseDigits(s, &v)) {
    const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    return badValue(
        name, s,
        std::string(digits ? "too large" : "not a non-negative decimal integer") + ": expected " + range);
  }
  if (!(zeroOk && v == 0) && (v < lo || v > hi)) return badValue(name, s, "out of range: expected " + range);
  *out = v;
  return Status::ok();
}

Status parseUnsignedText(const Setting& s, const std::string& text, uint64_t* out) {
  return parseUnsignedText(s.name, text, s.lo, s.hi, s.zeroMeansDefault, settingRange(s), out);
}

Status parseRealText(const Setting& s, const std::string& text, double* out) {
  double v = 0.0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (!text.empty() && ec == std::errc::result_out_of_range && ptr == end) {
    // A decimal number all the same: say which way it falls out of a double ("1e-400" is not zero).
    const bool tiny = std::fabs(std::strtod(text.c_str(), nullptr)) < 1.0;
    return badValue(
        s.name, text,
        std::string(tiny ? "underflows a double (below 2.2e-308; write 0 for none)" : "overflows a double") +
            ": expected " + settingRange(s));
  }
  if (text.empty() || ec != std::errc() || ptr != end) {
    return badValue(s.name, text, "not a decimal number: expected " + settingRange(s));
  }
  if (!inSettingRange(s, v)) return badValue(s.name, text, "out of range: expected " + settingRange(s));
  *out = v;
  return Status::ok();
}

Status checkListText(const Setting& s, const std::string& text) {
  const std::string items = !text.empty() && text[0] == '^' ? text.substr(1) : text;
  size_t begin = 0;
  while (true) {
    const size_t at = items.find(',', begin);
    const std::string item = items.substr(begin, at == std::string::npos ? std::string::npos : at - begin);
    if (settingChoiceIndex(s, item) < 0) {
      return badValue(s.name, text, "bad entry '" + item + "': expected " + settingRange(s));
    }
    if (at == std::string::npos) return Status::ok();
    begin = at + 1;
  }
}

const Setting& declaredOfKind(const char* name, std::initializer_list<SettingKind> kinds) {
  const Setting& s = declaredSetting(name);
  bool match = false;
  for (SettingKind k : kinds) match = match || s.kind == k;
  RINGGUARD_ENFORCE(match, std::string("setting ") + name + " is of kind " + settingKindName(s.kind));
  return s;
}

const char* valueOrDefault(const Setting& s, const SettingLookup& lookup) {
  const char* v = lookup(s.name);
  return v != nullptr ? v : s.defaultValue;
}

}  // namespace

const char* settingKindName(SettingKind kind) {
  switch (kind) {
    case SettingKind::kUnsigned:
      return "unsigned";
    case SettingKind::kReal:
      return "real";
    case SettingKind::kChoice:
      return "choice";
    case SettingKind::kList:
      return "list";
    case SettingKind::kText:
      return "text";
    case SettingKind::kSchedule:
      return "schedule";
  }
  return "invalid";
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = declarations();
  return table;
}

const Setting* findSetting(const std::string& name) {
  for (const Setting& s : settings()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

const Setting& declaredSetting(const char* name) {
  const Setting* s = findSetting(name);
  RINGGUARD_ENFORCE(s != nullptr, std::string("setting ") + name + " is not in the registry");
  return *s;
}

std::string settingRange(const Setting& s) {
  switch (s.kind) {
    case SettingKind::kUnsigned:
      return s.zeroMeansDefault ? "0 or " + interval(s) : interval(s);
    case SettingKind::kReal:
      return interval(s);
    case SettingKind::kChoice:
      return "one of " + choiceList(s);
    case SettingKind::kList:
      return "comma-separated " + choiceList(s) + ", optionally after ^ (all but those)";
    case SettingKind::kSchedule:
      return "collective:step:slice:rank (non-negative integers), entries separated by ','";
    case SettingKind::kText:
      return "";
  }
  return "";
}

bool inSettingRange(const Setting& s, uint64_t value) {
  RINGGUARD_ENFORCE(s.kind == SettingKind::kUnsigned, std::string(s.name) + " has no integer range");
  return (s.zeroMeansDefault && value == 0) || (value >= s.lo && value <= s.hi);
}

bool inSettingRange(const Setting& s, int64_t value) {
  return value >= 0 && inSettingRange(s, uint64_t(value));
}

bool inSettingRange(const Setting& s, double value) {
  RINGGUARD_ENFORCE(s.kind == SettingKind::kReal, std::string(s.name) + " has no real range");
  return value >= s.realLo && value <= s.realHi;
}

int settingChoiceIndex(const Setting& s, const std::string& text) {
  for (size_t i = 0; i < s.choices.size(); ++i) {
    const SettingChoice& c = s.choices[i];
    if (text == c.name || (c.alias != nullptr && text == c.alias)) return int(i);
  }
  return -1;
}

Status checkSetting(const Setting& s, const char* text) {
  const std::string t = text == nullptr ? "" : text;
  switch (s.kind) {
    case SettingKind::kUnsigned: {
      uint64_t v = 0;
      return parseUnsignedText(s, t, &v);
    }
    case SettingKind::kReal: {
      double v = 0.0;
      return parseRealText(s, t, &v);
    }
    case SettingKind::kChoice:
      if (settingChoiceIndex(s, t) < 0) return badValue(s.name, t, "expected " + settingRange(s));
      return Status::ok();
    case SettingKind::kList:
      return checkListText(s, t);
    case SettingKind::kSchedule: {
      std::vector<FaultScheduleEntry> entries;
      std::string why;
      if (!parseFaultSchedule(t, &entries, &why)) return badValue(s.name, t, why);
      return Status::ok();
    }
    case SettingKind::kText:
      return Status::ok();
  }
  return Status::ok();
}

Status checkSettings(const SettingLookup& lookup) {
  for (const Setting& s : settings()) {
    if (const char* v = lookup(s.name)) RINGGUARD_RETURN_IF_ERROR(checkSetting(s, v));
  }
  return Status::ok();
}

Status parseUnsignedSetting(const char* name, const char* text, uint64_t lo, uint64_t hi, uint64_t* out) {
  return parseUnsignedText(name, text == nullptr ? "" : text, lo, hi, false,
                           "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]", out);
}

Status parseSetting(const char* name, const SettingLookup& lookup, uint64_t* out) {
  const Setting& s = declaredOfKind(name, {SettingKind::kUnsigned});
  return parseUnsignedText(s, valueOrDefault(s, lookup), out);
}

Status parseSetting(const char* name, const SettingLookup& lookup, double* out) {
  const Setting& s = declaredOfKind(name, {SettingKind::kReal});
  return parseRealText(s, valueOrDefault(s, lookup), out);
}

Status parseSetting(const char* name, const SettingLookup& lookup, std::string* out) {
  const Setting& s = declaredOfKind(
      name, {SettingKind::kChoice, SettingKind::kList, SettingKind::kText, SettingKind::kSchedule});
  const char* v = valueOrDefault(s, lookup);
  RINGGUARD_RETURN_IF_ERROR(checkSetting(s, v));
  *out = v;
  return Status::ok();
}

Status parseChoiceSetting(const char* name, const SettingLookup& lookup, int* index) {
  const Setting& s = declaredOfKind(name, {SettingKind::kChoice});
  const char* v = valueOrDefault(s, lookup);
  RINGGUARD_RETURN_IF_ERROR(checkSetting(s, v));
  *index = settingChoiceIndex(s, v);
  return Status::ok();
}

namespace {

const SettingLookup& unset() {
  static const SettingLookup lookup = [](const char*) -> const char* { return nullptr; };
  return lookup;
}

void enforceDefault(const char* name, const Status& st) {
  RINGGUARD_ENFORCE(st.isOk(),
                    "the declared default of " + std::string(name) + " is invalid: " + st.message());
}

}  // namespace

uint64_t declaredUnsigned(const char* name) {
  uint64_t v = 0;
  enforceDefault(name, parseSetting(name, unset(), &v));
  return v;
}

double declaredReal(const char* name) {
  double v = 0.0;
  enforceDefault(name, parseSetting(name, unset(), &v));
  return v;
}

std::string declaredText(const char* name) {
  std::string v;
  enforceDefault(name, parseSetting(name, unset(), &v));
  return v;
}

int declaredChoice(const char* name) {
  int v = 0;
  enforceDefault(name, parseChoiceSetting(name, unset(), &v));
  return v;
}

}  // namespace ringguard
