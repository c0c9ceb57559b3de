#!/bin/sh
# CUDA compiler launcher (CUDA_COMPILER_LAUNCHER of ringguard_cuda): runs the real compile command given as
# arguments, unchanged, and keeps its ptxas resource report (-Xptxas -v) in <object>.ptxas.log next to the
# object, where scripts/regcheck.py (the `regcheck` target) reads it. The report is kept out of the build
# output; everything else the compiler prints (errors, warnings) passes through on stderr.
#
#   nvcc_capture.sh [further launchers, e.g. ccache] <nvcc> <args...> -o <object> <args...>
obj=""
prev=""
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then obj="$arg"; fi
  prev="$arg"
done
if [ -z "$obj" ]; then
  exec "$@"
fi

log="$obj.ptxas.log"
tmp="$log.tmp.$$"
"$@" 2>"$tmp"
rc=$?
# ptxas prints "ptxas info : ..." lines plus indented "N bytes stack frame, ..." continuation lines.
grep -v -e '^ptxas info' -e '^    [0-9][0-9]* bytes stack frame' "$tmp" >&2
if [ "$rc" -eq 0 ]; then
  mv -f "$tmp" "$log"
else
  rm -f "$tmp" "$log"
fi
exit "$rc"
