#pragma once
// Ranks on one host: slices and control frames through shared memory; the host transport it wraps keeps
// what shared memory cannot tell (docs/design/protocol.md, "Shared-memory transport"). Under torchrun that
// host transport is the c10d one (Gloo): its goodbye and its closed connections still say that a peer left
// or exited, while every byte of the collectives skips Gloo's sockets and threads: the sender copies a
// message into the receiver's ring, the receiver copies it out, each on the thread that posted or probed,
// and a wait sleeps on a futex until the other side moved something.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringguard/bootstrap/bootstrap.h"
#include "ringguard/core/settings.h"
#include "ringguard/core/status.h"
#include "transport/shm/kernel_copy_cost.h"
#include "transport/transport.h"

namespace ringguard {

namespace shm {
class Segment;
}

enum class SharedMemory {
  kOff,       // keep the host transport
  kAuto,      // shared memory when every rank can open every other's segment, else the host transport
  kRequired,  // shared memory, or an error naming the rank that could not
};

// How a group's host transport becomes a shared-memory one (RINGGUARD_CPU_TRANSPORT, read by the bootstrap
// that makes the host transport).
struct SharedMemoryChoice {
  SharedMemory mode = SharedMemory::kOff;
  std::string setting;     // RINGGUARD_CPU_TRANSPORT's value, for messages
  std::string offSetting;  // its value that keeps the host transport, named in a fallback's warning
  size_t ringBytes = 0;    // per inbound data ring: at least one default slice and its trailer
  // Payload bytes per half of each rank's window for the one-sided protocol (RINGGUARD_SHM_WINDOW_BYTES;
  // 0: none, every collective takes the two-sided protocol).
  size_t windowBytes = 0;
  std::chrono::milliseconds timeout{0};  // how long a control frame may wait for room in a peer's ring
  // How long a wait polls the rings before it sleeps on the doorbell. 0 (a few polls) where the ranks may
  // share cores with threads that complete their waits (torch's); under mpirun every rank owns its core and
  // MPI itself polls, and a sleep costs each hop of a chain the futex's wake-up.
  std::chrono::microseconds spin{0};
  // One-sided parts and send/recv messages of at least this many bytes are read single-copy, straight from
  // the publisher's buffer, where every rank can read every other's process memory
  // (RINGGUARD_SHM_SINGLE_COPY_BYTES; 0: never, every rank keeps copying through its window).
  size_t singleCopyBytes = 0;
  // Whether RINGGUARD_SHM_SINGLE_COPY_BYTES was set: the default holds only where every rank has a CPU of
  // its own (every rank's CPU set: transport/shm/cpu_sets.h), and drops to shm::kFastKernelCopyFromBytes
  // where every rank measured a fast kernel copy (transport/shm/kernel_copy_cost.h); a value set is used as
  // given.
  bool singleCopySet = false;
  // How this rank measures the kernel's copy against a user-space one (when the setting is unset, every rank
  // has a core and single-copy reads work): shm::measureKernelCopyCost, or a fixed cost in tests.
  std::function<shm::KernelCopyCost()> measureKernelCopy = shm::measureKernelCopyCost;
  // Why this rank's settings cannot be used (a value out of range, a choice the bootstrap refuses), or OK.
  // connectSharedMemory publishes it in its first exchange, so every rank fails with it instead of waiting
  // for a rank that stopped before the exchange.
  Status invalid;
};

// RINGGUARD_CPU_TRANSPORT, RINGGUARD_SHM_RING_BYTES and RINGGUARD_SHM_WINDOW_BYTES through `lookup`:
// `offSetting` (the value that keeps the host transport) is kOff, shm kRequired, every other value kAuto; a
// value that does not parse comes back in `invalid`, with its text as `setting`. The bootstrap's owner adds
// what is its own (a value it refuses, the waits' polling).
SharedMemoryChoice readSharedMemoryChoice(const SettingLookup& lookup, const std::string& offSetting,
                                          std::chrono::milliseconds timeout);

// The error every rank of a group gives when ranks set RINGGUARD_CPU_TRANSPORT differently.
Status cpuTransportDiffers(int rank, const std::string& mine, int other, const std::string& theirs);

// Collective over `bootstrap` (two exchanges; every rank calls it with its own choice, and ranks whose
// settings differ all fail naming both): replaces *transport, the group's host transport, with a
// shared-memory transport over it when `choice.mode` allows and every rank could map every peer's segment.
// With kAuto and a rank that could not, every rank keeps the host transport and logs why.
Status connectSharedMemory(Bootstrap& bootstrap, const SharedMemoryChoice& choice,
                           std::unique_ptr<Transport>* transport);

// Bytes of each control ring: every frame fits many times over, so a sender waits for room only when its
// peer has stopped reading.
inline constexpr size_t kControlRingBytes = size_t(256) << 10;

// Single-copy reads of the windows (docs/design/protocol.md, "Single-copy read"): every rank's process id
// (pids[r]; empty: none, every payload is copied through the windows), and the part size from which this
// rank publishes by address.
struct SingleCopy {
  std::vector<int64_t> pids;
  size_t fromBytes = 0;
};

// The transport itself, over segments already mapped (what connectSharedMemory does): `own` is this rank's,
// peers[p] peer p's (null at this rank). `windowCapacity` > 0: every segment holds a window of
// WindowLayout::of(windowCapacity, size).bytes (shmWindowBytes), which the transport offers as windows(),
// with single-copy reads where `singleCopy` has the pids.
std::unique_ptr<Transport> makeShmTransport(std::unique_ptr<Transport> host,
                                            std::unique_ptr<shm::Segment> own,
                                            std::vector<std::unique_ptr<shm::Segment>> peers,
                                            std::chrono::milliseconds sendTimeout,
                                            std::chrono::microseconds spin = std::chrono::microseconds(0),
                                            size_t windowCapacity = 0, SingleCopy singleCopy = {},
                                            std::optional<bool> coresOfTheirOwn = std::nullopt,
                                            std::optional<bool> streamCopies = std::nullopt);

// Whether this process may run on at least `ranks` cores (every rank of a shared-memory group is on this
// host): then each rank can have a core of its own, and a peer reads what this rank wrote from another
// core's cache, which streaming stores and single-copy reads pay off for. Where ranks share cores, a reader
// often runs next on the writer's core and finds the bytes in its cache (docs/PERFORMANCE.md, issue 45).
// This process's CPU set alone: a rank bound to a core of its own sees one CPU. connectSharedMemory decides
// from every rank's set instead (cpu_sets.h) and hands the answer to makeShmTransport (`coresOfTheirOwn`;
// unset, this function decides), with whether copies into the windows stream (`streamCopies`, measured:
// stream_store_choice.h; unset, where the ranks have cores of their own).
bool coreForEachRank(int ranks);

// Bytes of a segment's window for `windowCapacity` payload bytes per half (0: none).
size_t shmWindowBytes(size_t windowCapacity, int size);

}  // namespace ringguard
