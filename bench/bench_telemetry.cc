// bench_telemetry: what the downgrade engine costs a training step (issue 16's goal: < 0.5% of a step).
//   bench_telemetry [-n samples] [--interval-ms 20] [--step-ms 100] [--seconds 2]
// Prints (1) one sample of every source, on the calling thread (NVML's field read where NVML exists; on a
// machine without it the source reports missing and costs only the check), (2) one onStep of the engine on
// the default rules, (3) the sampler thread's share of one core at the interval, and (4) what a step of
// --step-ms pays: one onStep plus the sampler's share of the step's duration. No GPU needed; run it on the
// GPU machine for NVML's figure.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "ringguard/policy/engine.h"
#include "ringguard/policy/rules.h"
#include "ringguard/telemetry/memory.h"
#include "ringguard/telemetry/pcie.h"
#include "ringguard/telemetry/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringguard;
  CLI::App app{"bench_telemetry: cost of the telemetry sampler and the policy engine"};
  int samples = 2000;
  int intervalMs = 20;
  double stepMs = 100.0;
  double seconds = 2.0;
  unsigned nvmlDevice = 0;
  app.add_option("-n,--samples", samples, "samples and engine steps timed on the calling thread")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  app.add_option("--interval-ms", intervalMs, "sampler interval for the thread measurement")
      ->check(CLI::Range(1, 60000));
  app.add_option("--step-ms", stepMs, "training step time the overhead is stated against")
      ->check(bench::finitePositive());
  app.add_option("--seconds", seconds, "how long the sampler thread runs")->check(bench::finitePositive());
  app.add_option("--nvml-device", nvmlDevice, "NVML device index");
  CLI11_PARSE(app, argc, argv);

  Sampler sampler{std::chrono::milliseconds(intervalMs)};
  NvmlPcieSource* nvml = sampler.add(NvmlPcieSource::create(nvmlDevice));
  PoolSource* pool = sampler.add(std::make_unique<PoolSource>("device"));
  TorchAllocatorSource* torch = sampler.add(std::make_unique<TorchAllocatorSource>());
  PoolStatsSample ps;
  ps.reservedBytes = 1 << 30;
  ps.usedBytes = 1 << 29;
  pool->feed(ps);
  TorchAllocatorStats ts;
  ts.reservedBytes = 8ull << 30;
  ts.allocatedBytes = 6ull << 30;
  ts.inactiveSplitBytes = 1ull << 30;
  torch->feed(ts);
  std::printf("NVML: %s\n", nvml->available() ? "available" : nvml->why().c_str());

  // (1) One sample of every source.
  std::vector<double> us;
  us.reserve(static_cast<size_t>(samples));
  for (int i = 0; i < samples; ++i) {
    const auto t0 = Clock::now();
    Sample s = sampler.sampleNow();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (s.signals.empty()) return 1;
  }
  std::printf("sample (all sources, calling thread): median %.2f us, p99 %.2f us, %zu signals\n",
              percentile(us, 0.5), percentile(us, 0.99), sampler.latest().signals.size());

  // (2) One engine step on the default rules (no agreement: that is one small allreduce, priced by
  // bench_collectives).
  PolicyRules rules;
  Status st = parseRules(defaultRulesJson(), "built-in default", "", &rules);
  if (!st.isOk()) {
    std::fprintf(stderr, "%s\n", st.toString().c_str());
    return 1;
  }
  PolicyEngine engine(rules);
  const Sample latest = sampler.latest();
  std::vector<double> stepUs;
  for (int i = 0; i < samples; ++i) {
    const auto t0 = Clock::now();
    st = engine.onStep(latest);
    stepUs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!st.isOk()) return 1;
  }
  std::printf("engine onStep (default rules): median %.2f us, p99 %.2f us\n", percentile(stepUs, 0.5),
              percentile(stepUs, 0.99));

  // (3) The sampler thread at its interval: time spent in the sources per second of wall time.
  const SamplerStats before = sampler.stats();
  const auto w0 = Clock::now();
  sampler.start();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  sampler.stop();
  const double wallNs = std::chrono::duration<double, std::nano>(Clock::now() - w0).count();
  const SamplerStats after = sampler.stats();
  const double busyNs = static_cast<double>(after.totalNs - before.totalNs);
  const double share = busyNs / wallNs;
  std::printf("sampler thread at %d ms: %llu samples in %.2f s, %.4f%% of one core, slowest sample %.2f us\n",
              intervalMs, static_cast<unsigned long long>(after.samples - before.samples), wallNs / 1e9,
              100.0 * share, static_cast<double>(after.maxNs) / 1e3);

  // (4) Per training step.
  const double perStepUs = percentile(stepUs, 0.5) + share * stepMs * 1e3;
  std::printf("per %.0f ms step: %.2f us = %.4f%% (goal < 0.5%%)\n", stepMs, perStepUs,
              100.0 * perStepUs / (stepMs * 1e3));
  return 0;
}
