#!/usr/bin/env bash
# examples.sh MPIEXEC TRAIN_MLP VERIFIED_ALLREDUCE_DEMO: the C++ examples at a small size.
# train_mlp (the README's main job): with faults injected it trains to the end with bit-identical
# parameters on every rank and detected == injected (exit 0); a learning rate that makes the loss
# non-finite stops every rank at that step with a message and exit 1 (it used to print a NaN loss to the
# end and exit 0); a NaN learning rate is a command-line error.
# train_mlp --replica-check: a bit flipped in one rank's parameter after a step is repaired from the
# majority with 3 ranks (the same final line and parameter CRC as the fault-free run: bit-identical, exit 0), raised on
# every rank naming the rank with 2 (exit 1), and a clean run checks every step without a mismatch (and,
# with --outlier-factor 8, reports no gradient outlier).
# verified_allreduce_demo: every fault mode bit-identical to the fault-free run (PASS); a run that could
# prove nothing (no elements, no iterations) or a NaN probability is a command-line error (they passed, or
# aborted). RINGGUARD_LOG_LEVEL=info shows the shared-memory setup line, which comes before any communicator.
set -uo pipefail
mpiexec="$1"; binary="$2"; demo="$3"
log="$(mktemp -t ringguard-train-mlp.XXXXXX)"
trap 'rm -f "$log"' EXIT
status=0
fail() { echo "FAIL: $*"; cat "$log"; status=1; }
run() { timeout -k 5 120 "$mpiexec" --oversubscribe --bind-to none -np 2 "$@" >"$log" 2>&1; }

run "$binary" --steps 40 --log-every 20 --fault-prob 0.02
rc=$?
[[ $rc -eq 0 ]] || fail "faulty run: exit $rc"
grep -qE "^final: ranks=2 steps=40 loss=0\.[0-9]+ params_identical=yes detected=[1-9][0-9]* retransmitted=[1-9]" "$log" ||
  fail "faulty run: no final line with identical parameters and detections"
grep -q "MISMATCH" "$log" && fail "faulty run: an integrity mismatch"

# RINGGUARD_LOG_LEVEL reaches what the bootstrap logs while it sets up shared memory, before any
# communicator exists (it used to apply only from the first communicator on).
RINGGUARD_LOG_LEVEL=info run -x RINGGUARD_LOG_LEVEL "$binary" --steps 2 --log-every 2 --fault-prob 0
rc=$?
[[ $rc -eq 0 ]] || fail "info-level run: exit $rc"
grep -qE "\[transport\] shared memory: 2 ranks, windows of [0-9]+ bytes a half" "$log" ||
  fail "info-level run: no shared-memory setup line"

run "$binary" --steps 40 --lr 1e30
rc=$?
[[ $rc -ne 0 ]] || fail "diverging run: exit 0"
grep -qE "^step [0-9]+: the loss is (inf|-?nan): training diverged \(try a smaller --lr\)$" "$log" ||
  fail "diverging run: no divergence message"
grep -qE "^final: ranks=2 steps=[0-9] loss=(inf|-?nan) " "$log" || fail "diverging run: it did not stop early"

run3() { timeout -k 5 120 "$mpiexec" --oversubscribe --bind-to none -np 3 "$@" >"$log" 2>&1; }
run3 "$binary" --steps 12 --log-every 12 --fault-prob 0 --replica-check raise --outlier-factor 8
rc=$?
[[ $rc -eq 0 ]] || fail "replica clean run: exit $rc"
! grep -q "gradient outliers" "$log" || fail "replica clean run: a gradient outlier reported"
grep -qE "^replicas: checks=12 mismatches=0 repairs=0 escalations=0 warnings=0$" "$log" || fail "replica clean run: counters"
clean_final="$(grep -E "^final: " "$log")"
clean_params="$(grep -E "^params: crc32=[0-9a-f]{8}$" "$log")"
[[ -n "$clean_params" ]] || fail "replica clean run: no params line"
RINGGUARD_REPLICA_FAULT="rank=1,step=4,tensor=param:fc2.weight,element=17,bit=27" \
  run3 "$binary" --steps 12 --log-every 12 --fault-prob 0 --replica-check repair
rc=$?
[[ $rc -eq 0 ]] || fail "replica repair: exit $rc"
grep -qE "^replicas: checks=13 mismatches=1 repairs=1 escalations=0 warnings=0$" "$log" || fail "replica repair: counters"
[[ "$(grep -E "^final: " "$log")" == "$clean_final" ]] || fail "replica repair: final line differs from the clean run's ($clean_final)"
[[ "$(grep -E "^params: " "$log")" == "$clean_params" ]] ||
  fail "replica repair: parameters differ from the clean run's ($clean_params)"
RINGGUARD_REPLICA_FAULT="rank=0,step=2,tensor=optim:fc1.weight.momentum_buffer,element=3,bit=30" \
  run "$binary" --steps 12 --log-every 12 --fault-prob 0 --replica-check raise
rc=$?
[[ $rc -ne 0 ]] || fail "replica raise: exit 0"
[[ $(grep -c "^rank [01]: replica check: step 2: ranks 0, 1 of 2 replicas disagree and no majority names the odd one in 1 tensor: 'optim:fc1.weight.momentum_buffer'; first differing element: 'optim:fc1.weight.momentum_buffer'\[3\] (on_mismatch=raise)$" "$log") -eq 2 ]] ||
  fail "replica raise: not the same error on both ranks"

run "$binary" --lr nan
rc=$?
[[ $rc -ne 0 ]] || fail "--lr nan: exit 0"
[[ $(grep -c "^--lr: must be a finite positive number, got nan$" "$log") -eq 1 ]] || fail "--lr nan: not one message"
run "$demo" -n 5000 -i 2 -p 0.05
rc=$?
[[ $rc -eq 0 ]] || fail "demo: exit $rc"
grep -qE "^demo: ranks=2 allreduces=14 injected=([1-9][0-9]*) detected=\1 retransmitted=[0-9]+ escaped=0 bit_identical_to_fault_free=yes verdict=PASS$" "$log" ||
  fail "demo: no passing summary with detected == injected > 0"
for args in "-n 0" "-i -3" "-p nan"; do
  # shellcheck disable=SC2086
  run "$demo" $args
  rc=$?
  [[ $rc -ne 0 ]] || fail "demo $args: exit 0"
  grep -q "verdict=PASS" "$log" && fail "demo $args: passed"
  [[ $(grep -cE "^--(count|iterations|probability): " "$log") -eq 1 ]] || fail "demo $args: not one command-line error"
  grep -q "[0-9]\{30\}" "$log" && fail "demo $args: a bound printed as a 300-digit number"
done
exit $status
