// GuardBackend over host memory: snapshots are heap copies, scans run inline on the calling thread.
#include <cstring>
#include <memory>
#include <vector>

#include "guard/element_bits.h"
#include "ringguard/core/crc32.h"
#include "ringguard/core/float16.h"
#include "ringguard/guard/backend.h"

namespace ringguard {
namespace {

using guard_detail::FloatBits;

uint64_t loadBits(const unsigned char* p, int width) {
  switch (width) {
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

void storeBits(unsigned char* p, int width, uint64_t bits) {
  // Little endian: the low `width` bytes of the word are the element.
  std::memcpy(p, &bits, static_cast<size_t>(width));
}

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
    ScanResult r;
    FloatBits f;
    if (guard_detail::floatBits(buffer.dtype, &f)) {
      const auto* p = static_cast<const unsigned char*>(buffer.data);
      const size_t n = buffer.count();
      for (size_t i = 0; i < n; ++i) {
        if (guard_detail::isNonFinite(loadBits(p + i * f.width, f.width), f)) {
          if (r.count == 0) r.firstIndex = i;
          ++r.count;
        }
      }
    }
    pending_.push_back(r);
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
    if (!guard_detail::floatBits(buffer.dtype, &f)) return Status::ok();
    auto* p = static_cast<unsigned char*>(buffer.data);
    const size_t n = buffer.count();
    for (size_t i = 0; i < n; ++i) {
      const uint64_t bits = loadBits(p + i * f.width, f.width);
      if (guard_detail::isNonFinite(bits, f)) {
        storeBits(p + i * f.width, f.width, guard_detail::sanitized(bits, f, mode == SanitizeMode::kClamp));
      }
    }
    return Status::ok();
  }

  Status inject(const GuardBuffer& buffer, size_t index, FaultValue value, void*) override {
    FloatBits f;
    if (!guard_detail::floatBits(buffer.dtype, &f)) {
      return Status(StatusCode::kInvalidArgument,
                    "guard: cannot inject a non-finite value into integer buffer '" + buffer.name + "'");
    }
    if (index >= buffer.count()) {
      return Status(StatusCode::kInvalidArgument, "guard: injection index " + std::to_string(index) +
                                                      " is past the end of '" + buffer.name + "'");
    }
    storeBits(static_cast<unsigned char*>(buffer.data) + index * f.width, f.width,
              guard_detail::faultBits(static_cast<int>(value), f));
    return Status::ok();
  }

  Status readElement(const GuardBuffer& buffer, size_t index, void*, double* value) override {
    if (index >= buffer.count())
      return Status(StatusCode::kInvalidArgument, "guard: element index past the end");
    const auto* p = static_cast<const unsigned char*>(buffer.data) + index * dataTypeSize(buffer.dtype);
    *value = guard_detail::elementAsDouble(p, buffer.dtype);
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
