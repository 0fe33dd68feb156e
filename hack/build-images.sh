#!/usr/bin/env bash
# Builds tessera's container images without a container engine: OCI image archives
# (OUT_DIR/<image>.oci.tar) that `podman load`, `skopeo copy oci-archive:`, `ctr image import`
# and `docker load` accept. deployments/images/README.md describes the images and the choices.
#
#   hack/build-images.sh [OUT_DIR]          # default OUT_DIR: build/images
#   hack/build-images.sh --rootfs DIR       # only stage the root filesystems (the Dockerfile's way)
#
# The images are FROM scratch: the binaries, their shared-library closure copied from this
# (Debian 12) host as ldd resolves it, the dynamic loader, and a few /etc files. Layers:
#   1. base   glibc, libstdc++, libgcc_s, the loader, /etc, CA bundle (the same in every image)
#   2. libs   the rest of the image's closure (gRPC, OpenSSL, yaml-cpp, ...); in the node image
#             also sh (dash), cp, mv, chmod for the Helm chart's init container
#   3. app    tessera's own files
# Same inputs, same bytes: entries sorted, mtimes SOURCE_DATE_EPOCH, numeric owners, gzip -n.
#
# Environment:
#   TESSERA_BUILD_DIR       use the binaries of this build folder (no build); default: configure
#                           and build the release preset into build/release
#   TESSERA_BIN_CLI, TESSERA_BIN_SCHEDULER, TESSERA_BIN_NODE, TESSERA_LIB_HOOK
#                           one file each (all four given: no build folder needed)
#   SOURCE_DATE_EPOCH       timestamps (default: the last commit's time, else 0)
#   TESSERA_IMAGE_REGISTRY  name prefix (default ghcr.io/tessera-dev, the Helm chart's):
#                           <registry>/<image>:<tag>
#   TESSERA_IMAGE_TAG       (default: the VERSION file)
#   TESSERA_IMAGE_SOURCE, TESSERA_IMAGE_LICENSES, TESSERA_IMAGE_REVISION   labels
#   TESSERA_IMAGE_GZIP_LEVEL  1-9 (default 6; part of the layers' digests)
set -euo pipefail
umask 022
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

say() { printf 'build-images: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}
usage() {  # the header comment above
  local line
  while IFS= read -r line; do
    [[ $line == '#!'* ]] && continue
    [[ $line == '#'* ]] || break
    line=${line#\#}
    printf '%s\n' "${line# }"
  done <"${BASH_SOURCE[0]}"
}

rootfs_only=""
out=""
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --rootfs) [[ $# -ge 2 ]] || die "--rootfs needs a folder"; rootfs_only=$2; shift 2 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ -z $out ]] || die "one OUT_DIR only"; out=$1; shift ;;
  esac
done
[[ -z $rootfs_only || -z $out ]] || die "--rootfs and OUT_DIR exclude each other"
out=${out:-$here/build/images}

for tool in tar gzip sha256sum ldd find sort date realpath readlink stat head; do
  command -v "$tool" >/dev/null || die "$tool is needed"
done

version=$(head -n 1 "$here/VERSION")
[[ $version =~ ^[0-9A-Za-z.+-]+$ ]] || die "VERSION holds '$version'"
registry=${TESSERA_IMAGE_REGISTRY:-ghcr.io/tessera-dev}  # the Helm chart's default repositories
tag=${TESSERA_IMAGE_TAG:-$version}
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "'$tag' is not an image tag (TESSERA_IMAGE_TAG)"
[[ $registry =~ ^[a-z0-9]([a-z0-9._:/-]*[a-z0-9])?$ ]] || die "'$registry' is not a registry prefix"
source_url=${TESSERA_IMAGE_SOURCE:-https://tessera.dev}
# The repository carries no license file yet: SPDX's "no assertion" until it does.
licenses=${TESSERA_IMAGE_LICENSES:-NOASSERTION}
revision=${TESSERA_IMAGE_REVISION-$(git -C "$here" rev-parse HEAD 2>/dev/null || true)}
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || echo 0)}
[[ $epoch =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH is '$epoch', not seconds"
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
gzip_level=${TESSERA_IMAGE_GZIP_LEVEL:-6}
[[ $gzip_level =~ ^[1-9]$ ]] || die "TESSERA_IMAGE_GZIP_LEVEL is '$gzip_level'"

case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) die "unsupported machine $(uname -m)" ;;
esac

# The preload library's promised ABI floor (deployments/images/preload-abi-floor), as labels.
floor_file="$here/deployments/images/preload-abi-floor"
[[ -f $floor_file ]] || die "$floor_file is missing"
floor_of() {
  local key value
  while read -r key value; do
    [[ $key == "$1" ]] && printf '%s\n' "$value"
  done <"$floor_file"
  return 0
}
glibc_floor=$(floor_of GLIBC)
glibcxx_floor=$(floor_of GLIBCXX)
[[ -n $glibc_floor && -n $glibcxx_floor ]] || die "$floor_file lacks GLIBC or GLIBCXX"

# --- the binaries -------------------------------------------------------------------------------
bin_cli=${TESSERA_BIN_CLI:-}
bin_scheduler=${TESSERA_BIN_SCHEDULER:-}
bin_node=${TESSERA_BIN_NODE:-}
lib_hook=${TESSERA_LIB_HOOK:-}
if [[ -z $bin_cli || -z $bin_scheduler || -z $bin_node || -z $lib_hook ]]; then
  build_dir=${TESSERA_BUILD_DIR:-}
  if [[ -z $build_dir ]]; then
    build_dir=$here/build/release
    say "building the release preset into $build_dir"
    (cd "$here" && cmake --preset release >/dev/null &&
      cmake --build "$build_dir" --target tessera tessera-scheduler tessera-node tessera_hook)
  fi
  bin_cli=${bin_cli:-$build_dir/cmd/tessera/tessera}
  bin_scheduler=${bin_scheduler:-$build_dir/cmd/tessera-scheduler/tessera-scheduler}
  bin_node=${bin_node:-$build_dir/cmd/tessera-node/tessera-node}
  lib_hook=${lib_hook:-$build_dir/src/hook/libtessera-cuda.so}
fi
for f in "$bin_cli" "$bin_scheduler" "$bin_node" "$lib_hook"; do
  [[ -f $f ]] || die "$f is missing (build it, or point TESSERA_BUILD_DIR / TESSERA_BIN_* at it)"
  IFS= read -r -n 4 magic <"$f" || true
  [[ $magic == $'\x7fELF' ]] || die "$f is not an ELF file"
done

# Host tools copied into the node image: the Helm chart's init container installs the preload
# library on the host with them (sh -c 'cp; chmod; mv'). The scheduler image has no shell.
node_tools=(/bin/sh /usr/bin/cp /usr/bin/mv /usr/bin/chmod)
for f in "${node_tools[@]}"; do [[ -x $f ]] || die "$f is missing"; done

# --- staging ------------------------------------------------------------------------------------
if [[ -n $rootfs_only ]]; then
  mkdir -p "$rootfs_only"
  stage=$(cd "$rootfs_only" && pwd)
  [[ -z $(ls -A "$stage") ]] || die "$stage is not empty"
  work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-images.XXXXXX")
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-images.XXXXXX")
  stage=$work/rootfs
fi
trap 'rm -rf "$work"' EXIT

# Host files staged into a layer, under every name they were reached by (dpkg knows one of them).
declare -A layer_files=()

# stage_dir ROOT PATH: a real directory (no symlink on the way: stage_path guarantees it).
stage_dir() {
  local root=$1 path=$2
  [[ -L $root$path ]] && die "staging $path would follow a symlink"
  mkdir -p "$root$path"
}

# stage_symlink ROOT PATH TARGET
stage_symlink() {
  local root=$1 path=$2 target=$3
  if [[ -L $root$path ]]; then
    [[ $(readlink "$root$path") == "$target" ]] || die "$path: two different symlink targets"
    return
  fi
  [[ -e $root$path ]] && die "$path is staged both as a symlink and as a file"
  stage_dir "$root" "$(dirname "$path")"
  ln -s "$target" "$root$path"
}

# stage_file ROOT HOSTPATH [IMAGEPATH [MODE]]: a copy, mode 0755 if executable else 0644.
stage_file() {
  local root=$1 src=$2 dst=${3:-$2} mode=${4:-}
  [[ -L $root$dst ]] && die "staging $dst would follow a symlink"
  if [[ -z $mode ]]; then
    if [[ -x $src ]]; then mode=0755; else mode=0644; fi
  fi
  stage_dir "$root" "$(dirname "$dst")"
  cp "$src" "$root$dst"
  chmod "$mode" "$root$dst"
}

# stage_path ROOT PATH: the host's PATH in the image, resolving symlinks one component at a time
# and recreating each symlink met on the way (/lib -> usr/lib, /lib64/ld-linux-x86-64.so.2 ->
# /lib/x86_64-linux-gnu/..., libfoo.so.1 -> libfoo.so.1.2.3), so every name a binary or the
# loader uses exists in the image as it does on the host. Nothing is written through a symlink.
stage_path() {
  local root=$1 path=$2 depth=${3:-0} aliases=${4:-}
  ((depth < 40)) || die "too many symlinks resolving $path"
  aliases="$aliases $path"
  local -a comps
  IFS=/ read -ra comps <<<"${path#/}"
  local prefix="" i n=${#comps[@]}
  for ((i = 0; i < n; i++)); do
    [[ -z ${comps[i]} || ${comps[i]} == . ]] && continue
    prefix="$prefix/${comps[i]}"
    if [[ -L $prefix ]]; then
      local target resolved rest
      target=$(readlink "$prefix")
      stage_symlink "$root" "$prefix" "$target"
      if [[ $target == /* ]]; then resolved=$target; else resolved="$(dirname "$prefix")/$target"; fi
      rest=$(IFS=/ && echo "${comps[*]:i+1}")
      [[ -n $rest ]] && resolved="$resolved/$rest"
      stage_path "$root" "$(realpath -ms "$resolved")" $((depth + 1)) "$aliases"
      return
    fi
  done
  if [[ -d $prefix ]]; then
    stage_dir "$root" "$prefix"
  elif [[ -f $prefix ]]; then
    [[ -e $root$prefix ]] || stage_file "$root" "$prefix"
    # dpkg knows a usr-merged file by its old name (/bin/cp, /lib/x86_64-linux-gnu/...): add it.
    local top
    for top in /bin /sbin /lib /lib64; do
      if [[ $prefix == /usr$top/* && -L $top ]]; then aliases="$aliases $top${prefix#/usr$top}"; fi
    done
    layer_files[$root]="${layer_files[$root]:-}$aliases"
  else
    die "$path: no such file on this host"
  fi
}

# closure FILE...: every shared object the loader maps for FILEs (ldd's resolved paths), and the
# loader itself, one a line, sorted.
closure() {
  local f line
  for f in "$@"; do
    local listing
    listing=$(env -u LD_LIBRARY_PATH -u LD_PRELOAD ldd "$f" 2>&1) || die "ldd $f: $listing"
    while IFS= read -r line; do
      if [[ $line =~ =\>\ not\ found ]]; then
        die "$f: ${line%% =>*} not found"
      elif [[ $line =~ =\>\ (/[^ ]+)\ \( ]]; then
        printf '%s\n' "${BASH_REMATCH[1]}"
      elif [[ $line =~ ^[[:space:]]*(/[^ ]+)\ \( ]]; then
        printf '%s\n' "${BASH_REMATCH[1]}"
      fi
    done <<<"$listing"
  done | sort -u
}

# Debian packages owning what a layer holds: a status.d record each (what distroless images
# carry: scanners read it) and the package's copyright file. Skipped where dpkg is absent.
declare -A packages_in_base=()
stage_package_records() {  # ROOT SKIP_BASE(yes|no) [PACKAGE...]: PACKAGEs besides the owners
  local root=$1 skip_base=$2
  shift 2
  command -v dpkg-query >/dev/null || return 0
  local -a files
  read -ra files <<<"${layer_files[$root]:-}"
  ((${#files[@]})) || return 0
  local line owners pkg
  local -A seen=()
  for pkg in "$@"; do
    if dpkg-query -W "$pkg" >/dev/null 2>&1; then seen[$pkg]=1; fi
  done
  # "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"; several owners are comma-separated.
  while IFS= read -r line; do
    [[ $line == diversion* || $line != *': /'* ]] && continue
    owners=${line%%: /*}
    for pkg in ${owners//,/ }; do seen[${pkg%%:*}]=1; done
  done < <(dpkg-query -S "${files[@]}" 2>/dev/null || true)
  local record format field
  format=""
  for field in Package Status Priority Section Architecture Multi-Arch Source Version; do
    format+="$field: \${$field}\n"
  done
  for pkg in $(printf '%s\n' "${!seen[@]}" | sort); do
    if [[ $skip_base == yes && -n ${packages_in_base[$pkg]:-} ]]; then continue; fi
    if [[ $skip_base == no ]]; then packages_in_base[$pkg]=1; fi
    record=""
    while IFS= read -r line; do
      if [[ $line != *': ' ]]; then record+="$line"$'\n'; fi  # empty fields left out
    done < <(dpkg-query -W -f="$format" "$pkg")
    printf '%s' "$record" | write_file "$root" "/var/lib/dpkg/status.d/$pkg" 0644
    if [[ -e /usr/share/doc/$pkg/copyright ]]; then
      stage_path "$root" "/usr/share/doc/$pkg/copyright"
    fi
  done
}

write_file() {  # ROOT PATH MODE <content on stdin>
  stage_dir "$1" "$(dirname "$2")"
  cat >"$1$2"
  chmod "$3" "$1$2"
}

nonroot_uid=65532
all_closure=$(closure "$bin_cli" "$bin_scheduler" "$bin_node" "$lib_hook" "${node_tools[@]}")
# The base layer: the C and C++ runtimes every tessera binary needs, and the loader.
base_names='^(ld-linux[^/]*\.so\.[0-9]+|libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
base_libs=()
while IFS= read -r p; do
  if [[ $(basename "$p") =~ $base_names ]]; then base_libs+=("$p"); fi
done <<<"$all_closure"
((${#base_libs[@]} >= 5)) || die "the C/C++ runtime was not found in the closure: ${base_libs[*]}"
declare -A in_base=()
for p in "${base_libs[@]}"; do in_base[$p]=1; done

say "staging root filesystems"
base=$stage/base
mkdir -p "$base"
for p in "${base_libs[@]}"; do stage_path "$base" "$p"; done
for d in /etc /root /tmp /home/tessera /usr/local/bin; do stage_dir "$base" "$d"; done
# usr-merged like Debian 12 (/lib and /lib64 come with the loader): /bin/cp works too.
if [[ -L /bin ]]; then stage_path "$base" /bin; fi
write_file "$base" /etc/passwd 0644 <<EOF
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
tessera:x:$nonroot_uid:$nonroot_uid:tessera:/home/tessera:/sbin/nologin
EOF
write_file "$base" /etc/group 0644 <<EOF
root:x:0:
nogroup:x:65534:
tessera:x:$nonroot_uid:
EOF
write_file "$base" /etc/nsswitch.conf 0644 <<'EOF'
passwd: files
group: files
shadow: files
hosts: files dns
networks: files
protocols: files
services: files
EOF
[[ -f /etc/ssl/certs/ca-certificates.crt ]] ||
  die "/etc/ssl/certs/ca-certificates.crt is missing (Debian package ca-certificates)"
stage_file "$base" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt 0644
# OpenSSL's default paths on Debian (OPENSSLDIR /usr/lib/ssl): a kubeconfig without a CA falls
# back to them.
stage_symlink "$base" /usr/lib/ssl/cert.pem /etc/ssl/certs/ca-certificates.crt
stage_symlink "$base" /usr/lib/ssl/certs /etc/ssl/certs
if [[ -e /usr/lib/os-release ]]; then
  # Where the libraries come from, for scanners (with the status.d records).
  stage_file "$base" /usr/lib/os-release /usr/lib/os-release 0644
  stage_symlink "$base" /etc/os-release ../usr/lib/os-release
fi
# The CA bundle is generated from ca-certificates' files; os-release is base-files'.
stage_package_records "$base" no ca-certificates base-files

declare -A image_entry=() image_user=() image_ports=() image_title=()

for image in tessera-scheduler tessera-node; do
  libs=$stage/$image/libs
  app=$stage/$image/app
  mkdir -p "$libs" "$app"
  case $image in
    tessera-scheduler) inputs=("$bin_scheduler") ;;
    tessera-node) inputs=("$bin_node" "$bin_cli" "$lib_hook" "${node_tools[@]}") ;;
  esac
  image_closure=$(closure "${inputs[@]}")
  while IFS= read -r p; do
    [[ -z $p || -n ${in_base[$p]:-} ]] || stage_path "$libs" "$p"
  done <<<"$image_closure"
  if [[ $image == tessera-node ]]; then
    for t in "${node_tools[@]}"; do stage_path "$libs" "$t"; done
  fi
  stage_package_records "$libs" yes
  stage_dir "$app" /usr/local/bin
done
stage_file "$stage/tessera-scheduler/app" "$bin_scheduler" /usr/local/bin/tessera-scheduler 0755
stage_file "$stage/tessera-node/app" "$bin_node" /usr/local/bin/tessera-node 0755
stage_file "$stage/tessera-node/app" "$bin_cli" /usr/local/bin/tessera 0755
# The path the Helm chart's init container copies to the host (names.h kPathHookLibrary there).
stage_file "$stage/tessera-node/app" "$lib_hook" /usr/local/lib/tessera/libtessera-cuda.so 0755

# Modes the umask or the host could vary: directories 0755; the home and /tmp as intended.
find "$stage" -type d -exec chmod 0755 {} +
chmod 1777 "$base/tmp"
chmod 0700 "$base/root" "$base/home/tessera"
# Owners other than root (the layer tar sets them by path; the Dockerfile's COPY keeps them).
declare -A owner_of=([home/tessera]="$nonroot_uid:$nonroot_uid")
if ((EUID == 0)); then chown "$nonroot_uid:$nonroot_uid" "$base/home/tessera"; fi

if [[ -n $rootfs_only ]]; then
  say "root filesystems staged in $stage: base, <image>/libs, <image>/app"
  exit 0
fi

# --- layers ---------------------------------------------------------------------------------------
tar_flags=(--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime
  --mtime="@$epoch" --numeric-owner --no-recursion --blocking-factor=1 --no-acls --no-xattrs
  --no-selinux)

# make_tar ROOT OUT: every entry of ROOT, sorted by path bytes, each with its owner.
make_tar() {
  local root=$1 tarball=$2
  local list=$work/list chunks=() chunk_owner="" n=0 path owner
  find "$root" -mindepth 1 -printf '%P\n' | sort >"$list"
  [[ -s $list ]] || die "$root is empty"
  # Runs of entries with one owner each become one tar; the runs are concatenated.
  while IFS= read -r path; do
    owner=${owner_of[$path]:-0:0}
    if [[ $owner != "$chunk_owner" ]]; then
      n=$((n + 1))
      chunks+=("$owner")
      chunk_owner=$owner
      : >"$work/chunk.$n"
    fi
    printf '%s\n' "$path" >>"$work/chunk.$n"
  done <"$list"
  : >"$tarball"
  local i
  for ((i = 1; i <= n; i++)); do
    tar --create --file="$work/chunk.$i.tar" "${tar_flags[@]}" --owner="${chunks[i - 1]%%:*}" \
      --group="${chunks[i - 1]##*:}" -C "$root" --verbatim-files-from -T "$work/chunk.$i"
    if ((i < n)); then
      head -c -1024 "$work/chunk.$i.tar" >>"$tarball"  # without its end-of-archive blocks
    else
      cat "$work/chunk.$i.tar" >>"$tarball"
    fi
    rm -f "$work/chunk.$i" "$work/chunk.$i.tar"
  done
}

blobs=""  # the current image's blob folder
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
size_of() { stat -c %s "$1"; }

# add_blob FILE: moves FILE into the blob folder; sets blob_digest (hex) and blob_size.
blob_digest="" blob_size=""
add_blob() {
  blob_digest=$(sha_of "$1")
  blob_size=$(size_of "$1")
  mv -f "$1" "$blobs/$blob_digest"
  chmod 0644 "$blobs/$blob_digest"
}

# json_str S: S as a JSON string (the values here are names, versions, URLs: no control bytes).
json_str() {
  local s=$1
  [[ $s != *[[:cntrl:]]* ]] || die "control character in '$s'"
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}

# Layer tars are made once per root (the base layer is the same blob in both images).
declare -A layer_digest=() layer_size=() layer_diffid=()
layer_of() {
  local root=$1
  [[ -n ${layer_digest[$root]:-} ]] && return
  make_tar "$root" "$work/layer.tar"
  layer_diffid[$root]=$(sha_of "$work/layer.tar")
  gzip -n "-$gzip_level" -c "$work/layer.tar" >"$work/layer.tar.gz"
  rm -f "$work/layer.tar"
  local d
  d=$(sha_of "$work/layer.tar.gz")
  layer_digest[$root]=$d
  layer_size[$root]=$(size_of "$work/layer.tar.gz")
  mv -f "$work/layer.tar.gz" "$work/layers.$d"
}

image_title[tessera-scheduler]="tessera scheduler extender and admission webhooks"
image_title[tessera-node]="tessera node agent, CLI and preload library"
image_entry[tessera-scheduler]=/usr/local/bin/tessera-scheduler
image_entry[tessera-node]=/usr/local/bin/tessera-node
# The scheduler needs no privilege; the node agent does (deployments/images/README.md: why).
image_user[tessera-scheduler]="$nonroot_uid:$nonroot_uid"
image_user[tessera-node]="0:0"
image_ports[tessera-scheduler]='"ExposedPorts":{"8443/tcp":{},"8888/tcp":{}},'
image_ports[tessera-node]=''

mkdir -p "$out"
for image in tessera-scheduler tessera-node; do
  say "$image: layers"
  layout=$work/layout-$image
  blobs=$layout/blobs/sha256
  mkdir -p "$blobs"
  roots=("$base" "$stage/$image/libs" "$stage/$image/app")
  comments=("base: glibc, libstdc++, libgcc_s, the loader, /etc, CA certificates"
    "libs: the shared-library closure from Debian packages"
    "app: tessera")
  layers_json="" diffids_json="" history_json="" docker_layers=""
  for i in 0 1 2; do
    r=${roots[i]}
    layer_of "$r"
    cp "$work/layers.${layer_digest[$r]}" "$blobs/${layer_digest[$r]}"
    chmod 0644 "$blobs/${layer_digest[$r]}"
    sep=","
    ((i == 0)) && sep=""
    layers_json+="$sep{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:${layer_digest[$r]}\",\"size\":${layer_size[$r]}}"
    diffids_json+="$sep\"sha256:${layer_diffid[$r]}\""
    history_json+="$sep{\"created\":\"$created\",\"created_by\":\"hack/build-images.sh\",\"comment\":$(json_str "${comments[i]}")}"
    docker_layers+="$sep\"blobs/sha256/${layer_digest[$r]}\""
  done

  labels="\"org.opencontainers.image.title\":$(json_str "$image")"
  labels+=",\"org.opencontainers.image.description\":$(json_str "${image_title[$image]}")"
  labels+=",\"org.opencontainers.image.version\":$(json_str "$version")"
  labels+=",\"org.opencontainers.image.created\":$(json_str "$created")"
  labels+=",\"org.opencontainers.image.source\":$(json_str "$source_url")"
  labels+=",\"org.opencontainers.image.licenses\":$(json_str "$licenses")"
  [[ -n $revision ]] && labels+=",\"org.opencontainers.image.revision\":$(json_str "$revision")"
  if [[ $image == tessera-node ]]; then
    labels+=",\"dev.tessera.preload.path\":\"/usr/local/lib/tessera/libtessera-cuda.so\""
    labels+=",\"dev.tessera.preload.glibc-floor\":$(json_str "$glibc_floor")"
    labels+=",\"dev.tessera.preload.glibcxx-floor\":$(json_str "$glibcxx_floor")"
  fi
  env_json='"PATH=/usr/local/bin:/usr/bin:/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"'

  printf '{"architecture":"%s","config":{"Entrypoint":["%s"],"Env":[%s],%s"Labels":{%s},"User":"%s","WorkingDir":"/"},"created":"%s","history":[%s],"os":"linux","rootfs":{"diff_ids":[%s],"type":"layers"}}' \
    "$arch" "${image_entry[$image]}" "$env_json" "${image_ports[$image]}" "$labels" \
    "${image_user[$image]}" "$created" "$history_json" "$diffids_json" >"$work/config.json"
  add_blob "$work/config.json"
  config_digest=$blob_digest config_size=$blob_size

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[%s]}' \
    "$config_digest" "$config_size" "$layers_json" >"$work/manifest.json"
  add_blob "$work/manifest.json"
  manifest_digest=$blob_digest manifest_size=$blob_size

  ref="$registry/$image:$tag"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":%s,"org.opencontainers.image.ref.name":%s}}]}' \
    "$manifest_digest" "$manifest_size" "$arch" "$(json_str "$ref")" "$(json_str "$ref")" \
    >"$layout/index.json"
  # docker load reads this (docker save's format) where it does not read index.json.
  printf '[{"Config":"blobs/sha256/%s","RepoTags":[%s],"Layers":[%s]}]' \
    "$config_digest" "$(json_str "$ref")" "$docker_layers" >"$layout/manifest.json"
  chmod 0644 "$layout/oci-layout" "$layout/index.json" "$layout/manifest.json"
  find "$layout" -type d -exec chmod 0755 {} +

  make_tar "$layout" "$work/$image.oci.tar"
  mv -f "$work/$image.oci.tar" "$out/$image.oci.tar"
  printf 'sha256:%s\n' "$manifest_digest" >"$out/$image.digest"
  say "$image: $out/$image.oci.tar ($ref, manifest sha256:$manifest_digest, $(size_of "$out/$image.oci.tar") bytes)"
done
