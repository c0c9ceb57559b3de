# Sourced by build.sh, run_tests.sh and run_sanitizers.sh: compile through ccache when it is installed
# (scripts/install_deps.sh installs it). CMake (3.17+) takes CMAKE_<LANG>_COMPILER_LAUNCHER from the
# environment when it configures a new build directory: the main build, the Python package's (pip) and the
# sanitizer builds. CCACHE_BASEDIR and CCACHE_NOHASHDIR make a clone in another folder (CI's) hit what a
# build here compiled. RINGGUARD_NO_CCACHE=1 turns it off.
if command -v ccache >/dev/null 2>&1 && [[ "${RINGGUARD_NO_CCACHE:-0}" != "1" ]]; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
  export CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
fi
