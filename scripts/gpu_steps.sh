# Shared by the GPU machine's check scripts (gpu_check.sh, gpu_engine_check.sh); source it, do not run it.
# Each step's output is tee'd to $out_dir/<name>.log, a failing step does not stop the later ones, and
# print_summary closes the run with a PASS/FAIL/SKIP table. The caller sets out_dir (and creates it).
#
#   run_step <name> <command...>   runs the command; its exit status decides PASS or FAIL. With
#                                  GPU_DEADLINE_S set (seconds since the script started), a step runs under
#                                  `timeout` of the time left, and one with under 15 s left is a SKIP row: the
#                                  script always reaches its summary inside the device machine's call limit
#   record <name> <PASS|FAIL|SKIP> <note>   a row that is not a command of its own
#   fail_last <note>               turns the last row into a FAIL (e.g. tests that were skipped)
#   write_environment              date, commit, nvidia-smi, nvcc, cmake, gcc to $out_dir/environment.log
#   print_summary <title>          the table (also $out_dir/summary.log); returns 1 if any row failed
#   finish_run <name>              print_summary, then the logs and summary into $OUT (device machine)
#   start_mps / stop_mps           the CUDA MPS daemon (one GPU context shared by the rank processes; pipes
#                                  and logs under $out_dir/mps); start_mps returns 1 if it cannot start

names=()
results=()
notes=()

run_step() {
  local name="$1"
  shift
  local log="$out_dir/$name.log"
  local limit=()
  if [[ -n "${GPU_DEADLINE_S:-}" ]]; then
    local left=$((GPU_DEADLINE_S - SECONDS))
    if ((left < 15)); then
      echo "=== [$name] skipped: ${left}s left of GPU_DEADLINE_S=${GPU_DEADLINE_S}" | tee "$log"
      record "$name" SKIP "deadline (GPU_DEADLINE_S=${GPU_DEADLINE_S})"
      return 1
    fi
    limit=(timeout -k 10 "$left")
  fi
  echo "=== [$name] $*" | tee "$log"
  local start=$SECONDS
  "${limit[@]}" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  local secs=$((SECONDS - start))
  echo "=== [$name] exit $rc after ${secs}s" | tee -a "$log"
  names+=("$name")
  if [[ $rc -eq 0 ]]; then results+=("PASS"); else results+=("FAIL"); fi
  notes+=("exit $rc, ${secs}s")
  return "$rc"
}

record() {
  names+=("$1")
  results+=("$2")
  notes+=("$3")
}

fail_last() {
  results[${#results[@]} - 1]="FAIL"
  notes[${#notes[@]} - 1]="$1"
}

write_environment() {
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$repo_root" rev-parse HEAD 2>/dev/null || echo unknown)"
    git -C "$repo_root" status --short 2>/dev/null | head -50 || true
    nvidia-smi 2>&1 || true
    nvcc --version 2>&1 || true
    cmake --version 2>&1 | head -1
    gcc --version 2>&1 | head -1
  } >"$out_dir/environment.log"
}

print_summary() {
  local status=0
  {
    echo
    echo "$1 summary (logs in $out_dir)"
    printf '  %-22s %-5s %s\n' STEP RESULT NOTE
    for i in "${!names[@]}"; do
      printf '  %-22s %-5s %s\n' "${names[$i]}" "${results[$i]}" "${notes[$i]}"
    done
  } | tee "$out_dir/summary.log"
  for r in "${results[@]}"; do
    if [[ "$r" == "FAIL" ]]; then status=1; fi
  done
  return "$status"
}

# MPS: ranks that share the GPU (host-staged) otherwise get it in time slices, one process at a time
# (docs/PERFORMANCE.md, "Tenth session": 4 staged ranks, 4 MiB allreduce 8.2 ms time-sliced, 3.2 ms under MPS).
start_mps() {
  command -v nvidia-cuda-mps-control >/dev/null 2>&1 || return 1
  export CUDA_MPS_PIPE_DIRECTORY="$out_dir/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$out_dir/mps/log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || return 1
  sleep 1
}

stop_mps() {
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true
  sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

# The closing table, then (on the device machine, where $OUT is set) the logs packed into $OUT/<name>_logs.tgz
# and the summary copied to $OUT/<name>_summary.log (the machine hands back few files). Returns print_summary's
# status.
finish_run() {
  local name="$1" status=0
  print_summary "$name" || status=1
  if [[ -n "${OUT:-}" ]]; then
    tar czf "$OUT/${name}_logs.tgz" -C "$(dirname "$out_dir")" "$(basename "$out_dir")" --exclude mps 2>/dev/null
    cp "$out_dir/summary.log" "$OUT/${name}_summary.log"
  fi
  return "$status"
}
