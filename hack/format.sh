#!/usr/bin/env bash
# Formats tessera's C/C++ sources with clang-format-14 and the repository's .clang-format.
#
#   hack/format.sh                 # rewrite every tracked C/C++ file in place
#   hack/format.sh --check         # change nothing; exit 1 and list the files that would change
#   hack/format.sh [--check] FILE...   # only these files (the excluded ones are skipped)
#
# Files: what git tracks (so new files count once they are added) matching *.h *.hh *.hpp *.c *.cc
# *.cpp *.cu *.cuh, minus:
#   third_party/, build/   not ours (third_party/ and build/ are ignored by git anyway).
#   *.def                  X-macro tables (src/hook/cuda_hooks.def, nvml_hooks.def,
#                          include/tessera/gpu_models.def): one row per
#                          entry is their point, and clang-format wraps every long row and, not
#                          seeing a declaration, reads `(CUdevice* device, ...)` as a
#                          multiplication (`CUdevice * device`). They are not in the patterns
#                          above; EXCLUDE below keeps them out even if named on the command line.
# X-macro list *definitions* in headers (#define TESSERA_..._LIST(X) X(a) X(b)) are formatted:
# .clang-format declares X a StatementMacro, which keeps one entry a line and makes formatting
# idempotent (without it, a second run re-wraps those lists).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

clang_format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$clang_format" >/dev/null; then
  echo "format: $clang_format not found (hack/install-deps.sh installs it)" >&2
  exit 2
fi

patterns=('*.h' '*.hh' '*.hpp' '*.c' '*.cc' '*.cpp' '*.cu' '*.cuh')
# Extended regular expression of paths never formatted (see above).
EXCLUDE='^(third_party|build)/|\.def$'

check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi

files=()
if (($#)); then
  for f in "$@"; do
    [[ -f $f ]] || continue
    case "$f" in
      *.h | *.hh | *.hpp | *.c | *.cc | *.cpp | *.cu | *.cuh) ;;
      *) continue ;;
    esac
    grep -Eq "$EXCLUDE" <<<"$f" || files+=("$f")
  done
else
  # Tracked files that still exist (a deletion not yet committed is skipped).
  while IFS= read -r f; do
    [[ -f $f ]] && files+=("$f")
  done < <(git ls-files -- "${patterns[@]}" | grep -Ev "$EXCLUDE")
fi
((${#files[@]})) || exit 0

# A broken .clang-format should say so once, not as one failure per file.
if ! "$clang_format" --style=file --dump-config --assume-filename="${files[0]}" >/dev/null; then
  echo "format: $clang_format cannot read .clang-format" >&2
  exit 2
fi

if ((check == 0)); then
  printf '%s\0' "${files[@]}" | xargs -0 -n 50 -P "$(nproc)" "$clang_format" -i --style=file
  exit 0
fi

# --check: one clang-format a file (output of parallel runs would interleave); it fails when the
# file would change, and the file's name is printed.
bad=$(printf '%s\0' "${files[@]}" |
  xargs -0 -n 1 -P "$(nproc)" sh -c \
    '"$0" --dry-run -Werror --ferror-limit=1 --style=file "$1" >/dev/null 2>&1 || echo "$1"' \
    "$clang_format" |
  sort || true)
if [[ -n $bad ]]; then
  n=$(wc -l <<<"$bad")
  echo "format: $n file(s) are not clang-formatted:"
  sed 's/^/  /' <<<"$bad"
  echo "format: run hack/format.sh to fix them (hack/format.sh FILE... for some), or see the"
  echo "        change with: $clang_format --style=file FILE | diff -u FILE -"
  exit 1
fi
echo "format: ${#files[@]} files clang-formatted"
