#!/usr/bin/env bash
# Builds and runs every test. This is the README's test command and what .ci/run calls.
#   1. dependencies (hack/install-deps.sh, idempotent); format check (hack/format.sh --check)
#   2. GCC build, warnings as errors; all tests (unit, fuzz corpus replay, ...); then clang-tidy
#      (hack/tidy.sh) over every source in that build's compile database
#   3. clang build with address + undefined sanitizers; all tests again
#   4. clang libFuzzer build; each fuzz target runs a bounded number of inputs
#   5. clang thread-sanitizer build of the core tests
#   6. the e2e harness: real etcd + kube-apiserver + kube-scheduler from their upstream Go
#      modules (test/e2e/harness), smoke test: /readyz answers and the scheduler binds a pod;
#      then the ctest label "e2e" (C++ tests against that control plane) of the GCC build.
#      Steps 2-3 leave label e2e out: those tests need the harness binary.
# Build folders live under build/ and are reused, so a second run is incremental.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=$(nproc)

hack/install-deps.sh

step() { printf '\n=== %s ===\n' "$*"; }

# Each ctest run adds to the tally printed last ("N passed, N failed").
passed=0
failed=0
run_ctest() {
  local log
  log=$(mktemp)
  local rc=0
  ctest "$@" --output-on-failure 2>&1 | tee "$log" || rc=$?
  local line
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -n 1 || true)
  rm -f "$log"
  if [[ -z "$line" ]]; then
    echo "no ctest summary (rc=$rc)"
    exit 1
  fi
  local bad total
  bad=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/' <<<"$line")
  passed=$((passed + total - bad))
  failed=$((failed + bad))
  if ((rc != 0 || bad != 0)); then
    printf '\n%d passed, %d failed\n' "$passed" "$failed"
    exit 1
  fi
}

run_preset() {
  local preset=$1
  step "build: $preset"
  cmake --preset "$preset" >/dev/null
  cmake --build "build/$preset" -j "$jobs"
  step "test: $preset"
  run_ctest --test-dir "build/$preset" -j "$jobs" -LE e2e
}

# A check that is not a ctest run (format, lint, the e2e smoke test) counts as one test.
run_check() {
  local hint=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    printf '\n%s\n' "$hint"
    printf '\n%d passed, %d failed\n' "$passed" "$failed"
    exit 1
  fi
}

step "format: clang-format (hack/format.sh --check)"
run_check "format: fix with hack/format.sh (rewrites the files listed above), then commit" \
  hack/format.sh --check

run_preset dev

step "lint: clang-tidy (hack/tidy.sh, build/dev's compile database)"
run_check "tidy: fix the diagnostics above; hack/tidy.sh FILE... re-checks some files" \
  env TIDY_JOBS="$jobs" hack/tidy.sh

run_preset asan

step "fuzz: libFuzzer, bounded runs"
cmake --preset fuzz >/dev/null
fuzz_targets=(quantity policy limits region admission extender explain)
cmake --build "build/fuzz" -j "$jobs" --target "${fuzz_targets[@]/%/_fuzz}"
for target in "${fuzz_targets[@]}"; do
  work=$(mktemp -d)
  cp test/fuzz/${target}_corpus/* "$work"/
  # Request bodies (admission reviews, extender args) and manifests are bigger than the others.
  max_len=512
  [[ $target == admission || $target == extender || $target == explain ]] && max_len=4096
  # A crashing input is kept beside the corpus copy and printed (base64) in the log's tail.
  "build/fuzz/test/${target}_fuzz" -runs=200000 -max_total_time=20 -max_len=$max_len \
    -artifact_prefix="$work/" "$work" 2>&1 | tail -n 2
  rm -rf "$work"
done

step "build+test: tsan (core, the scheduler's ledger under concurrent verbs)"
cmake --preset tsan >/dev/null
cmake --build build/tsan -j "$jobs" --target status_test log_test quantity_test region_test limits_test \
  extender_test
run_ctest --test-dir build/tsan -j "$jobs" \
  -R '^(Status|StatusOr|Log|LogTest|Quantity|RegionTest|RegionAbi|LimitsFile|Hami|ExtenderTest|LedgerTest)'

step "e2e: real control plane harness (Go, upstream Kubernetes 1.36)"
test/e2e/harness/build.sh build/e2e
if test/e2e/harness/smoke.sh build/e2e/tessera-testcluster &&
   test/e2e/harness/simnodes-smoke.sh build/e2e/tessera-testcluster; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  printf '\n%d passed, %d failed\n' "$passed" "$failed"
  exit 1
fi
TESSERA_TESTCLUSTER="$PWD/build/e2e/tessera-testcluster" run_ctest --test-dir build/dev -L e2e

printf '\ntessera: every test step passed\n%d passed, %d failed\n' "$passed" "$failed"
