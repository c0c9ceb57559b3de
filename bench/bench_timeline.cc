// bench_timeline: the cost of recording trace events (issue 18's goal: the timeline adds < 2% to a 1 MiB
// host allreduce). An end-to-end A/B of bench_collectives cannot resolve 2% on a 2-core machine (its
// run-to-run spread is larger), so this measures the recording itself, per event, with the timeline off
// (one relaxed load) and on (clock reads + a fetch_add into the bounded buffer), from 1 and 2 threads, and
// prints the cost per collective for a given number of events per collective (bench_collectives with
// RINGGUARD_TIMELINE set reports how many a collective records: docs/PERFORMANCE.md).
//
//   build/bench/bench_timeline --events 2000000 --threads 2 --per-collective 6
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "core/trace_events.h"

namespace {

using Clock = std::chrono::steady_clock;

// Records `n` slice-like spans (what the pipeline records per received slice) on each of `threads` threads;
// returns nanoseconds per event.
double timeSpans(int threads, long n) {
  const auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([n, t] {
      for (long i = 0; i < n; ++i) {
        ringguard::trace::Span span(ringguard::trace::Kind::kSlice, "slice", uint32_t(t + 1), uint64_t(i));
        if (ringguard::trace::on()) {
          span.event().a = int32_t(i & 7);
          span.event().value = 4096;
        }
      }
    });
  }
  for (auto& th : ts) th.join();
  const double ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  return ns / double(n);  // wall time per event on each thread (the threads record at once)
}

}  // namespace

int main(int argc, char** argv) {
  long events = 2000000;
  int threads = 1;
  double perCollective = 6;
  double collectiveUs = 500;
  CLI::App app{"bench_timeline: cost of recording trace events"};
  app.add_option("--events", events, "events recorded per thread in each phase")
      ->check(CLI::Range(1L, std::numeric_limits<long>::max()));
  app.add_option("--threads", threads, "recording threads (communicators' runners)")
      ->check(CLI::Range(1, 64));
  app.add_option("--per-collective", perCollective, "events one collective records (bench_collectives)")
      ->check(ringguard::bench::finitePositive());
  app.add_option("--collective-us", collectiveUs, "the collective's time, for the overhead column")
      ->check(ringguard::bench::finitePositive());
  CLI11_PARSE(app, argc, argv);

  const double off = timeSpans(threads, events);
  ringguard::trace::start(size_t(events) * size_t(threads));  // every event fits: the recording path
  const double on = timeSpans(threads, events);
  const double dropped = timeSpans(threads, events);  // the buffer is full now: the dropping path
  std::printf("# bench_timeline: threads=%d events/thread=%ld recorded=%zu dropped=%llu\n", threads, events,
              ringguard::trace::snapshot().size(),
              static_cast<unsigned long long>(ringguard::trace::dropped()));
  std::printf("%-10s %12s %18s %14s\n", "timeline", "ns/event", "us/collective", "overhead");
  for (auto [name, ns] : {std::pair<const char*, double>{"off", off}, {"on", on}, {"full", dropped}}) {
    const double us = ns * perCollective / 1000.0;
    std::printf("%-10s %12.1f %18.3f %13.3f%%\n", name, ns, us, 100.0 * us / collectiveUs);
  }
  std::printf(
      "summary: timeline_on_ns_per_event=%.1f overhead_pct=%.3f (per_collective=%.0f events, "
      "collective=%.0f us)\n",
      on, 100.0 * on * perCollective / 1000.0 / collectiveUs, perCollective, collectiveUs);
  return 0;
}
