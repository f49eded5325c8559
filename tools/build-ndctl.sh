#!/usr/bin/env bash
# Build ndctl v81 (the `cxl`, `daxctl` and `ndctl` tools whose CXL test suite is in ../shared/peer-suites/ndctl-cxl)
# into a cache (default .cache/ndctl-81 in this checkout, or $FAKEHW_NDCTL_DIR). Why: bookworm ships ndctl 76.1,
# which lacks what the v81 tests use (`cxl list -X`, `cxl create-region -Q`, root decoders' `qos_class`); trixie's
# binary package needs trixie's libc. So the upstream source is taken from Debian trixie's source package (its
# checksum checked against the signed Sources index) and built on this machine with bookworm's libraries. Nothing
# is installed system-wide: the harness points the tests at $dest/bin/{cxl,daxctl,ndctl}. Idempotent (quick when
# the cache is complete); needs root for apt, else says so and exits 0 (the tests that need it then skip).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${FAKEHW_NDCTL_DIR:-$root/.cache/ndctl-81}"
version=81

if [ -x "$dest/bin/cxl" ] && [ -x "$dest/bin/daxctl" ] && [ -x "$dest/bin/ndctl" ] && \
   [ "$("$dest/bin/cxl" version 2>/dev/null)" = "$version" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "build-ndctl: needs root and apt-get; the ndctl peer-suite tests will skip" >&2
  exit 0
fi

# Build dependencies, all from bookworm.
deps=(meson ninja-build pkgconf gcc libkmod-dev libudev-dev uuid-dev libjson-c-dev libkeyutils-dev
      libiniparser-dev libtraceevent-dev libtracefs-dev)
missing=()
for pkg in "${deps[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-ndctl: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The source: trixie's ndctl source package, through a private sources list and lists directory (the machine's
# own apt configuration is left alone). Only the upstream tarball is needed; its SHA-256 comes from the Sources
# index apt verified against the archive's signed InRelease.
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
mirror="${mirror:-http://deb.debian.org/debian}"
work="$dest.src"
mkdir -p "$work/lists/partial"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root)
tarball="$work/ndctl_$version.orig.tar.gz"
if [ ! -f "$tarball" ]; then
  apt-get "${apt_opts[@]}" update -qq >/dev/null
  # The Debian packaging tarball is not needed (and a mirror may lack it): keep going when only it failed.
  (cd "$work" && apt-get "${apt_opts[@]}" source --download-only -qq "ndctl=$version-1" >/dev/null 2>&1) || true
  if [ ! -f "$tarball" ]; then
    echo "build-ndctl: could not download ndctl $version's source from $mirror (trixie); the tests that need it skip" >&2
    exit 0
  fi
fi
want="$(apt-cache "${apt_opts[@]}" showsrc ndctl 2>/dev/null |
        awk -v f="ndctl_$version.orig.tar.gz" '/^Checksums-Sha256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1; exit}')"
have="$(sha256sum "$tarball" | cut -d' ' -f1)"
if [ -z "$want" ] || [ "$want" != "$have" ]; then
  echo "build-ndctl: $tarball does not match the archive's checksum (${want:-unknown}); removed" >&2
  rm -f "$tarball"
  exit 1
fi

rm -rf "$work/ndctl-$version" "$dest.new"
tar -C "$work" -xzf "$tarball"
cd "$work/ndctl-$version"
# Docs need asciidoctor, systemd units are not used; keyutils and libtracefs stay on (ndctl 81 does not build
# without them).
meson setup build -Ddocs=disabled -Dasciidoctor=disabled -Dsystemd=disabled -Dbashcompletiondir=no \
  -Dtest=disabled >/dev/null
echo "build-ndctl: building ndctl $version" >&2
ninja -C build >/dev/null
mkdir -p "$dest.new/bin" "$dest.new/lib"
cp -a build/cxl/lib/libcxl.so* build/daxctl/lib/libdaxctl.so* build/ndctl/lib/libndctl.so* "$dest.new/lib/"
for tool in cxl daxctl ndctl; do
  cp "build/$tool/$tool" "$dest.new/bin/$tool.real"
  # The binaries carry the build directory as their rpath; the wrapper points them at the cached libraries.
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s/bin/%s.real" "$@"\n' \
    "$dest" "$dest" "$tool" > "$dest.new/bin/$tool"
  chmod 755 "$dest.new/bin/$tool"
done
cd "$root"
rm -rf "$dest"
mv "$dest.new" "$dest"
rm -rf "$work/ndctl-$version"
echo "build-ndctl: ndctl $("$dest/bin/cxl" version) in $dest/bin" >&2
