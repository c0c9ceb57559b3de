// Telemetry without a GPU: counter wrap from synthetic sequences, link rates, the fragmentation measures,
// torch's allocator under both backends, the sampler thread, traces, and NVML reported missing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "ringguard/telemetry/memory.h"
#include "ringguard/telemetry/pcie.h"
#include "ringguard/telemetry/sampler.h"
#include "ringguard/telemetry/trace.h"
#include "ringguard/telemetry/wrapping_counter.h"

namespace ringguard {
namespace {

constexpr uint64_t k32 = uint64_t{1} << 32;

TEST(WrappingCounter, DeltasAcrossWraps) {
  WrappingCounter c(32);
  EXPECT_EQ(c.update(k32 - 100), 0u);  // primes
  EXPECT_EQ(c.update(k32 - 10), 90u);
  EXPECT_EQ(c.update(5), 15u);  // wrapped: 10 to the top, 5 past it
  EXPECT_EQ(c.update(5), 0u);
  EXPECT_EQ(c.update(k32 - 1), k32 - 6);  // the largest step one reading can express
  EXPECT_EQ(c.update(0), 1u);
  EXPECT_EQ(c.wraps(), 2u);
  EXPECT_EQ(c.total(), 90u + 15u + (k32 - 6) + 1u);
  // Raw values wider than the counter are cut to its width, as the hardware would.
  EXPECT_EQ(c.update(k32 + 7), 7u);
}

TEST(WrappingCounter, NarrowAndFullWidth) {
  WrappingCounter c8(8);
  c8.update(250);
  EXPECT_EQ(c8.update(4), 10u);
  WrappingCounter c64(64);
  c64.update(~uint64_t{0} - 1);
  EXPECT_EQ(c64.update(3), 5u);
}

TEST(Pcie, LinkRates) {
  EXPECT_DOUBLE_EQ(pcieLinkBytesPerSecond(1, 16), 2.5e9 * 0.8 / 8 * 16);
  EXPECT_DOUBLE_EQ(pcieLinkBytesPerSecond(3, 16), 8e9 * 128 / 130 / 8 * 16);
  EXPECT_DOUBLE_EQ(pcieLinkBytesPerSecond(5, 16), 32e9 * 128 / 130 / 8 * 16);  // 63.0e9: the H200's link
  EXPECT_DOUBLE_EQ(pcieLinkBytesPerSecond(6, 8), 64e9 * 242 / 256 / 8 * 8);
  EXPECT_EQ(pcieLinkBytesPerSecond(0, 16), 0.0);
  EXPECT_EQ(pcieLinkBytesPerSecond(7, 16), 0.0);
  EXPECT_EQ(pcieLinkBytesPerSecond(4, 0), 0.0);
}

const Signal& get(const std::vector<Signal>& v, const std::string& name) {
  for (const Signal& s : v) {
    if (s.name == name) return s;
  }
  static Signal none;
  ADD_FAILURE() << "no signal " << name;
  return none;
}

// 50 GB/s for 20 ms per reading = 1e9 bytes: the 32-bit counter wraps every ~4.3 readings.
TEST(Pcie, RatesThroughWrapsAtFiftyGBps) {
  PcieCounters pc;
  const uint64_t perReading = 1000000000;
  uint64_t trueCount = k32 - 300000000;  // starts just below a wrap
  for (int i = 0; i < 20; ++i) {
    PcieReading r;
    r.timeNs = int64_t{i} * 20000000;
    r.txBytes = trueCount % k32;
    r.rxBytes = (trueCount / 2) % k32;  // 25 GB/s the other way
    r.linkGen = 5;
    r.linkWidth = 16;
    r.replays = 7;
    std::vector<Signal> out;
    pc.update(r, &out);
    if (i == 0) {
      EXPECT_TRUE(get(out, "pcie.tx_bytes_per_s").missing);
      EXPECT_EQ(get(out, "pcie.tx_bytes_per_s").why, "first reading (a rate needs two)");
      EXPECT_TRUE(get(out, "pcie.util").missing);
    } else {
      EXPECT_EQ(get(out, "pcie.tx_bytes_per_s").value, 50e9) << i;
      EXPECT_EQ(get(out, "pcie.rx_bytes_per_s").value, 25e9) << i;
      EXPECT_DOUBLE_EQ(get(out, "pcie.tx_util").value, 50e9 / pcieLinkBytesPerSecond(5, 16));
      EXPECT_DOUBLE_EQ(get(out, "pcie.util").value, 50e9 / pcieLinkBytesPerSecond(5, 16));
    }
    EXPECT_EQ(get(out, "pcie.link_gen").value, 5);
    EXPECT_EQ(get(out, "pcie.replays").value, 7);
    trueCount += perReading;
  }
  EXPECT_GE(pc.wraps(), 4u);
  EXPECT_EQ(pc.ambiguous(), 0u);
}

TEST(Pcie, IntervalLongerThanAWrapIsMissingNotAliased) {
  // At gen 5 x16 (63.0e9 B/s) 2^32 bytes take 68.2 ms: 60 ms is unambiguous, 100 ms is not.
  PcieCounters pc;
  PcieReading r;
  r.linkGen = 5;
  r.linkWidth = 16;
  r.txBytes = 0;
  r.rxBytes = 0;
  std::vector<Signal> out;
  pc.update(r, &out);
  r.timeNs = 60000000;
  r.txBytes = 600000000;
  r.rxBytes = 0;
  out.clear();
  pc.update(r, &out);
  EXPECT_EQ(get(out, "pcie.tx_bytes_per_s").value, 10e9);
  r.timeNs += 100000000;
  out.clear();
  pc.update(r, &out);
  EXPECT_TRUE(get(out, "pcie.tx_bytes_per_s").missing);
  EXPECT_NE(get(out, "pcie.tx_bytes_per_s").why.find("may have wrapped more than once"), std::string::npos);
  EXPECT_TRUE(get(out, "pcie.util").missing);
  EXPECT_EQ(pc.ambiguous(), 2u);  // both directions
}

TEST(Pcie, MissingFieldsAndUnknownLink) {
  PcieCounters pc;
  PcieReading r;
  r.txBytes = 0;
  r.rxWhy = "field 198: Not Supported";
  r.replayWhy = "no replay counter";
  std::vector<Signal> out;
  pc.update(r, &out);
  r.timeNs = 1000000;
  r.txBytes = 1000;  // 1 MB/s, no link information
  out.clear();
  pc.update(r, &out);
  EXPECT_EQ(get(out, "pcie.tx_bytes_per_s").value, 1e6);
  EXPECT_TRUE(get(out, "pcie.tx_util").missing);
  EXPECT_TRUE(get(out, "pcie.rx_bytes_per_s").missing);
  EXPECT_EQ(get(out, "pcie.rx_bytes_per_s").why, "field 198: Not Supported");
  EXPECT_TRUE(get(out, "pcie.util").missing);
  EXPECT_TRUE(get(out, "pcie.link_gen").missing);
  EXPECT_TRUE(get(out, "pcie.link_max_bytes_per_s").missing);
  EXPECT_EQ(get(out, "pcie.replays").why, "no replay counter");
  // A time that does not advance gives no rate.
  out.clear();
  pc.update(r, &out);
  EXPECT_TRUE(get(out, "pcie.tx_bytes_per_s").missing);
}

TEST(Pcie, OneDirectionMissingDoesNotHideTheOther) {
  PcieCounters pc;
  PcieReading r;
  r.linkGen = 4;
  r.linkWidth = 16;
  r.txBytes = 0;
  r.rxWhy = "unsupported";
  std::vector<Signal> out;
  pc.update(r, &out);
  r.timeNs = 50000000;  // 50 ms: under the 136 ms a gen 4 x16 link needs for 2^32 bytes
  r.txBytes = 150000000;
  out.clear();
  pc.update(r, &out);
  EXPECT_DOUBLE_EQ(get(out, "pcie.util").value, 3e9 / pcieLinkBytesPerSecond(4, 16));
}

// NVLink: 64-bit KiB counters summed over the links, rates in bytes/s, no utilisation; missing as a pair
// with the reason (a device without NVLink), without touching the PCIe signals.
TEST(Pcie, NvlinkRatesFromKiBCountersAndMissingWithTheReason) {
  PcieCounters pc;
  PcieReading r;
  r.txBytes = 0;
  r.rxBytes = 0;
  r.nvlinkTxKiB = (uint64_t{1} << 40);  // a large 64-bit value: no wrap involved
  r.nvlinkRxKiB = 5;
  std::vector<Signal> out;
  pc.update(r, &out);
  EXPECT_EQ(get(out, "nvlink.tx_bytes_per_s").why, "first reading (a rate needs two)");
  r.timeNs = 10000000;        // 10 ms
  *r.nvlinkTxKiB += 3000000;  // 3e6 KiB in 10 ms = 307.2 GB/s
  *r.nvlinkRxKiB += 1000;
  out.clear();
  pc.update(r, &out);
  EXPECT_EQ(get(out, "nvlink.tx_bytes_per_s").value, 3e6 * 1024 * 100);
  EXPECT_EQ(get(out, "nvlink.rx_bytes_per_s").value, 1000.0 * 1024 * 100);
  for (const Signal& s : out) EXPECT_NE(s.name, "nvlink.tx_util");  // no link maximum, no utilisation
  r.timeNs = 20000000;
  r.nvlinkTxKiB.reset();
  r.nvlinkRxKiB.reset();
  r.nvlinkWhy = "field 138 failed: Not Supported (NVML error 3)";
  r.txBytes = 1000;
  out.clear();
  pc.update(r, &out);
  EXPECT_TRUE(get(out, "nvlink.rx_bytes_per_s").missing);
  EXPECT_EQ(get(out, "nvlink.rx_bytes_per_s").why, r.nvlinkWhy);
  EXPECT_FALSE(get(out, "pcie.tx_bytes_per_s").missing);
}

TEST(Pcie, NvmlSourceReportsMissingWithoutNvml) {
  auto src = NvmlPcieSource::create(0);
  std::vector<Signal> out;
  src->sample(0, &out);
  ASSERT_EQ(out.size(), 11u);  // every declared signal, present or not (9 PCIe, 2 NVLink)
  if (!src->available()) {
    EXPECT_FALSE(src->why().empty());
    for (const Signal& s : out) {
      EXPECT_TRUE(s.missing) << s.name;
      EXPECT_EQ(s.why, src->why()) << s.name;
    }
  }
}

TEST(PoolFragmentation, StrandedIdleBytes) {
  StreamOrderedFragmentation f;
  PoolStatsSample s;
  s.reservedBytes = 100;
  s.usedBytes = 60;
  EXPECT_EQ(f.update(s), 0.0);  // one reading tells nothing
  EXPECT_EQ(StreamOrderedFragmentation::idleFraction(s), 0.4);
  // The pool grew by 20 although 40 idle bytes covered the 20 newly used ones: they were stranded.
  s.reservedBytes = 120;
  s.usedBytes = 80;
  EXPECT_EQ(f.update(s), 40.0 / 120.0);
  EXPECT_EQ(f.strandedEvents(), 1u);
  // Use grows into the idle bytes: the estimate decays with the idle fraction.
  s.usedBytes = 100;
  EXPECT_EQ(f.update(s), 20.0 / 120.0);
  // Frees alone raise the idle fraction, not the estimate.
  s.usedBytes = 60;
  EXPECT_EQ(f.update(s), 20.0 / 120.0);
  // Growth that idle bytes could not have covered (120 more used, 60 idle) is no evidence.
  s.reservedBytes = 200;
  s.usedBytes = 180;
  EXPECT_EQ(f.update(s), 20.0 / 200.0);
  EXPECT_EQ(f.strandedEvents(), 1u);
  // A trim to nothing idle ends it.
  s.reservedBytes = 180;
  EXPECT_EQ(f.update(s), 0.0);
}

TEST(PoolFragmentation, FailureWithIdleBytes) {
  StreamOrderedFragmentation f;
  PoolStatsSample s;
  s.reservedBytes = 1000;
  s.usedBytes = 250;
  s.allocationFailures = 0;
  f.update(s);
  s.allocationFailures = 1;
  EXPECT_EQ(f.update(s), 0.75);
  // Failures without idle bytes are plain exhaustion.
  StreamOrderedFragmentation g;
  s.usedBytes = 1000;
  s.allocationFailures = 0;
  g.update(s);
  s.allocationFailures = 3;
  EXPECT_EQ(g.update(s), 0.0);
}

TEST(PoolSource, MissingUntilFed) {
  PoolSource src("device");
  std::vector<Signal> out;
  src.sample(0, &out);
  ASSERT_EQ(out.size(), 6u);
  for (const Signal& s : out) {
    EXPECT_TRUE(s.missing) << s.name;
    EXPECT_EQ(s.why, "pool statistics were never fed");
  }
  PoolStatsSample p;
  p.reservedBytes = 64;
  p.usedBytes = 48;
  p.highWaterBytes = 60;
  src.feed(p);
  out.clear();
  src.sample(0, &out);
  EXPECT_EQ(get(out, "pool.device.reserved_bytes").value, 64);
  EXPECT_EQ(get(out, "pool.device.idle_fraction").value, 0.25);
  EXPECT_EQ(get(out, "pool.device.fragmentation").value, 0.0);
  EXPECT_EQ(get(out, "pool.device.high_water_bytes").value, 60);
  EXPECT_TRUE(get(out, "pool.device.allocation_failures").missing);  // the pool does not count them
  EXPECT_EQ(get(out, "pool.device.allocation_failures").why, "the pool does not count failed allocations");
}

TEST(TorchAllocator, AllocConfDetection) {
  EXPECT_TRUE(allocConfSelectsAsync("backend:cudaMallocAsync"));
  EXPECT_TRUE(allocConfSelectsAsync("expandable_segments:True, backend : cudaMallocAsync"));
  EXPECT_FALSE(allocConfSelectsAsync("backend:native"));
  EXPECT_FALSE(allocConfSelectsAsync("backend:cudaMallocAsyncX"));
  EXPECT_FALSE(allocConfSelectsAsync(""));
  ::unsetenv("PYTORCH_ALLOC_CONF");
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,backend:cudaMallocAsync", 1);
  EXPECT_TRUE(asyncAllocatorFromEnv());
  ::setenv("PYTORCH_ALLOC_CONF", "backend:native", 1);  // the newer name wins
  EXPECT_FALSE(asyncAllocatorFromEnv());
  ::unsetenv("PYTORCH_ALLOC_CONF");
  ::unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_FALSE(asyncAllocatorFromEnv());
}

TEST(TorchAllocator, NativeMeasure) {
  TorchAllocatorSource src;
  std::vector<Signal> out;
  src.sample(0, &out);
  ASSERT_EQ(out.size(), 7u);
  for (const Signal& s : out) EXPECT_TRUE(s.missing) << s.name;
  TorchAllocatorStats t;
  t.reservedBytes = 1 << 30;
  t.allocatedBytes = 1 << 29;
  t.inactiveSplitBytes = 1 << 28;
  t.numAllocRetries = 3;
  src.feed(t);
  out.clear();
  src.sample(0, &out);
  EXPECT_EQ(get(out, "torch.fragmentation").value, 0.25);
  EXPECT_EQ(get(out, "torch.num_alloc_retries").value, 3);
  EXPECT_EQ(get(out, "torch.async_backend").value, 0);
}

TEST(TorchAllocator, AsyncBackendUsesThePoolMeasure) {
  TorchAllocatorSource src;
  TorchAllocatorStats t;
  t.asyncBackend = true;
  t.reservedBytes = 100;
  t.allocatedBytes = 60;
  src.feed(t);
  t.reservedBytes = 120;
  t.allocatedBytes = 80;
  src.feed(t);
  std::vector<Signal> out;
  src.sample(0, &out);
  EXPECT_EQ(get(out, "torch.fragmentation").value, 40.0 / 120.0);
  // Not tracked there: reported missing, never a zero.
  EXPECT_TRUE(get(out, "torch.inactive_split_bytes").missing);
  EXPECT_TRUE(get(out, "torch.num_alloc_retries").missing);
  EXPECT_FALSE(get(out, "torch.reserved_bytes").missing);
  EXPECT_EQ(get(out, "torch.async_backend").value, 1);
  // A backend that reports no reserved bytes at all gives no measure.
  TorchAllocatorSource zero;
  TorchAllocatorStats z;
  z.asyncBackend = true;
  zero.feed(z);
  out.clear();
  zero.sample(0, &out);
  EXPECT_TRUE(get(out, "torch.fragmentation").missing);
}

class CountingSource : public TelemetrySource {
 public:
  const char* name() const override { return "count"; }
  void sample(int64_t, std::vector<Signal>* out) override {
    out->push_back(Signal::present("count.n", static_cast<double>(++n), "count", "count"));
  }
  std::atomic<int> n{0};
};

TEST(Sampler, ThreadSamplesAtTheInterval) {
  Sampler s(std::chrono::milliseconds(2), 4);
  CountingSource* c = s.add(std::make_unique<CountingSource>());
  EXPECT_EQ(s.latest().timeNs, 0);
  s.start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (c->n < 6 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.stop();
  const int taken = c->n;
  ASSERT_GE(taken, 6);
  const SamplerStats st = s.stats();
  EXPECT_EQ(st.samples, static_cast<uint64_t>(taken));
  const Sample last = s.latest();
  ASSERT_NE(last.find("count.n"), nullptr);
  EXPECT_EQ(last.find("count.n")->value, taken);
  EXPECT_EQ(s.history().size(), 4u);
  EXPECT_EQ(s.history().front().find("count.n")->value, taken - 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(c->n, taken);  // stopped means stopped
  s.stop();                // idempotent
}

TEST(Sampler, IntervalFromEnv) {
  std::chrono::nanoseconds ns{};
  ::unsetenv("RINGGUARD_TELEMETRY_INTERVAL_MS");
  ASSERT_TRUE(telemetryIntervalFromEnv(&ns).isOk());
  EXPECT_EQ(ns, std::chrono::milliseconds(20));
  ::setenv("RINGGUARD_TELEMETRY_INTERVAL_MS", "5", 1);
  ASSERT_TRUE(telemetryIntervalFromEnv(&ns).isOk());
  EXPECT_EQ(ns, std::chrono::milliseconds(5));
  for (const char* bad : {"0", "60001", "ten", "5ms", ""}) {
    ::setenv("RINGGUARD_TELEMETRY_INTERVAL_MS", bad, 1);
    Status st = telemetryIntervalFromEnv(&ns);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find(std::string("RINGGUARD_TELEMETRY_INTERVAL_MS='") + bad + "'"),
              std::string::npos);
  }
  ::unsetenv("RINGGUARD_TELEMETRY_INTERVAL_MS");
}

TEST(Trace, RoundTripAndErrors) {
  Sample s;
  s.timeNs = 1500000;
  s.signals.push_back(Signal::present("pcie.util", 0.5, "fraction", "nvml"));
  s.signals.push_back(Signal::absent("torch.fragmentation", "fraction", "torch", "never fed"));
  TraceRecord r;
  ASSERT_TRUE(parseTraceLine(traceLine(s, 7), 1, &r).isOk());
  EXPECT_EQ(r.sample.timeNs, 1500000);
  EXPECT_EQ(r.step, 7);
  ASSERT_NE(r.sample.find("pcie.util"), nullptr);
  EXPECT_EQ(r.sample.find("pcie.util")->value, 0.5);
  ASSERT_NE(r.sample.find("torch.fragmentation"), nullptr);
  EXPECT_TRUE(r.sample.find("torch.fragmentation")->missing);
  EXPECT_EQ(r.sample.find("torch.fragmentation")->why, "never fed");

  struct Bad {
    const char* line;
    const char* expect;
  } bad[] = {
      {"{", "trace line 3: not valid JSON at byte 1"},
      {"[]", "trace line 3: expected an object"},
      {"{\"signals\": {}}", "key 't_ms': missing or not a number"},
      {"{\"t_ms\": 0, \"signals\": []}", "key 'signals': missing or not an object"},
      {"{\"t_ms\": 0, \"signals\": {\"a\": \"x\"}}", "key 'signals.a': expected a number or null, got \"x\""},
      {"{\"t_ms\": 0, \"step\": -1, \"signals\": {}}", "key 'step': expected a non-negative integer"},
      {"{\"t_ms\": 0, \"signals\": {}, \"missing\": 3}", "key 'missing'"},
  };
  for (const Bad& b : bad) {
    Status st = parseTraceLine(b.line, 3, &r);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << b.line;
    EXPECT_NE(st.message().find(b.expect), std::string::npos) << st.message();
  }
  std::vector<TraceRecord> recs;
  EXPECT_NE(readTrace("/nonexistent/trace.jsonl", &recs)
                .message()
                .find("trace file '/nonexistent/trace.jsonl' cannot be read"),
            std::string::npos);
}

}  // namespace
}  // namespace ringguard
