#pragma once
// Single-copy reads between processes of one host: Linux cross-memory attach (process_vm_readv), which
// copies straight from another process's memory into this one's, the way Open MPI's shared-memory transport
// moves large messages (docs/design/protocol.md, "Single-copy read"). It needs the right to trace the other
// process (same user and no Yama restriction, or CAP_SYS_PTRACE) and the same pid namespace; the probe
// tells, at setup, whether a peer's memory can be read.
#include <cstddef>
#include <cstdint>

#include "ringguard/core/status.h"

namespace ringguard {
namespace shm {

// `bytes` at `address` in process `pid` (rank `peer`) into `dst`, in as many calls as the kernel needs.
// A kTransportError naming the peer, the address and the kernel's reason where it refuses (a range not
// mapped there, a process gone, no permission).
Status readCrossMemory(int64_t pid, int peer, uint64_t address, void* dst, size_t bytes);

// Whether this process can read process `pid`'s memory, and `pid` is the process it claims to be: reads the
// 8 bytes that rank `peer` said hold its segment's nonce (`address`, in its process) and compares them with
// `nonce`, which this rank read from the segment it opened. OK, or why not (for a log line).
Status probeCrossMemory(int64_t pid, int peer, uint64_t address, uint64_t nonce);

}  // namespace shm
}  // namespace ringguard
