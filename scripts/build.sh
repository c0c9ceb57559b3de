#!/usr/bin/env bash
# Configures and builds ringguard: scripts/build.sh [build-dir]   (default: <repo>/build)
# Release, Ninja, all cores. Extra cmake arguments come from $RINGGUARD_CMAKE_ARGS (whitespace-separated),
# e.g. RINGGUARD_CMAKE_ARGS="-DRINGGUARD_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug" scripts/build.sh
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-$repo_root/build}"

extra_args=()
if [[ -n "${RINGGUARD_CMAKE_ARGS:-}" ]]; then
  read -r -a extra_args <<<"$RINGGUARD_CMAKE_ARGS"
fi

jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
source "$repo_root/scripts/compiler_cache.sh"

cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra_args[@]}"
cmake --build "$build_dir" --parallel "$jobs"
