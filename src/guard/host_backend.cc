// GuardBackend over host memory: snapshots are heap copies, scans run inline on the calling thread.
#include <cstring>
#include <memory>
#include <vector>

#include "core/element_bits.h"
#include "core/float16.h"
#include "ringguard/core/crc32.h"
#include "ringguard/core/non_finite.h"
#include "ringguard/guard/backend.h"

namespace ringguard {
namespace {

using element_bits::FloatBits;
using element_bits::loadBits;
using element_bits::storeBits;

class HostGuardBackend final : public GuardBackend {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }

  Status snapshot(const GuardBuffer& buffer, void*, SnapshotHandle* out) override {
    out->bytes = buffer.bytes;
    out->data = nullptr;
    if (buffer.bytes == 0) return Status::ok();
    std::unique_ptr<unsigned char[]> copy(new (std::nothrow) unsigned char[buffer.bytes]);
    if (!copy) {
      return Status(StatusCode::kInvalidArgument, "guard: no host memory for a snapshot of '" + buffer.name +
                                                      "' (" + std::to_string(buffer.bytes) + " bytes)");
    }
    std::memcpy(copy.get(), buffer.data, buffer.bytes);
    out->data = copy.release();
    return Status::ok();
  }

  Status restore(const GuardBuffer& buffer, const SnapshotHandle& saved, void*) override {
    RINGGUARD_ENFORCE(saved.bytes == buffer.bytes, "guard: snapshot size differs from its buffer");
    if (buffer.bytes != 0) std::memcpy(buffer.data, saved.data, buffer.bytes);
    return Status::ok();
  }

  Status release(const SnapshotHandle& saved, void*) override {
    delete[] static_cast<unsigned char*>(saved.data);
    return Status::ok();
  }

  Status scan(const GuardBuffer& buffer, void*) override {
    pending_.push_back(scanNonFinite(buffer.data, buffer.count(), buffer.dtype));
    return Status::ok();
  }

  Status readScans(void*, std::vector<ScanResult>* results) override {
    results->swap(pending_);
    pending_.clear();
    return Status::ok();
  }

  Status verdictFlag(void*, float* flag) override {
    *flag = 0.0f;
    for (const ScanResult& r : pending_) {
      if (!r.clean()) *flag = 1.0f;
    }
    pending_.clear();
    return Status::ok();
  }

  Status sanitize(const GuardBuffer& buffer, SanitizeMode mode, void*) override {
    FloatBits f;
    DataType part;
    int parts = 0;
    if (!element_bits::scanParts(buffer.dtype, &part, &parts) || !element_bits::floatBits(part, &f)) {
      return Status::ok();
    }
    auto* p = static_cast<unsigned char*>(buffer.data);
    const size_t n = buffer.count() * size_t(parts);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t bits = loadBits(p + i * f.width, f.width);
      if (element_bits::isNonFinite(bits, f)) {
        storeBits(p + i * f.width, f.width, element_bits::sanitized(bits, f, mode == SanitizeMode::kClamp));
      }
    }
    return Status::ok();
  }

  Status inject(const GuardBuffer& buffer, size_t index, FaultValue value, void*) override {
    FloatBits f;
    DataType part;
    int parts = 0;
    if (!element_bits::scanParts(buffer.dtype, &part, &parts) || !element_bits::floatBits(part, &f)) {
      return Status(StatusCode::kInvalidArgument,
                    "guard: cannot inject a non-finite value into integer buffer '" + buffer.name + "'");
    }
    if (index >= buffer.count()) {
      return Status(StatusCode::kInvalidArgument, "guard: injection index " + std::to_string(index) +
                                                      " is past the end of '" + buffer.name + "'");
    }
    // A complex element gets the value in its real part.
    storeBits(static_cast<unsigned char*>(buffer.data) + index * size_t(parts) * f.width, f.width,
              element_bits::faultBits(static_cast<int>(value), f));
    return Status::ok();
  }

  Status readElement(const GuardBuffer& buffer, size_t index, void*, double* value) override {
    if (index >= buffer.count())
      return Status(StatusCode::kInvalidArgument, "guard: element index past the end");
    const auto* p = static_cast<const unsigned char*>(buffer.data) + index * dataTypeSize(buffer.dtype);
    *value = element_bits::elementAsDouble(p, buffer.dtype);
    return Status::ok();
  }

  Status checksum(const GuardBuffer& buffer, void*, uint32_t* crc) override {
    *crc = crc32(buffer.data, buffer.bytes);
    return Status::ok();
  }

  uint64_t hostWaits() const override { return 0; }  // the host scan never waits for a device

 private:
  std::vector<ScanResult> pending_;
};

}  // namespace

std::unique_ptr<GuardBackend> makeHostGuardBackend() { return std::make_unique<HostGuardBackend>(); }

}  // namespace ringguard
