#!/usr/bin/env bash
# Runs clang-tidy-14 with the repository's .clang-tidy over tessera's sources.
#
#   hack/tidy.sh                       # every project source in the compile database
#   hack/tidy.sh FILE...               # these sources (.cc); a header is checked through the
#                                      # sources that include it (HeaderFilterRegex)
#   hack/tidy.sh --checks=LIST [FILE...]   # other checks for a one-off run (appended to the
#                                      # .clang-tidy list, e.g. --checks='-*,clang-analyzer-*')
#
# The files come from build/dev/compile_commands.json (written by `cmake --preset dev`, which
# this script runs when it is missing), so new and moved files are picked up without a list here.
# Left out: generated code (anything under build/), third_party/, and test/fakes/ (the fake CUDA
# driver and NVML are generated from the X-macro tables and mimic C APIs on purpose).
# The generated protobuf/gRPC headers some agent sources include are built first
# (target tessera_kubelet_api; a no-op when up to date).
#
# Environment: CLANG_TIDY (default clang-tidy-14), TIDY_JOBS (default nproc), TIDY_BUILD_DIR
# (default build/dev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

clang_tidy=${CLANG_TIDY:-clang-tidy-14}
jobs=${TIDY_JOBS:-$(nproc)}
build_dir=${TIDY_BUILD_DIR:-build/dev}
exclude='^(build|third_party|test/fakes)/'

extra=()
if [[ ${1:-} == --checks=* ]]; then
  extra+=("$1")
  shift
fi

if ! command -v "$clang_tidy" >/dev/null; then
  echo "tidy: $clang_tidy not found (hack/install-deps.sh installs it)" >&2
  exit 2
fi

if [[ ! -f $build_dir/compile_commands.json ]]; then
  echo "tidy: configuring $build_dir for its compile database"
  cmake --preset dev >/dev/null
fi
if ! cmake --build "$build_dir" --target tessera_kubelet_api >/dev/null 2>&1; then
  echo "tidy: warning: could not build tessera_kubelet_api (generated gRPC headers);" \
    "sources that include them will fail" >&2
fi

# Sources in the compile database, relative to the repository root, once each.
mapfile -t db_files < <(python3 - "$build_dir/compile_commands.json" "$root" <<'PY'
import json, os, sys
db, root = sys.argv[1], sys.argv[2]
seen = set()
for e in json.load(open(db)):
    f = os.path.normpath(os.path.join(e["directory"], e["file"]))
    if f.startswith(root + "/"):
        seen.add(os.path.relpath(f, root))
print("\n".join(sorted(seen)))
PY
)

files=()
if (($#)); then
  for f in "$@"; do
    f=$(realpath --relative-to="$root" "$f")
    case "$f" in
      *.h | *.hh | *.hpp)
        echo "tidy: $f: headers are checked through the sources that include them; skipped" >&2
        continue ;;
    esac
    if printf '%s\n' "${db_files[@]}" | grep -qxF -- "$f"; then
      files+=("$f")
    else
      echo "tidy: $f is not in $build_dir/compile_commands.json; skipped" >&2
    fi
  done
else
  # A file deleted since the database was written is skipped (cmake rewrites it on the next
  # build); a new one is in it once cmake has configured.
  for f in "${db_files[@]}"; do
    [[ -f $f ]] || continue
    grep -Eq "$exclude" <<<"$f" || files+=("$f")
  done
fi
if ((${#files[@]} == 0)); then
  echo "tidy: no files to check"
  exit 0
fi

logs=$(mktemp -d)
xargs_pid=
# On exit or interrupt: stop the runs still going (they would write into $logs), then clean up.
cleanup() {
  [[ -n $xargs_pid ]] && kill -- "-$xargs_pid" 2>/dev/null
  rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
echo "tidy: ${#files[@]} files, $jobs jobs"
start=$SECONDS
# One clang-tidy a file, its output kept apart (parallel output would interleave); a file whose
# run fails is named in $logs/failed and its output printed below.
export clang_tidy build_dir logs
export tidy_extra=${extra[0]:-}
printf '%s\0' "${files[@]}" >"$logs/files"
# setsid: the runs form one process group, which cleanup can stop as a whole.
setsid xargs -0 -n 1 -P "$jobs" -a "$logs/files" bash -c '
    f=$1
    log=$logs/$(tr / _ <<<"$f").log
    if ! "$clang_tidy" -p "$build_dir" --quiet --extra-arg=-Wno-unknown-warning-option \
        ${tidy_extra:+"$tidy_extra"} "$f" >"$log" 2>&1; then
      echo "$f" >>"$logs/failed"
    fi' _ &
xargs_pid=$!
xrc=0
wait "$xargs_pid" || xrc=$?
xargs_pid=
if ((xrc != 0)); then
  echo "tidy: running clang-tidy failed (xargs rc=$xrc)" >&2
  exit 2
fi
# -Wno-unknown-warning-option: the compile database is GCC's, and clang does not know
# -Wno-restrict.

elapsed=$((SECONDS - start))
if [[ -s $logs/failed ]]; then
  sort -o "$logs/failed" "$logs/failed"
  while IFS= read -r f; do
    printf '\n--- %s\n' "$f"
    # Only the diagnostics and their context, not clang-tidy's "N warnings generated" chatter.
    grep -v -E '^[0-9]+ (warning|error)s? (and [0-9]+ (warning|error)s? )?(generated|treated as error)' \
      "$logs/$(tr / _ <<<"$f").log" || true
  done <"$logs/failed"
  n=$(wc -l <"$logs/failed")
  printf '\ntidy: %d of %d files have clang-tidy errors (%ds); fix them, or, if a check is wrong\n' \
    "$n" "${#files[@]}" "$elapsed"
  echo "      here, NOLINT(check-name) with a reason on the line (see CONTRIBUTING.md)"
  exit 1
fi
echo "tidy: ${#files[@]} files clean (${elapsed}s)"
