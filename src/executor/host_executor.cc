#include <algorithm>
#include <cstring>

#include "ringguard/algorithms/executor.h"
#include "ringguard/core/crc32.h"
#include "ringguard/core/reduce.h"

namespace ringguard {

namespace {
// Small enough that the block just reduced is still in L1/L2 when it is checksummed.
constexpr size_t kBlockBytes = 32 * 1024;
}  // namespace

uint32_t HostExecutor::checksum(const void* data, size_t bytes) { return crc32(data, bytes); }

ApplyResult HostExecutor::verifyAndApply(const ApplyTask& task) {
  ApplyResult result;
  const size_t esize = dataTypeSize(task.dtype);
  const size_t bytes = task.count * esize;
  // The trailer alone first: a damaged or stale trailer is rejected without reading the payload.
  result.check = checkTrailer(*task.trailer, task.expected);
  if (result.check != SliceCheck::kOk) return result;
  result.check = checkSlice(*task.trailer, task.expected, crc32(task.slot, bytes));
  if (result.check != SliceCheck::kOk) return result;

  if (!task.reduce) {
    if (bytes) std::memcpy(task.dst, task.slot, bytes);
    result.outCrc = task.trailer->payloadCrc;  // the bytes just verified, unchanged
    return result;
  }
  const size_t blockElems = std::max<size_t>(1, kBlockBytes / esize);
  auto* dst = static_cast<uint8_t*>(task.dst);
  auto* local = static_cast<const uint8_t*>(task.local);
  auto* slot = static_cast<const uint8_t*>(task.slot);
  uint32_t crc = 0;
  for (size_t i = 0; i < task.count; i += blockElems) {
    size_t n = std::min(blockElems, task.count - i);
    size_t off = i * esize;
    reduceHost(task.dtype, task.op, dst + off, local + off, slot + off, n, task.finalStep, task.nranks);
    if (task.forwarded) crc = crc32(dst + off, n * esize, crc);
  }
  result.outCrc = crc;
  return result;
}

}  // namespace ringguard
