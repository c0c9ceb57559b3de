// The staged collectives' copies over host memory: what the algorithms run on in the unit suites (and
// for host buffers). Copies complete before they return, so the waits have nothing to wait for.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/copy_bytes.h"
#include "ringguard/runtime/host_stager.h"

namespace ringguard {

namespace {

class MemcpyStager final : public HostStager {
 public:
  Status allocateHost(size_t bytes, void** ptr) override {
    *ptr = std::malloc(bytes);
    if (*ptr == nullptr)
      return Status(StatusCode::kInternal, "staging: malloc of " + std::to_string(bytes) + " bytes failed");
    return Status::ok();
  }
  Status freeHost(void* ptr) override {
    std::free(ptr);
    return Status::ok();
  }
  Status toHost(void* dst, const void* src, size_t bytes, int) override {
    copyBytes(dst, src, bytes);
    return Status::ok();
  }
  Status fromHost(void* dst, const void* src, size_t bytes, int) override {
    copyBytes(dst, src, bytes);
    return Status::ok();
  }
  Status waitToHost(int) override { return Status::ok(); }
  Status waitFromHost(int) override { return Status::ok(); }
};

}  // namespace

std::unique_ptr<HostStager> makeMemcpyStager() { return std::make_unique<MemcpyStager>(); }

}  // namespace ringguard
