#pragma once
// PCIe telemetry: byte rates and utilisation from NVML's TX/RX byte counters (field values 197/198), the
// link's current generation and width, and its replay counter.
//
// NVML is loaded with dlopen("libnvidia-ml.so.1") at run time, so the library builds and runs on machines
// without it; there every PCIe signal is reported missing. nvmlDeviceGetPcieThroughput is never called: it
// blocks for its ~20 ms sampling window, a field-value read does not (docs/PERFORMANCE.md, "The downgrade
// engine").
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/telemetry/signal.h"
#include "ringguard/telemetry/source.h"
#include "ringguard/telemetry/wrapping_counter.h"

namespace ringguard {

// Payload bytes per second one direction of a PCIe link can carry at generation `gen` (1..6) and `width`
// lanes, after line encoding (8b/10b for gen 1-2, 128b/130b for gen 3-5, 242/256 FLIT for gen 6); 0 for
// an unknown generation or a zero width. Gen 5 x16: 63.0e9.
double pcieLinkBytesPerSecond(unsigned gen, unsigned width);

// One raw reading of the counters (what NVML returned); a field that could not be read is nullopt, with
// the reason in the matching *Why.
struct PcieReading {
  int64_t timeNs = 0;
  std::optional<uint64_t> txBytes, rxBytes;  // raw counter values (they wrap at 2^counterBits)
  unsigned counterBits = 32;
  std::string txWhy, rxWhy;
  unsigned linkGen = 0, linkWidth = 0;  // 0: unknown
  std::string linkWhy;
  std::optional<uint64_t> replays;
  std::string replayWhy;
  // NVLink data throughput counters summed over the device's links, in KiB (NVML fields 138/139 with the
  // all-links scope); nullopt with the reason where the device has no NVLink or NVML does not report them.
  std::optional<uint64_t> nvlinkTxKiB, nvlinkRxKiB;
  std::string nvlinkWhy;
};

// Turns consecutive readings into signals. Framework- and NVML-free, so wrap handling is tested with
// synthetic counter sequences. Signals (all always appended, missing when they cannot be computed):
//   pcie.tx_bytes_per_s, pcie.rx_bytes_per_s   bytes/s since the previous reading
//   pcie.tx_util, pcie.rx_util, pcie.util      fraction of the link's maximum (util = the larger)
//   pcie.link_gen, pcie.link_width, pcie.link_max_bytes_per_s
//   pcie.replays                               replay counter (count since boot, as NVML reports it)
//   nvlink.tx_bytes_per_s, nvlink.rx_bytes_per_s   NVLink data bytes/s over all links (no link maximum:
//                                              no utilisation; missing on devices without NVLink)
// A rate is missing on the first reading, when time did not advance, and when the interval was so long
// that the counter could have wrapped more than once at the link's maximum rate (the delta is ambiguous).
class PcieCounters {
 public:
  void update(const PcieReading& r, std::vector<Signal>* out);
  uint64_t wraps() const { return tx_.wraps() + rx_.wraps() + nvlinkTx_.wraps() + nvlinkRx_.wraps(); }
  uint64_t ambiguous() const { return ambiguous_; }  // rates dropped as possibly aliased

 private:
  // `prefix`.`dir`_bytes_per_s from a counter of `unitBytes`-byte units, and `prefix`.`dir`_util when
  // linkMax > 0 (utilOut: -1 when not computed).
  void rate(const char* prefix, const char* dir, const std::optional<uint64_t>& raw, unsigned bits,
            double unitBytes, const std::string& why, WrappingCounter* counter, int64_t* lastNs,
            int64_t nowNs, double linkMax, bool withUtil, std::vector<Signal>* out, double* utilOut);
  WrappingCounter tx_{32}, rx_{32}, nvlinkTx_{64}, nvlinkRx_{64};
  int64_t txLastNs_ = 0, rxLastNs_ = 0, nvlinkTxLastNs_ = 0, nvlinkRxLastNs_ = 0;
  uint64_t ambiguous_ = 0;
};

// The NVML source for one device, by NVML index (PCI bus order, which ignores CUDA_VISIBLE_DEVICES) or by
// PCI bus id ("0000:1b:00.0", what cudaDeviceGetPCIBusId gives for a CUDA device).
class NvmlPcieSource : public TelemetrySource {
 public:
  // Never fails: without NVML, or when the device cannot be opened, the source reports its signals as
  // missing with the reason (dlopen's or NVML's error text). `linkRefreshNs`: how often the link's
  // generation and width are re-read (they change when the link retrains, e.g. down to gen 1 at idle).
  static std::unique_ptr<NvmlPcieSource> create(unsigned device, int64_t linkRefreshNs = 1000000000);
  static std::unique_ptr<NvmlPcieSource> createByPciBusId(const std::string& busId,
                                                          int64_t linkRefreshNs = 1000000000);
  ~NvmlPcieSource() override;
  const char* name() const override { return "nvml"; }
  void sample(int64_t nowNs, std::vector<Signal>* out) override;

  bool available() const;          // NVML loaded and the device opened
  const std::string& why() const;  // why not, when !available()
  const PcieCounters& counters() const { return counters_; }

  struct Impl;

 private:
  explicit NvmlPcieSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  PcieCounters counters_;
};

}  // namespace ringguard
