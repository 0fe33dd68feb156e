#!/usr/bin/env bash
# Prints the path of a helm binary, building Helm from its Go module the first time.
#
# usage: hack/helm.sh            # path on stdout; build messages on stderr
#   HELM=/path/to/helm  use that binary instead (the chart and its tests are checked with the
#                       version below)
#   GO=/path/to/go      the Go toolchain (default: `go` on PATH, else /usr/local/go/bin/go,
#                       as test/e2e/harness/build.sh finds it)
# Exit status: 0 with the path printed; 3 when there is no Go toolchain to build with (tests
# skip on it); 1 when the build fails.
#
# There is no Debian 12 package for Helm and no release binaries are downloaded: `go install`
# builds the pinned release from the Go module proxy into build/tools/helm-<version>/ (a second
# call only prints the path). A lock (flock) makes concurrent callers (ctest -j) wait for one
# build instead of racing. Uses Go's default module and build caches.
# Cold build, measured on a 2-core machine shared with other builds (nice 19): 280 s wall
# (2 min 52 s CPU), ~0.3 GiB of modules and ~0.6 GiB of Go build cache; a 75 MiB binary.
set -euo pipefail
version=v3.22.0               # helm.sh/helm/v3; its go.mod pins k8s.io/* v0.37.0
kube_minor=37                 # the Kubernetes version `helm template` assumes without --kube-version
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [[ -n "${HELM:-}" ]]; then
  [[ -x "$HELM" ]] || { echo "helm.sh: HELM=$HELM is not an executable" >&2; exit 1; }
  echo "$HELM"
  exit 0
fi

dir="$root/build/tools/helm-$version"
bin="$dir/helm"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

if [[ -z "${GO:-}" ]]; then
  if command -v go >/dev/null 2>&1; then GO=go
  elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
  else echo "helm.sh: no Go toolchain to build Helm with (set GO=... or HELM=...)" >&2; exit 3
  fi
elif ! command -v "$GO" >/dev/null 2>&1; then
  echo "helm.sh: GO=$GO is not a Go toolchain (set GO=... or HELM=...)" >&2; exit 3
fi

mkdir -p "$dir"
exec 9>"$dir.lock"
flock 9
if [[ ! -x "$bin" ]]; then  # another caller may have built it while this one waited
  echo "helm.sh: building Helm $version from its Go module (first time only; a few minutes)" >&2
  start=$SECONDS
  tmp=$(mktemp -d "$dir/.gobin.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
  ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
  ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kube_minor"
  GOBIN="$tmp" GOFLAGS=-buildvcs=false nice -n 19 "$GO" install -trimpath -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@$version" >&2
  mv -f "$tmp/helm" "$bin"
  echo "helm.sh: built $bin in $((SECONDS - start))s" >&2
fi
echo "$bin"
