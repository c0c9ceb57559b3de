// connectSharedMemory: the two exchanges that turn a group's host transport into a shared-memory one
// (docs/design/protocol.md, "Shared-memory transport").
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "transport/shm/cpu_sets.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_transport.h"
#include "transport/shm/stream_store_choice.h"
#include "transport/window.h"

namespace ringguard {

namespace {

using nlohmann::json;

std::vector<uint8_t> bytesOf(const json& j) {
  const std::string s = j.dump();
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Every rank's record of one exchange; a record that does not parse is this bootstrap's bug or another
// version's, named with its rank.
Status records(Bootstrap& b, const json& mine, std::vector<json>* all) {
  std::vector<std::vector<uint8_t>> raw;
  RINGGUARD_RETURN_IF_ERROR(b.allgather(bytesOf(mine), &raw));
  all->clear();
  for (size_t r = 0; r < raw.size(); ++r) {
    json j = json::parse(raw[r].begin(), raw[r].end(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("mode") || !j["mode"].is_string() || !j.contains("ok") ||
        !j["ok"].is_boolean() || !j.contains("why") || !j["why"].is_string() || !j.contains("invalid") ||
        !j["invalid"].is_string()) {
      return Status(StatusCode::kTransportError, "shared-memory setup: rank " + std::to_string(r) +
                                                     " sent a record this version cannot read");
    }
    all->push_back(std::move(j));
  }
  return Status::ok();
}

// Whether every rank can have a CPU of its own, from the CPU sets in the first records (cpu_sets.h); false
// where a record has none or one that is not a CPU mask (another version, a hostile peer).
bool everyRankHasACore(const std::vector<json>& all) {
  std::vector<std::vector<int>> cpus(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const json& rec = all[r];
    if (!rec.contains("cpus") || !rec["cpus"].is_string() ||
        !shm::parseCpuMask(rec["cpus"].get<std::string>(), &cpus[r])) {
      return false;
    }
  }
  return shm::everyRankHasACpu(cpus);
}

// The first rank whose record says it failed, or -1.
int firstFailed(const std::vector<json>& all) {
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r]["ok"].get<bool>()) return int(r);
  }
  return -1;
}

// Whether this rank can read every peer's process memory (single-copy reads of the windows): every rank
// published its pid and where its nonce lies, and a read there gives the nonce of the segment this rank
// opened. Empty with every rank's pid in *pids, else why not (no window, the setting 0 somewhere, a kernel
// that refuses: no ptrace right, Yama, another pid namespace).
std::string probeSingleCopy(const std::vector<json>& all,
                            const std::vector<std::unique_ptr<shm::Segment>>& peers, int rank,
                            std::vector<int64_t>* pids) {
  pids->assign(all.size(), 0);
  for (size_t r = 0; r < all.size(); ++r) {
    const json& rec = all[r];
    if (!rec.contains("pid") || !rec["pid"].is_number_integer() || !rec.contains("probe") ||
        !rec["probe"].is_number_unsigned()) {
      pids->clear();
      return "rank " + std::to_string(r) + " has no window or RINGGUARD_SHM_SINGLE_COPY_BYTES=0";
    }
    (*pids)[r] = rec["pid"].get<int64_t>();
    if (int(r) == rank || !peers[r]) continue;
    const Status st =
        shm::probeCrossMemory((*pids)[r], int(r), rec["probe"].get<uint64_t>(), peers[r]->nonce());
    if (!st.isOk()) {
      pids->clear();
      return "rank " + std::to_string(rank) + " cannot read rank " + std::to_string(r) +
             "'s memory: " + st.message();
    }
  }
  return "";
}

// Maps every peer's segment named in its first record (this rank's own entry skipped). Empty, or why not
// (the first peer that failed).
std::string openPeerSegments(const std::vector<json>& all, int rank, size_t windowBytes,
                             std::vector<std::unique_ptr<shm::Segment>>* peers) {
  const int size = int(all.size());
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const json& rec = all[size_t(r)];
    std::unique_ptr<shm::Segment>& peer = (*peers)[size_t(r)];
    Status st =
        rec.contains("name") && rec["name"].is_string() && rec.contains("nonce") &&
                rec["nonce"].is_number_unsigned()
            ? shm::Segment::open(rec["name"].get<std::string>(), r, size, rec["nonce"].get<uint64_t>(), &peer)
            : Status(StatusCode::kTransportError, "rank " + std::to_string(r) + " sent no segment name");
    if (st.isOk() && peer->windowBytes() != windowBytes) {
      st = Status(StatusCode::kTransportError, "its window is " + std::to_string(peer->windowBytes()) +
                                                   " bytes, expected " + std::to_string(windowBytes));
    }
    if (!st.isOk()) {
      return "rank " + std::to_string(rank) + " could not open rank " + std::to_string(r) +
             "'s segment: " + st.message();
    }
  }
  return "";
}

// Whether copies into the windows stream (stream_store_choice.h), for ranks 0 and 1 (the callers): they
// time a round trip through rank 0's window both ways, and rank 0 puts its verdict in its second record
// (`opened`). Nothing where the windows are too small for the probe's area.
void measureStreamCopies(int rank, const shm::Segment* own,
                         const std::vector<std::unique_ptr<shm::Segment>>& peers, size_t windowSetting,
                         int size, json* opened) {
  const WindowLayout layout = WindowLayout::of(windowSetting, size);
  if (layout.capacity < shm::kStreamProbeAreaBytes) return;
  const auto areaOf = [&](int r) {
    return (r == rank ? own : peers[size_t(r)].get())->window() + sizeof(WindowHeader) + layout.dataAt;
  };
  const shm::StreamStoreCost stores = shm::measureStreamStores(
      rank == 0, areaOf(0), areaOf(1), std::chrono::milliseconds(1000), std::chrono::milliseconds(50));
  if (rank != 0) return;
  if (stores.ordinaryUs > 0) {
    (*opened)["stream_copies"] = shm::streamStoresPay(stores);
    logInfo(Subsys::kTransport,
            "copies into the windows {}: a {}-byte round trip through them took {:.2f} us with ordinary "
            "stores, {:.2f} us with non-temporal ones",
            shm::streamStoresPay(stores) ? "stream" : "use ordinary stores", shm::kStreamProbeBytes,
            stores.ordinaryUs, stores.streamingUs);
  } else {
    logInfo(Subsys::kTransport,
            "copies into the windows stream (not measured: rank 1 did not answer the round trips in time)");
  }
}

// The single-copy reads every rank agreed to, from the second records: none unless every rank can read
// every other's memory (a rank that cannot reads a part published by address no other way), and the size
// this rank publishes by address from. `noSingleCopy` is this rank's own verdict (probeSingleCopy), `cost`
// its kernel-copy measurement where it made one.
void agreeSingleCopy(const std::vector<json>& all, const std::string& noSingleCopy,
                     const SharedMemoryChoice& choice, bool coresOfTheirOwn, const shm::KernelCopyCost& cost,
                     SingleCopy* singleCopy) {
  std::string why = noSingleCopy;
  for (size_t r = 0; r < all.size() && why.empty(); ++r) {
    const json& rec = all[r];
    why = rec.contains("single_copy") && rec["single_copy"].is_string()
              ? rec["single_copy"].get<std::string>()
              : "rank " + std::to_string(r) + " sent no single-copy verdict";
  }
  if (!why.empty()) {
    if (!singleCopy->pids.empty() || choice.singleCopyBytes > 0) {
      logInfo(Subsys::kTransport,
              "shared memory without single-copy reads (payloads copied through the "
              "windows): {}",
              why);
    }
    singleCopy->pids.clear();
  }
  // Where ranks share cores, copying through the windows measured faster (a 64 KiB send/recv at 3 ranks on
  // 2 cores: 22.3 us through the windows, 24.1 us single-copy): this rank then publishes nothing by address
  // unless the setting asks for it, and still reads what peers publish so. Whether they share is decided from
  // every rank's CPU set (cpu_sets.h), so ranks bound to cores of their own count as having them. Where every
  // rank measured a fast kernel copy, the default reads from smaller sizes single-copy (kernel_copy_cost.h).
  bool everyFast = !choice.singleCopySet && !singleCopy->pids.empty();
  for (size_t r = 0; r < all.size() && everyFast; ++r) {
    const json& rec = all[r];
    everyFast = rec.contains("kernel_copy_fast") && rec["kernel_copy_fast"].is_boolean() &&
                rec["kernel_copy_fast"].get<bool>();
  }
  const size_t fromBytes =
      everyFast ? std::min(choice.singleCopyBytes, shm::kFastKernelCopyFromBytes) : choice.singleCopyBytes;
  if (everyFast) {
    logInfo(
        Subsys::kTransport,
        "single-copy reads from {} bytes (collective parts from twice that): the kernel's copy of {} bytes "
        "took {:.2f} us here against {:.2f} us for memcpy, under {}x on every rank",
        fromBytes, shm::kKernelCopyProbeBytes, cost.kernelUs, cost.copyUs, shm::kFastKernelCopyRatio);
  }
  singleCopy->fromBytes = choice.singleCopySet || coresOfTheirOwn ? fromBytes : 0;
}

}  // namespace

SharedMemoryChoice readSharedMemoryChoice(const SettingLookup& lookup, const std::string& offSetting,
                                          std::chrono::milliseconds timeout) {
  SharedMemoryChoice c;
  c.offSetting = offSetting;
  c.timeout = timeout;
  c.invalid = parseSetting("RINGGUARD_CPU_TRANSPORT", lookup, &c.setting);
  if (!c.invalid.isOk()) {
    const char* text = lookup("RINGGUARD_CPU_TRANSPORT");
    c.setting = text != nullptr ? text : "";
    return c;
  }
  uint64_t ringBytes = 0;
  c.invalid = parseSetting("RINGGUARD_SHM_RING_BYTES", lookup, &ringBytes);
  uint64_t windowBytes = 0;
  if (c.invalid.isOk()) c.invalid = parseSetting("RINGGUARD_SHM_WINDOW_BYTES", lookup, &windowBytes);
  c.windowBytes = size_t(windowBytes);
  uint64_t singleCopyBytes = 0;
  if (c.invalid.isOk()) c.invalid = parseSetting("RINGGUARD_SHM_SINGLE_COPY_BYTES", lookup, &singleCopyBytes);
  c.singleCopyBytes = size_t(singleCopyBytes);
  c.singleCopySet = lookup("RINGGUARD_SHM_SINGLE_COPY_BYTES") != nullptr;
  c.mode = c.setting == offSetting ? SharedMemory::kOff
           : c.setting == "shm"    ? SharedMemory::kRequired
                                   : SharedMemory::kAuto;
  c.ringBytes = size_t(ringBytes);
  return c;
}

Status cpuTransportDiffers(int rank, const std::string& mine, int other, const std::string& theirs) {
  return Status(StatusCode::kInvalidArgument, "RINGGUARD_CPU_TRANSPORT differs between ranks: rank " +
                                                  std::to_string(rank) + " has " + mine + ", rank " +
                                                  std::to_string(other) + " has " + theirs +
                                                  " (every rank must set the same)");
}

Status connectSharedMemory(Bootstrap& bootstrap, const SharedMemoryChoice& choice,
                           std::unique_ptr<Transport>* transport) {
  const SharedMemory mode = choice.mode;
  const std::string& modeName = choice.setting;
  const int rank = bootstrap.rank(), size = bootstrap.size();
  if (size == 1) return choice.invalid;  // no peers: nothing to share

  // 1. Every rank's mode (or why its setting is unusable) and, where it wants shared memory, its new
  // segment.
  std::unique_ptr<shm::Segment> own;
  json mine = {{"mode", modeName},
               {"ok", true},
               {"why", ""},
               {"invalid", choice.invalid.message()},
               {"window", choice.windowBytes},
               {"cpus", shm::cpuMaskText(shm::cpusOfThisProcess())}};
  const size_t windowBytes = shmWindowBytes(choice.windowBytes, size);
  if (mode != SharedMemory::kOff && choice.invalid.isOk()) {
    const Status st =
        shm::Segment::create(rank, size, choice.ringBytes, kControlRingBytes, windowBytes, &own);
    if (st.isOk()) {
      mine["name"] = own->name();
      mine["nonce"] = own->nonce();
      if (windowBytes > 0 && choice.singleCopyBytes > 0) {
        // Where a peer can check that it may read this process's memory (single-copy reads).
        mine["pid"] = int64_t(getpid());
        mine["probe"] = own->nonceAddress();
      }
    } else {
      mine["ok"] = false;
      mine["why"] = st.message();
    }
  }
  std::vector<json> all;
  RINGGUARD_RETURN_IF_ERROR(records(bootstrap, mine, &all));
  // A rank whose setting is unusable took part so that every rank fails with a reason, not a wait: its own
  // when it has one, else the lowest such rank's.
  if (!choice.invalid.isOk()) return choice.invalid;
  for (int r = 0; r < size; ++r) {
    const std::string why = all[size_t(r)]["invalid"].get<std::string>();
    if (!why.empty()) return Status(StatusCode::kInvalidArgument, "rank " + std::to_string(r) + ": " + why);
  }
  for (int r = 0; r < size; ++r) {
    const std::string theirs = all[size_t(r)]["mode"].get<std::string>();
    if (theirs != modeName) return cpuTransportDiffers(rank, modeName, r, theirs);
    // Every rank reads every peer's window with its own layout: the capacities must be equal.
    const json& w = all[size_t(r)]["window"];
    if (!w.is_number_unsigned() || w.get<uint64_t>() != choice.windowBytes) {
      return Status(StatusCode::kInvalidArgument,
                    "RINGGUARD_SHM_WINDOW_BYTES differs between ranks: rank " + std::to_string(rank) +
                        " has " + std::to_string(choice.windowBytes) + ", rank " + std::to_string(r) +
                        " has " + w.dump() + " (every rank must set the same)");
    }
  }
  if (mode == SharedMemory::kOff) return Status::ok();
  const bool coresOfTheirOwn = everyRankHasACore(all);

  // 2. Every rank maps every peer's segment (when all were made), then says whether it could.
  std::vector<std::unique_ptr<shm::Segment>> peers(static_cast<size_t>(size));
  json opened = {{"mode", modeName}, {"ok", true}, {"why", ""}, {"invalid", ""}};
  const int noSegment = firstFailed(all);
  if (noSegment >= 0) {
    opened["ok"] = false;
    opened["why"] = "rank " + std::to_string(noSegment) +
                    " could not make its segment: " + all[size_t(noSegment)]["why"].get<std::string>();
  }
  if (noSegment < 0) {
    const std::string why = openPeerSegments(all, rank, windowBytes, &peers);
    if (!why.empty()) {
      opened["ok"] = false;
      opened["why"] = why;
    }
  }
  SingleCopy singleCopy;
  const std::string noSingleCopy = probeSingleCopy(all, peers, rank, &singleCopy.pids);
  opened["single_copy"] = noSingleCopy;
  // Where the default decides and this rank would publish by address, what the kernel's copy costs here.
  shm::KernelCopyCost cost;
  if (noSingleCopy.empty() && !choice.singleCopySet && choice.singleCopyBytes > 0 && coresOfTheirOwn &&
      choice.measureKernelCopy) {
    cost = choice.measureKernelCopy();
  }
  opened["kernel_copy_fast"] = shm::kernelCopyFast(cost);
  // Whether copies into the windows stream: ranks 0 and 1 measure, rank 0's record says.
  if (coresOfTheirOwn && windowBytes > 0 && rank <= 1 && noSegment < 0 && opened["ok"].get<bool>()) {
    measureStreamCopies(rank, own.get(), peers, choice.windowBytes, size, &opened);
  }
  RINGGUARD_RETURN_IF_ERROR(records(bootstrap, opened, &all));
  if (own) own->unlink();  // every peer that could open it has: nothing stays in /dev/shm
  const int failed = firstFailed(all);
  if (failed >= 0) {
    const std::string why = all[size_t(failed)]["why"].get<std::string>();
    if (mode == SharedMemory::kRequired) {
      return Status(StatusCode::kTransportError,
                    "RINGGUARD_CPU_TRANSPORT=" + modeName + ": the ranks cannot share memory: " + why);
    }
    // Ranks on other hosts are the normal case of a multi-node job; a segment that could not be made (a
    // /dev/shm too small for it, as containers often have) is a slower path the user can fix.
    if (noSegment >= 0) {
      logWarn(Subsys::kTransport,
              "shared memory not used, the {} transport carries the data instead (slower): {} (when "
              "/dev/shm is too small, set RINGGUARD_SHM_RING_BYTES lower or give it more room; "
              "RINGGUARD_CPU_TRANSPORT={} silences this)",
              (*transport)->name(), why, choice.offSetting);
    } else {
      logInfo(Subsys::kTransport, "shared memory not used (the {} transport carries the data): {}",
              (*transport)->name(), why);
    }
    return Status::ok();
  }
  agreeSingleCopy(all, noSingleCopy, choice, coresOfTheirOwn, cost, &singleCopy);
  // Rank 0's measurement where it made one, else streaming wherever the ranks have cores of their own.
  const json& first = all[0];
  const bool streamCopies =
      coresOfTheirOwn && (!first.contains("stream_copies") || !first["stream_copies"].is_boolean() ||
                          first["stream_copies"].get<bool>());
  if (rank == 0) {
    logInfo(
        Subsys::kTransport,
        "shared memory: {} ranks, windows of {} bytes a half, CPUs of their own: {}, single-copy reads: {}, "
        "copies into the windows: {}",
        size, choice.windowBytes, coresOfTheirOwn ? "yes" : "no",
        singleCopy.pids.empty()     ? std::string("none")
        : singleCopy.fromBytes == 0 ? std::string("read, none published")
                                    : "from " + std::to_string(singleCopy.fromBytes) + " bytes",
        streamCopies ? "streaming" : "ordinary stores");
  }
  *transport =
      makeShmTransport(std::move(*transport), std::move(own), std::move(peers), choice.timeout, choice.spin,
                       choice.windowBytes, std::move(singleCopy), coresOfTheirOwn, streamCopies);
  return Status::ok();
}

}  // namespace ringguard
