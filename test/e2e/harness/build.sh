#!/usr/bin/env bash
# Build the e2e harness's multi-call binary (etcd + kube-apiserver +
# kube-scheduler + kubectl, linked from upstream Go modules).
#
# usage: test/e2e/harness/build.sh [OUT_DIR]
#   OUT_DIR  where to put tessera-testcluster (default: <repo>/build/e2e);
#            a relative OUT_DIR is taken from the current directory.
# Uses Go's default module and build caches, so a repeat build is fast.
# Needs Go >= 1.26 (found on PATH or at /usr/local/go/bin/go; GO=... overrides).
# The first build downloads ~0.6-0.8 GiB of modules (~30 s) and compiles for
# ~5-6 min on 2 cores, peak ~2.6 GiB RSS (the link), 2.6 GiB build cache; see
# docs/design/0009-spike-control-plane-harness.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$root/build/e2e}

if [[ -z "${GO:-}" ]]; then
  if command -v go >/dev/null 2>&1; then GO=go
  elif [[ -x /usr/local/go/bin/go ]]; then GO=/usr/local/go/bin/go
  else echo "build.sh: no Go toolchain (need >= 1.26; set GO=...)" >&2; exit 1
  fi
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$here"
start=$SECONDS
# Stamp the upstream version packages the way Kubernetes's own build does, so
# that `kubectl version` and /version report the pinned release instead of
# v0.0.0-master. (-X only affects the link step: it costs no recompile.)
kver=$("$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)
kminor=${kver#v1.}; kminor=${kminor%%.*}
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kminor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
# -buildvcs=false: no git needed at build time (and none of its ownership
# checks), and a new commit does not force a relink.
"$GO" build -buildvcs=false -ldflags "$ldflags" -o "$out/tessera-testcluster" ./cmd/tessera-testcluster
# Multi-call convenience: `kubectl` runs the linked upstream kubectl.
ln -sf tessera-testcluster "$out/kubectl"
echo "build.sh: built $out/tessera-testcluster in $((SECONDS - start))s" >&2
