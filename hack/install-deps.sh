#!/usr/bin/env bash
# Installs everything tessera needs to build and test on a fresh Debian 12 machine.
# Idempotent and quiet when everything is already there. Run as root (or with sudo).
#
#   hack/install-deps.sh            # Debian packages + CUDA headers
#
# Versions are pinned: Debian packages by the Debian 12 (bookworm) release, checked below by
# version prefix (stable only receives security fixes, so exact revisions would rot);
# CUDA headers exactly, to the CUDA version of the target driver (13.0.x).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps_dir="${TESSERA_DEPS_DIR:-$here/third_party}"

# package  expected-version-prefix
debian_packages=(
  "cmake 3.25"
  "ninja-build 1.11"
  "g++ 4:12"
  "clang 1:14"
  "clang-format 1:14"
  "clang-tidy 1:14"
  "libclang-rt-14-dev 1:14"
  "libgrpc++-dev 1.51"
  "protobuf-compiler-grpc 1.51"
  "libprotobuf-dev 3.21"
  "protobuf-compiler 3.21"
  "nlohmann-json3-dev 3.11"
  "libyaml-cpp-dev 0.7"
  "libcli11-dev 2.1"
  "libssl-dev 3.0"
  "libcpp-httplib-dev 0.11"
  "libgtest-dev 1.12"
  "libgmock-dev 1.12"
  "libbenchmark-dev 1.7"
  "libspdlog-dev 1:1.10"
  "libfmt-dev 9.1"
  "valgrind 1:3.19"
  "runc 1.1"
  "busybox-static 1:1.35"
  "containernetworking-plugins 1.1"
  "python3-pip 23"
  "python3-venv 3.11"
)

# PyPI wheels that carry the CUDA headers (no toolkit is installed or needed to build).
cuda_wheels=(
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-nvml-dev==13.0.87"
)

say() { printf 'install-deps: %s\n' "$*"; }

missing=()
for row in "${debian_packages[@]}"; do
  read -r pkg _ <<<"$row"
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for row in "${debian_packages[@]}"; do
  read -r pkg want <<<"$row"
  have=$(dpkg-query -W -f='${Version}' "$pkg")
  case "$have" in
    "$want"*) ;;
    *) say "error: $pkg is $have, tessera is pinned to $want.*"; exit 1 ;;
  esac
done

# CUDA headers: unpack the wheels into third_party/cuda/{include,...}; a stamp makes it idempotent.
stamp="$deps_dir/cuda/.stamp"
want_stamp="${cuda_wheels[*]}"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want_stamp" ]]; then
  say "fetching CUDA headers: ${cuda_wheels[*]}"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$tmp" "${cuda_wheels[@]}"
  rm -rf "$deps_dir/cuda"
  mkdir -p "$deps_dir/cuda/include"
  for whl in "$tmp"/*.whl; do
    python3 - "$whl" "$deps_dir/cuda/include" <<'PY'
import sys, zipfile, os
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        parts = name.split('/')
        if 'include' in parts and not name.endswith('/'):
            rel = '/'.join(parts[parts.index('include') + 1:])
            out = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, 'wb') as f:
                f.write(z.read(name))
PY
  done
  for h in cuda.h nvml.h; do
    [[ -f "$deps_dir/cuda/include/$h" ]] || { say "error: $h not found in the CUDA wheels"; exit 1; }
  done
  printf '%s' "$want_stamp" >"$stamp"
fi

# An older glibc to start processes under with the preload library preloaded
# (test/integration/preload_old_glibc_test.sh): Debian 11's libc6 (glibc 2.31) and libc-bin (its
# dynamically linked tools), as .debs in a cache the test unpacks into a root of its own. Fetched
# with apt-get from the bullseye archive through a private apt state (this machine's sources and
# package database are untouched); TESSERA_OLD_GLIBC=0 leaves it out.
old_glibc_dir="$deps_dir/old-glibc"
old_glibc_packages=("libc6 2.31" "libc-bin 2.31")
old_glibc_stamp="bullseye ${old_glibc_packages[*]}"
if [[ ${TESSERA_OLD_GLIBC:-1} != 0 &&
      ( ! -f $old_glibc_dir/.stamp || "$(cat "$old_glibc_dir/.stamp")" != "$old_glibc_stamp" ) ]]; then
  say "fetching Debian 11 packages: ${old_glibc_packages[*]}"
  apt_tmp=$(mktemp -d)
  mkdir -p "$apt_tmp/lists/partial" "$apt_tmp/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
    >"$apt_tmp/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$apt_tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$apt_tmp/lists" -o "Dir::Cache=$apt_tmp/cache"
            -o Dir::State::status=/dev/null -o APT::Sandbox::User=root)
  if ! apt-get "${apt_opts[@]}" update -qq; then
    # Not fatal: preload_old_glibc_test then skips saying so; preload_floor_test still checks
    # the library's symbol versions.
    say "warning: the bullseye archive could not be read; preload_old_glibc_test will skip"
    rm -rf "$apt_tmp"
  else
    rm -rf "$old_glibc_dir"
    mkdir -p "$old_glibc_dir"
    for row in "${old_glibc_packages[@]}"; do
      read -r pkg want <<<"$row"
      (cd "$old_glibc_dir" && apt-get "${apt_opts[@]}" download -qq "$pkg")
      have=$(dpkg-deb -f "$old_glibc_dir/${pkg}_"*.deb Version)
      case "$have" in
        "$want"*) ;;
        *) say "error: bullseye's $pkg is $have, expected $want.*"; exit 1 ;;
      esac
    done
    rm -rf "$apt_tmp"
    printf '%s' "$old_glibc_stamp" >"$old_glibc_dir/.stamp"
  fi
fi
