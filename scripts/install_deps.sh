#!/usr/bin/env bash
# Installs (apt) everything ringguard's build and tests need on a fresh Debian 12. Idempotent: when every
# package is already installed it does nothing (no apt-get update) and takes about a second.
# Runs as root directly, or through sudo when not root. RINGGUARD_SKIP_INSTALL_DEPS=1 skips it entirely.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libspdlog-dev libboost-dev libisal-dev zlib1g-dev
  libgtest-dev nlohmann-json3-dev libcli11-dev
  clang-format python3
)

if [[ "${RINGGUARD_SKIP_INSTALL_DEPS:-0}" == "1" ]]; then
  echo "install_deps: skipped (RINGGUARD_SKIP_INSTALL_DEPS=1)"
  exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#PACKAGES[@]} packages already installed, nothing to do"
  exit 0
fi

as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "install_deps: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

log="$(mktemp -t ringguard-install-deps.XXXXXX.log)"
trap 'rm -f "$log"' EXIT
apt_opts=(-qq -y --no-install-recommends -o DPkg::Lock::Timeout=300)
if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300 update \
    >"$log" 2>&1 ||
   ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install "${missing[@]}" \
    >>"$log" 2>&1; then
  cat "$log" >&2
  echo "install_deps: apt-get failed while installing: ${missing[*]}" >&2
  exit 1
fi
echo "install_deps: installed ${#missing[@]} missing package(s): ${missing[*]}"
