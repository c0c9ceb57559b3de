#pragma once
// What a single-copy read costs on this host against a copy in user space, measured once when a group's
// shared memory is set up (docs/design/protocol.md, "Single-copy read"): the kernel's copy
// (process_vm_readv) pins every page it reads, and what that costs differs between machines by more than the
// copy it saves. On the AMD EPYC VM of the twenty-ninth session 64 KiB took 6.20 us against a 1.31 us
// memcpy (4.7x), and copying through the windows won (a 64 KiB broadcast at 2 ranks 0.74x MPI against 0.64x
// single-copy); on the Intel Xeon VM of the forty-seventh session 3.43 us against 1.49 us (2.3x), and
// single-copy won (0.58-0.61x against 0.33-0.38x; docs/PERFORMANCE.md, issue 45).
#include <cstddef>

namespace ringguard {
namespace shm {

struct KernelCopyCost {
  double kernelUs = 0;  // process_vm_readv of kKernelCopyProbeBytes of this process's own memory, warm
  double copyUs = 0;    // memcpy of as many bytes, warm
};

inline constexpr size_t kKernelCopyProbeBytes = size_t(64) << 10;

// The medians of a few dozen calls of each (about a millisecond in all). Zeros where the kernel refuses the
// read (then nothing is fast).
KernelCopyCost measureKernelCopyCost();

// A kernel copy under kFastKernelCopyRatio times the user-space copy is "fast" (between the two machines
// above); where every rank of a group measured it so and RINGGUARD_SHM_SINGLE_COPY_BYTES is unset, messages
// from kFastKernelCopyFromBytes (collective parts from twice it) are read single-copy instead of the
// setting's default (on the Xeon, parts from 16 KiB: the 32 and 64 KiB all-gather, broadcast and all-to-all
// at 2 ranks 0.48-0.63x, 0.37-0.52x, 0.42-0.60x MPI with the default, 0.64-0.80x, 0.60-0.62x, 0.69-0.83x
// with this; 4 KiB, whose parts stay in the windows, unchanged).
inline constexpr double kFastKernelCopyRatio = 3.0;
inline constexpr size_t kFastKernelCopyFromBytes = size_t(8) << 10;
inline bool kernelCopyFast(const KernelCopyCost& c) {
  return c.kernelUs > 0 && c.copyUs > 0 && c.kernelUs < kFastKernelCopyRatio * c.copyUs;
}

}  // namespace shm
}  // namespace ringguard
