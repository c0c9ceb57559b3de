#include "ringguard/telemetry/pcie.h"

#include <dlfcn.h>

#include <utility>

#include "core/logging.h"
#include "telemetry/nvml_api.h"

namespace ringguard {

double pcieLinkBytesPerSecond(unsigned gen, unsigned width) {
  // Per lane and direction, after encoding: GT/s x encoding efficiency / 8 bits.
  double laneBytes = 0.0;
  switch (gen) {
    case 1:
      laneBytes = 2.5e9 * 8.0 / 10.0 / 8.0;
      break;
    case 2:
      laneBytes = 5.0e9 * 8.0 / 10.0 / 8.0;
      break;
    case 3:
      laneBytes = 8.0e9 * 128.0 / 130.0 / 8.0;
      break;
    case 4:
      laneBytes = 16.0e9 * 128.0 / 130.0 / 8.0;
      break;
    case 5:
      laneBytes = 32.0e9 * 128.0 / 130.0 / 8.0;
      break;
    case 6:
      laneBytes = 64.0e9 * 242.0 / 256.0 / 8.0;
      break;
    default:
      return 0.0;
  }
  return laneBytes * width;
}

namespace {
constexpr const char* kSource = "nvml";
}  // namespace

void PcieCounters::rate(const char* prefix, const char* dir, const std::optional<uint64_t>& raw,
                        unsigned bits, double unitBytes, const std::string& why, WrappingCounter* counter,
                        int64_t* lastNs, int64_t nowNs, double linkMax, bool withUtil,
                        std::vector<Signal>* out, double* utilOut) {
  const std::string rateName = fmt::format("{}.{}_bytes_per_s", prefix, dir);
  const std::string utilName = fmt::format("{}.{}_util", prefix, dir);
  *utilOut = -1.0;
  if (!raw) {
    counter->reset();
    out->push_back(Signal::absent(rateName, "bytes/s", kSource, why));
    if (withUtil) out->push_back(Signal::absent(utilName, "fraction", kSource, why));
    return;
  }
  if (counter->bits() != bits) *counter = WrappingCounter(bits);
  const bool first = !counter->primed();
  const int64_t dtNs = nowNs - *lastNs;
  const uint64_t delta = counter->update(*raw);
  const int64_t prevNs = *lastNs;
  *lastNs = nowNs;
  std::string reason;
  if (first) {
    reason = "first reading (a rate needs two)";
  } else if (dtNs <= 0) {
    reason = fmt::format("time did not advance between readings ({} -> {} ns)", prevNs, nowNs);
  } else if (linkMax > 0.0 && linkMax * (static_cast<double>(dtNs) * 1e-9) >= counter->span() * unitBytes) {
    // The link could have moved a whole counter span in this interval: the delta may have lost wraps.
    ++ambiguous_;
    reason = fmt::format("{} ms between readings: the {}-bit counter may have wrapped more than once",
                         dtNs / 1e6, bits);
  }
  if (!reason.empty()) {
    out->push_back(Signal::absent(rateName, "bytes/s", kSource, reason));
    if (withUtil) out->push_back(Signal::absent(utilName, "fraction", kSource, reason));
    return;
  }
  // delta * 1e9 / dt rather than delta / (dt * 1e-9): exact for integer-valued rates.
  const double bps = static_cast<double>(delta) * unitBytes * 1e9 / static_cast<double>(dtNs);
  out->push_back(Signal::present(rateName, bps, "bytes/s", kSource));
  if (!withUtil) return;
  if (linkMax > 0.0) {
    *utilOut = bps / linkMax;
    out->push_back(Signal::present(utilName, *utilOut, "fraction", kSource));
  } else {
    out->push_back(Signal::absent(utilName, "fraction", kSource, "link generation/width unknown"));
  }
}

void PcieCounters::update(const PcieReading& r, std::vector<Signal>* out) {
  const double linkMax = pcieLinkBytesPerSecond(r.linkGen, r.linkWidth);
  if (r.linkGen != 0 && r.linkWidth != 0) {
    out->push_back(Signal::present("pcie.link_gen", r.linkGen, "count", kSource));
    out->push_back(Signal::present("pcie.link_width", r.linkWidth, "count", kSource));
  } else {
    const std::string why = r.linkWhy.empty() ? "link generation/width unknown" : r.linkWhy;
    out->push_back(Signal::absent("pcie.link_gen", "count", kSource, why));
    out->push_back(Signal::absent("pcie.link_width", "count", kSource, why));
  }
  if (linkMax > 0.0) {
    out->push_back(Signal::present("pcie.link_max_bytes_per_s", linkMax, "bytes/s", kSource));
  } else {
    out->push_back(Signal::absent(
        "pcie.link_max_bytes_per_s", "bytes/s", kSource,
        !r.linkWhy.empty() ? r.linkWhy : fmt::format("no PCIe rate for gen {} x{}", r.linkGen, r.linkWidth)));
  }
  double txUtil = -1.0, rxUtil = -1.0;
  rate("pcie", "tx", r.txBytes, r.counterBits, 1.0, r.txWhy, &tx_, &txLastNs_, r.timeNs, linkMax, true, out,
       &txUtil);
  rate("pcie", "rx", r.rxBytes, r.counterBits, 1.0, r.rxWhy, &rx_, &rxLastNs_, r.timeNs, linkMax, true, out,
       &rxUtil);
  if (txUtil >= 0.0 || rxUtil >= 0.0) {
    // One direction missing does not hide a saturated other one.
    out->push_back(Signal::present("pcie.util", std::max(txUtil, rxUtil), "fraction", kSource));
  } else {
    const bool sameWhy = !r.txBytes && !r.rxBytes && !r.txWhy.empty() && r.txWhy == r.rxWhy;
    out->push_back(Signal::absent("pcie.util", "fraction", kSource,
                                  sameWhy ? r.txWhy : "neither direction's utilisation is known"));
  }
  if (r.replays) {
    out->push_back(Signal::present("pcie.replays", static_cast<double>(*r.replays), "count", kSource));
  } else {
    out->push_back(Signal::absent("pcie.replays", "count", kSource, r.replayWhy));
  }
  double unused = 0.0;
  rate("nvlink", "tx", r.nvlinkTxKiB, 64, 1024.0, r.nvlinkWhy, &nvlinkTx_, &nvlinkTxLastNs_, r.timeNs, 0.0,
       false, out, &unused);
  rate("nvlink", "rx", r.nvlinkRxKiB, 64, 1024.0, r.nvlinkWhy, &nvlinkRx_, &nvlinkRxLastNs_, r.timeNs, 0.0,
       false, out, &unused);
}

// --- NVML ----------------------------------------------------------------------------------------------

struct NvmlPcieSource::Impl {
  void* lib = nullptr;
  bool initialised = false;
  nvml::Device device = nullptr;
  std::string why;  // non-empty: unavailable
  int64_t linkRefreshNs = 0;
  int64_t linkReadNs = 0;
  bool linkRead = false;
  unsigned linkGen = 0, linkWidth = 0;
  std::string linkWhy;
  std::string nvlinkError;  // why the NVLink fields could not be read with the PCIe ones

  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn errorString = nullptr;
  nvml::GetFieldValuesFn getFieldValues = nullptr;
  nvml::GetUintFn linkGenFn = nullptr, linkWidthFn = nullptr, replayFn = nullptr;

  std::string error(const char* call, nvml::Return rc) const {
    return fmt::format("{} failed: {} (NVML error {})", call, errorString ? errorString(rc) : "?", rc);
  }

  template <typename Fn>
  bool sym(const char* name, Fn* out) {
    *out = reinterpret_cast<Fn>(dlsym(lib, name));
    if (*out == nullptr) why = fmt::format("libnvidia-ml.so.1 has no {}", name);
    return *out != nullptr;
  }

  // Loads NVML and resolves every symbol; false with `why` set when any step fails.
  bool load() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      why = fmt::format("NVML not available: {}", err ? err : "dlopen(libnvidia-ml.so.1) failed");
      return false;
    }
    nvml::InitFn init = nullptr;
    if (!sym("nvmlInit_v2", &init) || !sym("nvmlShutdown", &shutdown) ||
        !sym("nvmlErrorString", &errorString) || !sym("nvmlDeviceGetFieldValues", &getFieldValues) ||
        !sym("nvmlDeviceGetCurrPcieLinkGeneration", &linkGenFn) ||
        !sym("nvmlDeviceGetCurrPcieLinkWidth", &linkWidthFn) ||
        !sym("nvmlDeviceGetPcieReplayCounter", &replayFn)) {
      return false;
    }
    const nvml::Return rc = init();
    if (rc != nvml::kSuccess) {
      why = error("nvmlInit_v2", rc);
      return false;
    }
    initialised = true;
    return true;
  }

  ~Impl() {
    if (initialised && shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

NvmlPcieSource::NvmlPcieSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NvmlPcieSource::~NvmlPcieSource() = default;

std::unique_ptr<NvmlPcieSource> NvmlPcieSource::create(unsigned device, int64_t linkRefreshNs) {
  auto impl = std::make_unique<Impl>();
  impl->linkRefreshNs = linkRefreshNs;
  nvml::GetHandleByIndexFn byIndex = nullptr;
  if (impl->load() && impl->sym("nvmlDeviceGetHandleByIndex_v2", &byIndex)) {
    const nvml::Return rc = byIndex(device, &impl->device);
    if (rc != nvml::kSuccess) {
      impl->why = impl->error(fmt::format("nvmlDeviceGetHandleByIndex_v2({})", device).c_str(), rc);
      impl->device = nullptr;
    }
  }
  if (!impl->why.empty()) logInfo(Subsys::kTelemetry, "telemetry: PCIe signals missing: {}", impl->why);
  return std::unique_ptr<NvmlPcieSource>(new NvmlPcieSource(std::move(impl)));
}

std::unique_ptr<NvmlPcieSource> NvmlPcieSource::createByPciBusId(const std::string& busId,
                                                                 int64_t linkRefreshNs) {
  auto impl = std::make_unique<Impl>();
  impl->linkRefreshNs = linkRefreshNs;
  nvml::GetHandleByPciBusIdFn byBusId = nullptr;
  if (impl->load() && impl->sym("nvmlDeviceGetHandleByPciBusId_v2", &byBusId)) {
    const nvml::Return rc = byBusId(busId.c_str(), &impl->device);
    if (rc != nvml::kSuccess) {
      impl->why = impl->error(fmt::format("nvmlDeviceGetHandleByPciBusId_v2({})", busId).c_str(), rc);
      impl->device = nullptr;
    }
  }
  if (!impl->why.empty()) logInfo(Subsys::kTelemetry, "telemetry: PCIe signals missing: {}", impl->why);
  return std::unique_ptr<NvmlPcieSource>(new NvmlPcieSource(std::move(impl)));
}

bool NvmlPcieSource::available() const { return impl_->why.empty(); }
const std::string& NvmlPcieSource::why() const { return impl_->why; }

void NvmlPcieSource::sample(int64_t nowNs, std::vector<Signal>* out) {
  PcieReading r;
  r.timeNs = nowNs;
  if (!available()) {
    r.txWhy = r.rxWhy = r.linkWhy = r.replayWhy = r.nvlinkWhy = impl_->why;
    counters_.update(r, out);
    return;
  }
  Impl& m = *impl_;
  // One call for the four counters: a field-value read returns at once, where nvmlDeviceGetPcieThroughput
  // waits out its sampling window (figures: docs/PERFORMANCE.md, "The downgrade engine").
  nvml::FieldValue fields[4] = {};
  fields[0].fieldId = nvml::kFieldPcieTxBytes;
  fields[1].fieldId = nvml::kFieldPcieRxBytes;
  fields[2].fieldId = nvml::kFieldNvlinkTxKiB;
  fields[3].fieldId = nvml::kFieldNvlinkRxKiB;
  fields[2].scopeId = fields[3].scopeId = nvml::kScopeAllLinks;
  nvml::Return rc = m.getFieldValues(m.device, 4, fields);
  if (rc != nvml::kSuccess) {
    // A driver that fails the whole call over the NVLink fields must not cost the PCIe ones: read those
    // alone, and report NVLink missing with the error.
    const std::string nvlinkError = m.error("nvmlDeviceGetFieldValues (NVLink fields)", rc);
    rc = m.getFieldValues(m.device, 2, fields);
    fields[2].nvmlReturn = fields[3].nvmlReturn = -1;
    m.nvlinkError = nvlinkError;
  }
  std::string nvlinkTxWhy, nvlinkRxWhy;
  std::optional<uint64_t>* targets[4] = {&r.txBytes, &r.rxBytes, &r.nvlinkTxKiB, &r.nvlinkRxKiB};
  std::string* whys[4] = {&r.txWhy, &r.rxWhy, &nvlinkTxWhy, &nvlinkRxWhy};
  unsigned bits[4] = {32, 32, 64, 64};
  for (int i = 0; i < 4; ++i) {
    if (rc != nvml::kSuccess) {
      *whys[i] = m.error("nvmlDeviceGetFieldValues", rc);
    } else if (i >= 2 && fields[i].nvmlReturn == -1) {
      *whys[i] = m.nvlinkError;
    } else if (fields[i].nvmlReturn != nvml::kSuccess) {
      *whys[i] = m.error(fmt::format("field {}", fields[i].fieldId).c_str(), fields[i].nvmlReturn);
    } else if (fields[i].valueType == nvml::kUnsignedInt) {
      *targets[i] = fields[i].value.uiVal;
      bits[i] = 32;
    } else if (fields[i].valueType == nvml::kUnsignedLongLong || fields[i].valueType == nvml::kUnsignedLong) {
      *targets[i] = fields[i].value.ullVal;
      bits[i] = 64;
    } else {
      *whys[i] = fmt::format("field {} has unexpected value type {}", fields[i].fieldId, fields[i].valueType);
    }
  }
  r.counterBits = bits[0];
  // The NVLink pair is used only whole (a rate from one direction would be a guess about the other).
  if (!r.nvlinkTxKiB || !r.nvlinkRxKiB || bits[2] != 64 || bits[3] != 64) {
    r.nvlinkWhy = !nvlinkTxWhy.empty()   ? nvlinkTxWhy
                  : !nvlinkRxWhy.empty() ? nvlinkRxWhy
                                         : "NVLink counters are not 64-bit";
    r.nvlinkTxKiB.reset();
    r.nvlinkRxKiB.reset();
  }
  if (!m.linkRead || nowNs - m.linkReadNs >= m.linkRefreshNs) {
    m.linkRead = true;
    m.linkReadNs = nowNs;
    unsigned gen = 0, width = 0;
    nvml::Return g = m.linkGenFn(m.device, &gen);
    nvml::Return w = g == nvml::kSuccess ? m.linkWidthFn(m.device, &width) : g;
    if (g == nvml::kSuccess && w == nvml::kSuccess) {
      m.linkGen = gen;
      m.linkWidth = width;
      m.linkWhy.clear();
    } else {
      m.linkGen = m.linkWidth = 0;
      m.linkWhy = m.error(
          g != nvml::kSuccess ? "nvmlDeviceGetCurrPcieLinkGeneration" : "nvmlDeviceGetCurrPcieLinkWidth",
          g != nvml::kSuccess ? g : w);
    }
  }
  r.linkGen = m.linkGen;
  r.linkWidth = m.linkWidth;
  r.linkWhy = m.linkWhy;
  unsigned replays = 0;
  const nvml::Return rr = m.replayFn(m.device, &replays);
  if (rr == nvml::kSuccess) {
    r.replays = replays;
  } else {
    r.replayWhy = m.error("nvmlDeviceGetPcieReplayCounter", rr);
  }
  counters_.update(r, out);
}

}  // namespace ringguard
