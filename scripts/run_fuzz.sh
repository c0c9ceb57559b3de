#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz (issue 17; docs/RELIABILITY.md, "Fuzzing"), not part of CI (CI replays
# their seed corpus: ctest label fuzz). Builds them with clang (libFuzzer + ASan + UBSan, every layer
# instrumented) in a build directory of their own, then runs each for a given time, one after another on one
# core, and prints per target the executions, the inputs in its corpus and the crashes found.
# Usage: scripts/run_fuzz.sh [seconds per target (default 60)] [target...]   (default: every target)
#   targets: trailer control_frame fingerprint options env fault_schedule policy_rules
# Environment: RINGGUARD_FUZZ_DIR build directory (default <repo>/build-fuzz); RINGGUARD_FUZZ_MERGE=1 also
# merges the inputs that add coverage into tests/fuzz/corpus/<target>/ (libFuzzer -merge=1; review the size
# before committing); RINGGUARD_FUZZ_JOBS build parallelism (default: all cores);
# RINGGUARD_FUZZ_ARGS extra libFuzzer flags (e.g. "-max_len=256").
# Each run's corpus grows in <dir>/corpus/<target>/ (seeded from the committed one), its log is
# <dir>/logs/<target>.log and a crashing input is written to <dir>/artifacts/<target>/ (replay it with
# <dir>/tests/fuzz/ringguard_fuzz_<target> <file>). Exits non-zero when a target crashed.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
shift || true
all_targets=(trailer control_frame fingerprint options env fault_schedule policy_rules)
if [[ $# -gt 0 ]]; then targets=("$@"); else targets=("${all_targets[@]}"); fi
dir="${RINGGUARD_FUZZ_DIR:-$repo_root/build-fuzz}"
jobs="${RINGGUARD_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}"
extra=()
if [[ -n "${RINGGUARD_FUZZ_ARGS:-}" ]]; then read -r -a extra <<<"$RINGGUARD_FUZZ_ARGS"; fi

cxx="$(command -v clang++ || true)"
cc="$(command -v clang || true)"
if [[ -z "$cxx" || -z "$cc" ]]; then
  echo "run_fuzz: clang/clang++ not found (apt-get install clang)" >&2
  exit 2
fi

t0=$SECONDS
mkdir -p "$dir"
# Host layers only: the targets need core and the control channel. RelWithDebInfo for readable reports, less
# its -DNDEBUG: a fuzzed input that breaks an assert() is a finding (until 2026-12-06 they were compiled out).
cmake -S "$repo_root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_C_COMPILER="$cc" -DRINGGUARD_FUZZ=ON -DRINGGUARD_WITH_CUDA=OFF -DRINGGUARD_WITH_TORCH=OFF \
  -DRINGGUARD_WITH_MPI=OFF -DRINGGUARD_BUILD_BENCH=OFF -DRINGGUARD_BUILD_EXAMPLES=OFF >"$dir/configure.log" 2>&1 ||
  { cat "$dir/configure.log" >&2; exit 1; }
build_targets=()
for t in "${targets[@]}"; do build_targets+=("ringguard_fuzz_$t"); done
cmake --build "$dir" --parallel "$jobs" --target "${build_targets[@]}"
echo "run_fuzz: built in $((SECONDS - t0)) s"

status=0
summary=()
mkdir -p "$dir/logs"
for t in "${targets[@]}"; do
  seed="$repo_root/tests/fuzz/corpus/$t"
  work="$dir/corpus/$t"
  artifacts="$dir/artifacts/$t"
  mkdir -p "$work" "$artifacts"
  log="$dir/logs/$t.log"
  crashes_before="$(find "$artifacts" -type f | wc -l)"
  rc=0
  # -print_final_stats: the executions; the committed corpus is read, new inputs go to $work only.
  "$dir/tests/fuzz/ringguard_fuzz_$t" "$work" "$seed" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${extra[@]}" >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  crashes=$(($(find "$artifacts" -type f | wc -l) - crashes_before))
  inputs="$(find "$work" -type f | wc -l)"
  if [[ $rc -ne 0 || $crashes -gt 0 ]]; then
    status=1
    echo "run_fuzz: $t FAILED (exit $rc); last lines of $log:" >&2
    tail -n 30 "$log" >&2
  fi
  summary+=("$(printf '%-15s %6s s  %12s executions  %6s corpus inputs  %3s crashes  exit %s' \
    "$t" "$seconds" "${execs:-?}" "$inputs" "$crashes" "$rc")")
  if [[ "${RINGGUARD_FUZZ_MERGE:-0}" == 1 ]]; then
    "$dir/tests/fuzz/ringguard_fuzz_$t" -merge=1 "$seed" "$work" >"$dir/logs/$t.merge.log" 2>&1 || status=1
  fi
done

echo "run_fuzz: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc) cores, clang $("$cxx" -dumpversion)"
printf '%s\n' "${summary[@]}"
exit "$status"
