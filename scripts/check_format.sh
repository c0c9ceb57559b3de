#!/usr/bin/env bash
# Checks that every C++/CUDA source is clang-formatted (.clang-format at the repository root):
#   scripts/check_format.sh         list the offending files, exit 1 if there are any
#   scripts/check_format.sh --fix   reformat them in place
# $CLANG_FORMAT overrides the binary (default: clang-format).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
clang_format="${CLANG_FORMAT:-clang-format}"

fix=0
case "${1:-}" in
  "") ;;
  --fix) fix=1 ;;
  *) echo "usage: $0 [--fix]" >&2; exit 2 ;;
esac

if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check_format: $clang_format not found (apt-get install clang-format)" >&2
  exit 2
fi

dirs=()
for d in include src tests bench examples; do
  [[ -d "$d" ]] && dirs+=("$d")
done
files=()
if [[ ${#dirs[@]} -gt 0 ]]; then
  while IFS= read -r -d '' f; do
    files+=("$f")
  done < <(find "${dirs[@]}" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) \
             -print0 | sort -z)
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check_format: no sources found"
  exit 0
fi

if [[ $fix -eq 1 ]]; then
  "$clang_format" -i --style=file "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  if ! "$clang_format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
    bad+=("$f")
  fi
done

if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files are not clang-formatted (fix: scripts/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files OK"
