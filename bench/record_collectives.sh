#!/usr/bin/env bash
# Records bench_collectives logs for scripts/plot_benchmarks.py: one log per collective, each headed by the
# command, the machine, the date, the commit and the load average before and after the run (other jobs on a
# shared machine move the figures; the header says how loaded it was).
#
#   bench/record_collectives.sh BUILD_DIR OUT_DIR NP [bench_collectives flags...]
#   bench/record_collectives.sh /work/h18-bench/build bench/results 2 -b 4K -e 64M -f 4 -n 20 -w 5
#
# Writes OUT_DIR/collectives_host_np<NP>_<op>${RUN:+.$RUN}.log for every op in $OPS (default: all six;
# RUN=run2 tags a repeat). Host memory,
# MPI transport; stderr of the run goes into the log after the table, prefixed "# stderr:".
# QUIET_WAIT_S=S (default 0): before each op, wait up to S seconds for a second in which other processes
# kept the CPUs under QUIET_MAX_BUSY percent busy (default 15); the header records what was found.
set -euo pipefail

# Percent of all CPUs busy over one second (from /proc/stat), measured while this script runs nothing.
cpu_busy() {
  local a b
  read -r -a a < <(grep '^cpu ' /proc/stat)
  sleep 1
  read -r -a b < <(grep '^cpu ' /proc/stat)
  local total=0 idle i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  idle=$((b[4] - a[4] + b[5] - a[5]))
  echo $(((100 * (total - idle) + total / 2) / (total > 0 ? total : 1)))
}

build_dir="$1" out_dir="$2" np="$3"
shift 3
bench="$build_dir/bench/bench_collectives"
[[ -x "$bench" ]] || { echo "record_collectives: no $bench (build the bench_collectives target)" >&2; exit 2; }
mkdir -p "$out_dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
src_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
commit="$(git -C "$build_dir/.." rev-parse --short HEAD 2>/dev/null || git -C "$src_dir" rev-parse --short HEAD)"
cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
status=0
for op in ${OPS:-allreduce reduce_scatter allgather broadcast alltoall sendrecv}; do
  log="$out_dir/collectives_host_np${np}_${op}${RUN:+.$RUN}.log"
  cmd=(mpirun -np "$np" --oversubscribe --bind-to none "$bench" -o "$op" "$@")
  err="$(mktemp)"
  waited=0 busy="$(cpu_busy)"
  while ((busy > ${QUIET_MAX_BUSY:-15} && waited < ${QUIET_WAIT_S:-0})); do
    sleep 4
    waited=$((waited + 5))
    busy="$(cpu_busy)"
  done
  others="$(top -bn2 -d0.5 -w 200 | awk '/^top -/ {n++; p = 0} n == 2 && p && $9 + 0 >= 5 {
    printf "%s%s %s%%", sep, $12, $9; sep = ", "} /^ *PID/ {p = 1}')"
  {
    echo "# command: ${cmd[*]}"
    echo "# machine: $(hostname), ${cpu:-unknown CPU}, $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB," \
      "$(. /etc/os-release && echo "$PRETTY_NAME"), $(mpirun --version 2>/dev/null | head -1)"
    echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit, build $build_dir"
    echo "# environment: $(env | grep '^RINGGUARD_' | sort | tr '\n' ' ')(RINGGUARD_* variables set; none: the defaults)"
    echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; the cores are shared with other jobs);" \
      "CPUs ${busy}% busy in the second before the run (waited ${waited} s for under ${QUIET_MAX_BUSY:-15}%);" \
      "processes over 5% then: ${others:-none}"
    rc=0
    samples="$(mktemp)"
    # Other jobs during the run: every 2 s, the runnable processes that are not this run's.
    (while :; do
       ps -eo stat=,comm= | awk '$1 ~ /^R/ && $2 !~ /^(bench_collectiv|mpirun|orted|ps|awk)$/ {n++} END {print n + 0}'
       sleep 2
     done >"$samples") &
    sampler=$!
    "${cmd[@]}" 2>"$err" || rc=$?
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    echo "# other runnable processes during the run (sampled every 2 s): $(awk '{s += $1; if ($1 > m) m = $1}
      END {printf "mean %.1f, max %d over %d samples", NR ? s / NR : 0, m, NR}' "$samples")"
    rm -f "$samples"
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg) (includes this run's own ranks); exit status $rc"
    sed 's/^/# stderr: /' "$err"
  } >"$log"
  rm -f "$err"
  echo "record_collectives: $log ($(grep -c '^ *[0-9]' "$log") rows, $(tail -n +1 "$log" | grep -o 'exit status [0-9]*'))"
  grep -q 'exit status 0' "$log" || status=1
done
exit "$status"
