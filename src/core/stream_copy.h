#pragma once
// A copy whose destination another core reads next (a window of the one-sided protocol on host shared
// memory). Ordinary stores to a line the reading core still holds from its last read wait for that copy to
// be invalidated, line by line: measured on the 2-core dev machine, a 64 KiB memcpy into a buffer the other
// core had just read took 9.8 us against 1.3 us into a private one, and non-temporal stores 2.2 us (the
// reader then loads from memory, 6.1 us against 1.8 us, a cycle of 6.1 us against 9.9 us;
// docs/PERFORMANCE.md, issue 45). Small copies pipeline those invalidations well enough (4 KiB: 0.26 us),
// so only from kStreamCopyBytes on.
#include <cstddef>

namespace ringguard {

inline constexpr size_t kStreamCopyBytes = size_t(16) << 10;

// memcpy(dst, src, bytes), with non-temporal stores (and a store fence after them) from kStreamCopyBytes
// on where the CPU has them (x86-64); the bytes are in memory, visible to any later acquire load of a flag
// stored after this returns.
void streamCopy(void* dst, const void* src, size_t bytes);

}  // namespace ringguard
