#!/usr/bin/env bash
# Configures and builds ringguard: scripts/build.sh [build-dir] [target...]   (default: <repo>/build, all)
# Release, Ninja, all cores. With targets, only those (and what they link) are built; a target this
# configuration does not have (train_mlp without torch, say) is skipped with a line saying so. Extra cmake arguments come from $RINGGUARD_CMAKE_ARGS (whitespace-separated),
# e.g. RINGGUARD_CMAKE_ARGS="-DRINGGUARD_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug" scripts/build.sh
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$repo_root/build}"
shift || true
targets=("$@")

extra_args=()
if [[ -n "${RINGGUARD_CMAKE_ARGS:-}" ]]; then
  read -r -a extra_args <<<"$RINGGUARD_CMAKE_ARGS"
fi

jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
source "$repo_root/scripts/compiler_cache.sh"

cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra_args[@]}"
if [[ ${#targets[@]} -eq 0 ]]; then
  cmake --build "$build_dir" --parallel "$jobs"
  exit 0
fi
known="$(ninja -C "$build_dir" -t targets all 2>/dev/null | cut -d: -f1)"
present=()
for t in "${targets[@]}"; do
  if grep -qx "$t" <<<"$known"; then present+=("$t"); else echo "build: no target $t in this configuration, skipped"; fi
done
if [[ ${#present[@]} -gt 0 ]]; then
  cmake --build "$build_dir" --parallel "$jobs" --target "${present[@]}"
fi
