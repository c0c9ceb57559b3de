// ringguard._C.pool_stats / trim_pools: the memory ringguard's own pools hold (device cudaMemPool_t's and
// pinned host blocks, ringguard/cuda/pool_usage.h), for python/ringguard/memory.py, which reports it
// beside torch.cuda.memory_reserved() and trims it with torch.cuda.empty_cache(). A build without CUDA has
// no pools: zeros, and nothing to trim.
#include <pybind11/pybind11.h>

#include <stdexcept>

#if RINGGUARD_MEMORY_CUDA
#include "ringguard/cuda/pool_usage.h"
#endif

namespace py = pybind11;

void ringguardRegisterMemoryBindings(py::module_& m) {
  m.def(
      "pool_stats",
      [](int device) {
        uint64_t dev[5] = {0, 0, 0, 0, 0}, pin[5] = {0, 0, 0, 0, 0};
        int devicePools = 0, pinnedPools = 0;
#if RINGGUARD_MEMORY_CUDA
        ringguard::cuda::ProcessPoolUsage s;
        const ringguard::Status st = ringguard::cuda::readPoolUsage(device, &s);
        if (!st.isOk()) throw std::runtime_error("ringguard: reading the pools: " + st.toString());
        const uint64_t fromDevice[5] = {s.device.reservedBytes, s.device.usedBytes, s.device.highWaterBytes,
                                        s.device.allocations, s.device.allocationFailures};
        const uint64_t fromPinned[5] = {s.pinned.reservedBytes, s.pinned.usedBytes, s.pinned.highWaterBytes,
                                        s.pinned.allocations, s.pinned.allocationFailures};
        for (int i = 0; i < 5; ++i) {
          dev[i] = fromDevice[i];
          pin[i] = fromPinned[i];
        }
        devicePools = s.device.pools;
        pinnedPools = s.pinned.pools;
#else
        (void)device;
#endif
        const char* keys[] = {"reserved_bytes", "used_bytes", "high_water_bytes", "allocations",
                              "allocation_failures"};
        py::dict d, p;
        for (int i = 0; i < 5; ++i) {
          d[keys[i]] = dev[i];
          p[keys[i]] = pin[i];
        }
        d["pools"] = devicePools;
        p["pools"] = pinnedPools;
        py::dict out;
        out["device"] = d;
        out["pinned"] = p;
        return out;
      },
      py::arg("device") = -1);
  m.def(
      "trim_pools",
      [](int device) {
#if RINGGUARD_MEMORY_CUDA
        py::gil_scoped_release nogil;
        const ringguard::Status st = ringguard::cuda::trimPools(device);
        if (!st.isOk()) throw std::runtime_error("ringguard: trimming the pools: " + st.toString());
#else
        (void)device;
#endif
      },
      py::arg("device") = -1);
}
