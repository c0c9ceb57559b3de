#!/usr/bin/env bash
# The fault soak (issue 17; docs/RELIABILITY.md, "Fault soak"), not part of CI (ctest soak_np3 runs it for
# a few seconds): builds tests/soak's ringguard_soak and runs it under mpirun at every world size from 2 to
# max_ranks, oversubscribed, each launch for `seconds` under an outer time limit, so that a hang is
# reported rather than waited for. Prints each size's line and the total; exits non-zero on any escape,
# hang or failure (and on a launch that ends without its summary line).
# Usage: scripts/run_soak.sh [seconds per world size (default 30)] [max_ranks (default 8)] [seed (default 1)]
# Environment: RINGGUARD_SOAK_BUILD_DIR build directory (default <repo>/build-soak; an existing one is
# reused as it is configured, else configured with CUDA and torch off); RINGGUARD_SOAK_JOBS build
# parallelism (default: all cores). Logs: <build dir>/soak-logs/np<N>.log.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-30}"
max_ranks="${2:-8}"
seed="${3:-1}"
if ! [[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]]; then
  echo "run_soak: seconds must be a positive integer, got '$seconds'" >&2
  exit 2
fi
if ! [[ "$max_ranks" =~ ^[0-9]+$ && "$max_ranks" -ge 2 ]]; then
  echo "run_soak: max_ranks must be an integer of at least 2, got '$max_ranks'" >&2
  exit 2
fi
if ! [[ "$seed" =~ ^[0-9]+$ ]]; then
  echo "run_soak: seed must be a non-negative integer, got '$seed'" >&2
  exit 2
fi
dir="${RINGGUARD_SOAK_BUILD_DIR:-build-soak}"
[[ "$dir" = /* ]] || dir="$repo_root/$dir"
jobs="${RINGGUARD_SOAK_JOBS:-$(nproc 2>/dev/null || echo 2)}"

t0=$SECONDS
if [[ ! -f "$dir/CMakeCache.txt" ]]; then
  generator=()
  if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
  mkdir -p "$dir"
  cmake -S "$repo_root" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DRINGGUARD_WITH_CUDA=OFF \
    -DRINGGUARD_WITH_TORCH=OFF -DRINGGUARD_BUILD_BENCH=OFF -DRINGGUARD_BUILD_EXAMPLES=OFF \
    >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
fi
cmake --build "$dir" --parallel "$jobs" --target ringguard_soak
binary="$dir/tests/soak/ringguard_soak"
[[ -x "$binary" ]] || { echo "run_soak: $binary was not built (MPI found? see $dir/CMakeCache.txt)" >&2; exit 1; }
echo "run_soak: built in $((SECONDS - t0)) s"

mpiexec="$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$dir/CMakeCache.txt")"
mpiexec="${mpiexec:-mpirun}"
# CI and the GPU machine run as root; 8 ranks oversubscribe small machines.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# The soak's own bound on one collective is 3 timeouts + 5 s (35 s), then 10 s of grace after its abort;
# a launch still running this long past its budget is hung outside any collective.
limit=$((seconds + 120))

logs="$dir/soak-logs"
mkdir -p "$logs"
echo "run_soak: $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $(nproc) cores, seed $seed, $seconds s per world size"
status=0
lines=()
for np in $(seq 2 "$max_ranks"); do
  log="$logs/np$np.log"
  cmd=("$mpiexec" --bind-to none -np "$np" "$binary" --seconds "$seconds" --seed "$seed")
  rc=0
  timeout -k 10 "$limit" "${cmd[@]}" >"$log" 2>&1 || rc=$?
  line="$(grep '^soak: ' "$log" | tail -n 1 || true)"
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    echo "run_soak: np $np HANG: killed after $limit s (${cmd[*]}); last lines of $log:" >&2
    tail -n 20 "$log" >&2
    line="soak: ranks=$np collectives=0 injected=0 detected=0 retransmitted=0 escaped=0 failed=0 hangs=1 seconds=$limit"
    status=1
  elif [[ -z "$line" ]]; then
    # Exit code 4: the soak's watchdog ended a job whose collective did not return even after abort().
    hang=$([[ $rc -eq 4 ]] && echo 1 || echo 0)
    failed=$((1 - hang))
    echo "run_soak: np $np ended (exit $rc) without its summary line (${cmd[*]}); last lines of $log:" >&2
    tail -n 20 "$log" >&2
    line="soak: ranks=$np collectives=0 injected=0 detected=0 retransmitted=0 escaped=0 failed=$failed hangs=$hang seconds=0"
    status=1
  elif [[ $rc -ne 0 ]]; then
    echo "run_soak: np $np FAILED (exit $rc); its findings, from $log:" >&2
    grep -E 'ESCAPE|FAILED|HANG|reproduce' "$log" >&2 || true
    status=1
  fi
  if ! grep -q ' escaped=0 failed=0 hangs=0 ' <<<"$line"; then status=1; fi
  echo "$line"
  lines+=("$line")
done

printf '%s\n' "${lines[@]}" | awk -v max="$max_ranks" '
  { for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] != "ranks") sum[kv[1]] += kv[2] } }
  END {
    printf "soak-total: ranks=2..%d collectives=%d injected=%d detected=%d retransmitted=%d escaped=%d failed=%d hangs=%d seconds=%.1f\n",
      max, sum["collectives"], sum["injected"], sum["detected"], sum["retransmitted"], sum["escaped"],
      sum["failed"], sum["hangs"], sum["seconds"]
  }'
if [[ $status -ne 0 ]]; then
  echo "run_soak: FAILED (escapes, hangs or failures above; logs in $logs)" >&2
fi
exit "$status"
