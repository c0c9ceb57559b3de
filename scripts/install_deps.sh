#!/usr/bin/env bash
# Installs everything ringguard's build and tests need on a fresh Debian 12: Debian packages (apt) and
# torch 2.11.0 from PyPI for the torch layer (libtorch comes with it). Idempotent: what is already
# installed is left alone (no apt-get update), so a second run takes about a second.
# Runs as root directly, or through sudo when not root. RINGGUARD_SKIP_INSTALL_DEPS=1 skips it entirely.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libspdlog-dev libboost-dev libisal-dev zlib1g-dev
  libgtest-dev nlohmann-json3-dev libcli11-dev
  clang-format python3 python3-venv
  ccache
)

if [[ "${RINGGUARD_SKIP_INSTALL_DEPS:-0}" == "1" ]]; then
  echo "install_deps: skipped (RINGGUARD_SKIP_INSTALL_DEPS=1)"
  exit 0
fi

install_apt() {
  missing=()
  for pkg in "${PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
    if [[ "$status" != "installed" ]]; then
      missing+=("$pkg")
    fi
  done

  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install_deps: all ${#PACKAGES[@]} packages already installed, nothing to do"
    return 0
  fi

  as_root=()
  if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      as_root=(sudo)
    else
      echo "install_deps: not root and no sudo; install as root: apt-get install ${missing[*]}" >&2
      return 1
    fi
  fi

  log="$(mktemp -t ringguard-install-deps.XXXXXX.log)"
  trap 'rm -f "$log"' RETURN
  apt_opts=(-qq -y --no-install-recommends -o DPkg::Lock::Timeout=300)
  if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300 update \
      >"$log" 2>&1 ||
     ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install "${missing[@]}" \
      >>"$log" 2>&1; then
    cat "$log" >&2
    echo "install_deps: apt-get failed while installing: ${missing[*]}" >&2
    return 1
  fi
  echo "install_deps: installed ${#missing[@]} missing package(s): ${missing[*]}"
}

# torch for the torch layer (RINGGUARD_WITH_TORCH turns on when CMake finds it). Pinned: the version the
# GPU machine has.
TORCH_VERSION=2.11.0
install_torch() {
  if python3 -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" \
      >/dev/null 2>&1; then
    echo "install_deps: torch $TORCH_VERSION already installed"
  elif python3 -m pip --version >/dev/null 2>&1; then
    python3 -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION" 2>&1 | grep -v "as the 'root' user" || true
    python3 -c "import torch" || { echo "install_deps: pip could not install torch $TORCH_VERSION" >&2; exit 1; }
    echo "install_deps: installed torch $TORCH_VERSION"
  else
    echo "install_deps: python3 has no pip: torch not installed, the torch layer is not built"
  fi
}
# Python packages for the torch backend's package and tests: scikit-build-core builds ringguard._C
# (`pip install --no-build-isolation .`), pytest runs tests/python, numpy silences torch's "Failed to
# initialize NumPy" warning, matplotlib draws docs/plots (scripts/plot_benchmarks.py, tested by
# tests/python/test_plot_benchmarks.py). Each is installed only when it cannot be imported.
PIP_PACKAGES=("scikit-build-core>=0.10:scikit_build_core" "pytest:pytest" "numpy:numpy" "matplotlib:matplotlib")
have_pip_package() {  # the requirement's module imports (and scikit-build-core is at least 0.10)
  python3 - "$1" <<'PY' >/dev/null 2>&1
import importlib, importlib.metadata, sys
req, mod = sys.argv[1].split(":")
importlib.import_module(mod)
if mod == "scikit_build_core":
    major, minor = importlib.metadata.version("scikit-build-core").split(".")[:2]
    sys.exit(0 if (int(major), int(minor)) >= (0, 10) else 1)
PY
}
install_pip_packages() {
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "install_deps: python3 has no pip: the Python package and its tests are not available"
    return 0
  fi
  missing=()
  for entry in "${PIP_PACKAGES[@]}"; do
    if ! have_pip_package "$entry"; then
      missing+=("${entry%%:*}")
    fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install_deps: Python packages already installed (scikit-build-core, pytest, numpy, matplotlib)"
    return 0
  fi
  python3 -m pip install -q --disable-pip-version-check "${missing[@]}" 2>&1 | grep -v "as the 'root' user" || true
  for entry in "${PIP_PACKAGES[@]}"; do
    have_pip_package "$entry" ||
      { echo "install_deps: pip could not install ${entry%%:*}" >&2; exit 1; }
  done
  echo "install_deps: installed Python package(s): ${missing[*]}"
}
install_apt
install_torch
install_pip_packages
