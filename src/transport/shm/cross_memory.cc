#include "transport/shm/cross_memory.h"

#include <sys/types.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace ringguard {
namespace shm {

namespace {

std::string hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

Status readCrossMemory(int64_t pid, int peer, uint64_t address, void* dst, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<uint8_t*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(uintptr_t(address + done)), bytes - done};
    const ssize_t got = process_vm_readv(pid_t(pid), &local, 1, &remote, 1, 0);
    if (got > 0) {
      done += size_t(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    // A partial read stops at the first page it cannot read; 0 bytes read means that one.
    const std::string why = got < 0 ? std::strerror(errno) : "nothing readable there";
    return Status(StatusCode::kTransportError,
                  "single-copy read of " + std::to_string(bytes) + " bytes at " + hex(address) + " in rank " +
                      std::to_string(peer) + "'s process (pid " + std::to_string(pid) + ") failed after " +
                      std::to_string(done) + " bytes: " + why);
  }
  return Status::ok();
}

Status probeCrossMemory(int64_t pid, int peer, uint64_t address, uint64_t nonce) {
  uint64_t seen = 0;
  RINGGUARD_RETURN_IF_ERROR(readCrossMemory(pid, peer, address, &seen, sizeof seen));
  if (seen != nonce) {
    return Status(StatusCode::kTransportError,
                  "rank " + std::to_string(peer) + "'s pid " + std::to_string(pid) +
                      " is another process here (another pid namespace): its segment's nonce is not there");
  }
  return Status::ok();
}

}  // namespace shm
}  // namespace ringguard
