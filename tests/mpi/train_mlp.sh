#!/usr/bin/env bash
# train_mlp.sh MPIEXEC TRAIN_MLP: the README's main job at a small size. With faults injected it trains to
# the end with bit-identical parameters on every rank and detected == injected (exit 0); a learning rate
# that makes the loss non-finite stops every rank at that step with a message and exit 1 (it used to print
# a NaN loss to the end and exit 0); a NaN learning rate is a command-line error.
set -uo pipefail
mpiexec="$1"; binary="$2"
log="$(mktemp -t ringguard-train-mlp.XXXXXX)"
trap 'rm -f "$log"' EXIT
status=0
fail() { echo "FAIL: $*"; cat "$log"; status=1; }
run() { timeout -k 5 120 "$mpiexec" --oversubscribe --bind-to none -np 2 "$binary" "$@" >"$log" 2>&1; }

run --steps 40 --log-every 20 --fault-prob 0.02
rc=$?
[[ $rc -eq 0 ]] || fail "faulty run: exit $rc"
grep -qE "^final: ranks=2 steps=40 loss=0\.[0-9]+ params_identical=yes detected=[1-9][0-9]* retransmitted=[1-9]" "$log" ||
  fail "faulty run: no final line with identical parameters and detections"
grep -q "MISMATCH" "$log" && fail "faulty run: an integrity mismatch"

run --steps 40 --lr 1e30
rc=$?
[[ $rc -ne 0 ]] || fail "diverging run: exit 0"
grep -qE "^step [0-9]+: the loss is (inf|-?nan): training diverged \(try a smaller --lr\)$" "$log" ||
  fail "diverging run: no divergence message"
grep -qE "^final: ranks=2 steps=[0-9] loss=(inf|-?nan) " "$log" || fail "diverging run: it did not stop early"

run --lr nan
rc=$?
[[ $rc -ne 0 ]] || fail "--lr nan: exit 0"
[[ $(grep -c "^--lr: must be a finite positive number, got nan$" "$log") -eq 1 ]] || fail "--lr nan: not one message"
exit $status
