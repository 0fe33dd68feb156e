#!/usr/bin/env bash
# Pin k8s.io/kubernetes in this module and derive, from k8s.io/kubernetes's own
# go.mod, a `replace` for every k8s.io/* staging module (upstream lists them
# at v0.0.0 and replaces them with ./staging/src/...; outside the kubernetes
# repo each must point at the matching published v0.X.Y version instead).
# Also pins go.etcd.io/etcd/server/v3 to the version Kubernetes pins.
#
# usage: gen-replaces.sh [K8S_VERSION] [--tidy]
#   K8S_VERSION  e.g. v1.36.3 (default: the k8s.io/kubernetes version already in go.mod)
#   --tidy       run `go mod tidy` afterwards
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
GO=${GO:-go}

ver="" tidy=0
for a in "$@"; do
  case "$a" in
    --tidy) tidy=1 ;;
    v1.*) ver="$a" ;;
    *) echo "usage: $0 [v1.X.Y] [--tidy]" >&2; exit 2 ;;
  esac
done
if [[ -z "$ver" ]]; then
  ver=$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' go.mod)
fi
[[ -n "$ver" ]] || { echo "$0: no k8s.io/kubernetes version given or in go.mod" >&2; exit 2; }
staging="v0.${ver#v1.}"

modfile=$($GO mod download -json "k8s.io/kubernetes@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[[ -f "$modfile" ]] || { echo "$0: could not fetch go.mod of k8s.io/kubernetes@$ver" >&2; exit 1; }

mapfile -t mods < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\1#p' "$modfile" | sort -u)
(( ${#mods[@]} > 0 )) || { echo "$0: no staging replaces found in $modfile" >&2; exit 1; }
etcd=$(awk '$1=="go.etcd.io/etcd/server/v3" {print $2; exit}' "$modfile")

# Drop stale k8s.io replaces, then add the fresh ones in one edit.
args=()
while read -r old; do
  [[ -n "$old" ]] && args+=("-dropreplace=$old")
done < <($GO mod edit -json | sed -n 's/^[[:space:]]*"Path": "\(k8s\.io\/[^"]*\)",\{0,1\}$/\1/p' | sort -u)
for m in "${mods[@]}"; do
  args+=("-replace=$m=$m@$staging")
done
args+=("-require=k8s.io/kubernetes@$ver")
[[ -n "$etcd" ]] && args+=("-require=go.etcd.io/etcd/server/v3@$etcd")
$GO mod edit "${args[@]}"
echo "k8s.io/kubernetes $ver: ${#mods[@]} staging replaces -> $staging; etcd server $etcd" >&2

if (( tidy )); then
  $GO mod tidy
fi
