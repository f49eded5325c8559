#!/usr/bin/env bash
# Fetch hwloc 2.12 (lstopo and libhwloc15) from Debian bookworm-backports (or trixie) and extract it into a cache
# (default .cache/hwloc-2.12 in this checkout, or $FAKEHW_HWLOC_DIR) with dpkg-deb -x; nothing is installed
# system-wide. bookworm ships hwloc 2.9, whose Linux backend does not yet guess memory tiers: the sysfs tests run
# the newer lstopo too, because it labels NUMA nodes (DRAM, HBM, CXL-DRAM) from the HMAT figures the tree gives.
# Idempotent (quick when the cache is complete); needs root for apt, else says so and exits 0.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${FAKEHW_HWLOC_DIR:-$root/.cache/hwloc-2.12}"

runs() { LD_LIBRARY_PATH="$dest/usr/lib/x86_64-linux-gnu" "$dest/usr/bin/lstopo-no-graphics" --version >/dev/null 2>&1; }
if [ -f "$dest/VERSION" ] && runs; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "fetch-real-hwloc: needs root, apt-get and dpkg-deb; the tests that need hwloc 2.12 will skip" >&2
  exit 0
fi
if [ "$(dpkg --print-architecture)" != amd64 ]; then
  echo "fetch-real-hwloc: only amd64 is fetched; the tests that need hwloc 2.12 will skip" >&2
  exit 0
fi

mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
mirror="${mirror:-http://deb.debian.org/debian}"
work="$dest.apt"
fetched=""
for suite in bookworm-backports trixie; do
  mkdir -p "$work/$suite/lists/partial" "$work/$suite/archives/partial" "$work/$suite/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" > "$work/$suite/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$work/$suite/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$work/$suite/lists" -o "Dir::Cache::Archives=$work/$suite/archives"
            -o APT::Sandbox::User=root)
  if ! apt-get "${apt_opts[@]}" update -qq >/dev/null 2>&1; then
    echo "fetch-real-hwloc: the $suite index could not be read; trying the next suite" >&2
    continue
  fi
  (cd "$work/$suite/debs" && rm -f ./*.deb &&
   apt-get "${apt_opts[@]}" download -qq hwloc-nox libhwloc15 >/dev/null 2>&1) || continue
  rm -rf "$dest.new"
  mkdir -p "$dest.new"
  for deb in "$work/$suite/debs"/*.deb; do
    dpkg-deb -x "$deb" "$dest.new"
  done
  version="$(dpkg-deb -f "$work/$suite/debs"/hwloc-nox_*.deb Version)"
  case "$version" in
    2.1[2-9]*|2.[2-9][0-9]*|[3-9]*) ;;
    *) echo "fetch-real-hwloc: $suite has hwloc $version, not 2.12 or later" >&2; continue ;;
  esac
  echo "$version" > "$dest.new/VERSION"
  rm -rf "$dest"
  mv "$dest.new" "$dest"
  if runs; then
    fetched="$version"
    break
  fi
  echo "fetch-real-hwloc: hwloc $version from $suite does not run here (libc too old?)" >&2
done
if [ -z "$fetched" ]; then
  echo "fetch-real-hwloc: no runnable hwloc 2.12+ fetched; the tests that need it will skip" >&2
  exit 0
fi
echo "fetch-real-hwloc: hwloc $fetched extracted into $dest" >&2
