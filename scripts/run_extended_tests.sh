#!/usr/bin/env bash
# What CI runs after the README's test command (.ci/run), and anyone can run locally:
#   1. the host layers under ASan + UBSan and TSan, each in a build of its own under build-sanitizers/
#      (scripts/run_sanitizers.sh; docs/RELIABILITY.md, "Sanitizers in CI"): about 23 minutes on 2 cores;
#   2. the Python package on the newest torch, in a venv of its own (scripts/run_torch_latest.sh; the
#      venv's download is several GB the first time): about 5 minutes.
# Exits non-zero if either fails; runs both either way. RINGGUARD_SKIP_SANITIZERS=1 skips the first,
# RINGGUARD_SKIP_TORCH_LATEST=1 the second.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# On its own on a fresh machine too: what the sanitizer builds need (the newest torch's venv installs its own).
bash scripts/install_deps.sh

status=0
t0=$SECONDS
if [[ "${RINGGUARD_SKIP_SANITIZERS:-0}" == "1" ]]; then
  echo "run_extended_tests: sanitizers skipped (RINGGUARD_SKIP_SANITIZERS=1)"
else
  bash scripts/run_sanitizers.sh all || status=1
  echo "run_extended_tests: sanitizers took $((SECONDS - t0)) s"
fi
t0=$SECONDS
bash scripts/run_torch_latest.sh || status=1
echo "run_extended_tests: newest torch took $((SECONDS - t0)) s"

if [[ $status -ne 0 ]]; then
  echo "run_extended_tests: FAILED" >&2
else
  echo "run_extended_tests: all passed"
fi
exit "$status"
