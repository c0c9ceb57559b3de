#!/usr/bin/env bash
# exit_after_failure.sh MPIEXEC BINARY: judges tests/mpi/exit_after_failure.cc (issue 17, defect 2).
#   clean run: both ranks succeed, MPI is finalised, mpirun exits 0;
#   failed run: rank 1 stops mid-collective; rank 0 times out with slices in flight, says MPI_Finalize is
#   not safe, and its exit handler ends the job with MPI_Abort (exit code 70, the reason logged) long before
#   the stopped rank would resume: never a hang, a crash or a silent exit 0.
#   the same failed run over shared memory (the default between ranks of one host): no MPI traffic is left
#   in flight, and the stopped peer, which MPI_Finalize would wait for, makes the exit handler abort.
# Without Open MPI's single-copy path a rendezvous message needs its receiver's progress, as between nodes.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export RINGGUARD_CPU_TRANSPORT=mpi
set -uo pipefail
mpiexec="$1"; binary="$2"
log="$(mktemp -t ringguard-exit.XXXXXX)"
trap 'rm -f "$log"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

timeout -k 5 60 "$mpiexec" --oversubscribe --bind-to none -np 2 "$binary" --clean >"$log" 2>&1
rc=$?
grep -v "^\s*$" "$log" | tail -n 10
[[ $rc -eq 0 ]] || fail "clean run: mpirun exit $rc (expected 0)"
[[ $(grep -c "ok safe_to_finalize=1" "$log") -eq 2 ]] || fail "clean run: not both ranks ok and safe to finalize"
grep -q "MPI_Abort" "$log" && fail "clean run: aborted"

# failed_run LABEL TRANSPORT REPORT: rank 1 stops mid-collective over TRANSPORT (RINGGUARD_CPU_TRANSPORT);
# rank 0 reports its timeout with REPORT, and the exit handler ends the job with MPI_Abort, in time.
failed_run() {
  local label="$1" transport="$2" report="$3" start rc secs
  start=$(date +%s)
  RINGGUARD_CPU_TRANSPORT="$transport" timeout -k 5 60 "$mpiexec" --oversubscribe --bind-to none -np 2 "$binary" \
    >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  echo "$label: mpirun exit $rc after $secs s"
  grep -v "^\s*$" "$log" | tail -n 20
  grep -q "rank 0: .*timed out.* safe_to_finalize=0 ($report" "$log" ||
    fail "$label: rank 0 did not report its timeout with safe_to_finalize=0 ($report ...)"
  grep -q "MPI cannot be finalized safely: ending the job with MPI_Abort" "$log" ||
    fail "$label: the exit handler did not say why it aborts"
  [[ $rc -eq 70 ]] || fail "$label: mpirun exit $rc (expected 70, the exit handler's MPI_Abort)"
  [[ $secs -lt 15 ]] || fail "$label: took $secs s (the stopped rank would resume after 20 s: the abort must end it)"
  grep -qi "segmentation fault\|signal 11" "$log" && fail "$label: a crash"
}
failed_run "failed run" mpi "a failed collective left MPI traffic in flight (rank 0: "
failed_run "failed run over shared memory" auto "a rank stopped making progress, and MPI_Finalize would wait"
exit $status
