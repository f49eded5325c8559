#!/usr/bin/env bash
# Fetch the real NVIDIA 535 user space from Debian bookworm non-free and extract it into a cache (default
# .cache/nvidia-535 in this checkout, or $FAKEHW_REAL_NVIDIA_DIR) with dpkg-deb -x: nvidia-smi, libnvidia-ml1
# (the real libnvidia-ml.so.535.261.03) and libnvidia-ml-dev (nvml.h). Nothing is installed system-wide: the
# fake-NVML tests run the real nvidia-smi against the fake library and compare symbols and struct layouts with
# the real ones. Idempotent (quick when the cache is complete); needs root for apt, else says so and exits 0.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${FAKEHW_REAL_NVIDIA_DIR:-$root/.cache/nvidia-535}"
want=535.261.03-1

if [ -f "$dest/VERSION" ] && [ -x "$dest/usr/lib/nvidia/current/nvidia-smi" ] && [ -f "$dest/usr/include/nvml.h" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "fetch-real-nvidia: needs root, apt-get and dpkg-deb; the tests that need the real nvidia-smi will skip" >&2
  exit 0
fi

# The same Debian mirror the machine uses, with the non-free component, in a private sources list and lists
# directory so the machine's own apt configuration is left alone.
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
mirror="${mirror:-http://deb.debian.org/debian}"
work="$dest.apt"
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm non-free" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq >/dev/null

# Prefer the version the symbol list was taken from; take the archive's current one if it moved on.
cd "$work/debs"
rm -f ./*.deb
if ! apt-get "${apt_opts[@]}" download -qq "nvidia-smi=$want" "libnvidia-ml1=$want" >/dev/null 2>&1; then
  apt-get "${apt_opts[@]}" download -qq nvidia-smi libnvidia-ml1 >/dev/null
fi
apt-get "${apt_opts[@]}" download -qq libnvidia-ml-dev >/dev/null

rm -rf "$dest.new"
mkdir -p "$dest.new"
for deb in ./*.deb; do
  dpkg-deb -x "$deb" "$dest.new"
done
dpkg-deb -f ./nvidia-smi_*.deb Version > "$dest.new/VERSION"
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "fetch-real-nvidia: nvidia-smi $(cat "$dest/VERSION") extracted into $dest" >&2
