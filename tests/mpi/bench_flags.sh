#!/usr/bin/env bash
# bench_flags.sh MPIEXEC BENCH_COLLECTIVES BENCH_ALLREDUCE: the benchmarks' command lines. A bad size, an
# empty range, a size below one element or a count out of range gets an error naming the flag and the value
# and a non-zero exit (never an abort, a hang or an empty table with a 0.000 summary); a good run prints its
# rows, "ok" checks and the summary line.
set -uo pipefail
mpiexec="$1"; collectives="$2"; allreduce="$3"
log="$(mktemp -t ringguard-bench-flags.XXXXXX)"
trap 'rm -f "$log"' EXIT
status=0
fail() { echo "FAIL: $*"; cat "$log"; status=1; }

# expect_error BINARY "MESSAGE" ARGS...: the run exits non-zero and says MESSAGE.
expect_error() {
  local binary="$1" message="$2"
  shift 2
  timeout -k 5 60 "$mpiexec" --oversubscribe --bind-to none -np 2 "$binary" -n 2 -w 0 "$@" >"$log" 2>&1
  local rc=$?
  [[ $rc -ne 0 ]] || fail "$(basename "$binary") $*: exit 0 (expected an error)"
  grep -qF -- "$message" "$log" || fail "$(basename "$binary") $*: no '$message'"
  grep -q "terminate called\|Signal: Aborted\|Signal: Segmentation" "$log" && fail "$(basename "$binary") $*: aborted"
}

for b in "$collectives" "$allreduce"; do
  expect_error "$b" "--minbytes: 'abc' is not a size" -b abc
  expect_error "$b" "--minbytes: '-5' is not a size" -b -5
  expect_error "$b" "--maxbytes: '1T' is not a size" -e 1T
  expect_error "$b" "--minbytes: 64K is above --maxbytes 4K: no size to run" -b 64K -e 4K
done
expect_error "$collectives" "--maxbytes 4 is below the smallest size this run can time: 8 bytes of f32" -b 1 -e 4
expect_error "$allreduce" "--maxbytes 2 is below the smallest size this run can time: 4 bytes of f32" -b 1 -e 2
expect_error "$collectives" "--op: 'allreduc' is not a collective" -o allreduc
# CLI11's range message ("1 to 2147483647", "[1 - 2147483647]" in other releases): the flag and the value.
expect_error "$collectives" "--iters: Value 0 not in range" -n 0
expect_error "$allreduce" "--warmup_iters: Value -1 not in range" -w -1
# -D where no GPU is usable says so (it blamed the CUDA driver's version: cudaErrorInsufficientDriver).
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  expect_error "$collectives" "createDeviceCommunicator: no usable GPU on this rank" -D -e 1M
fi

timeout -k 5 120 "$mpiexec" --oversubscribe --bind-to none -np 2 "$collectives" -o allgather -b 1K -e 4K -f 4 \
  -n 5 -w 1 >"$log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || fail "good run: exit $rc"
[[ $(grep -cE "^ +(1024|4096) +[0-9]+ \|.* ok$" "$log") -eq 2 ]] || fail "good run: not two checked rows"
grep -qE "^summary: op=allgather bytes=4096 np=2 ringguard_vs_mpi=[0-9.]+$" "$log" || fail "good run: no summary"
exit $status
