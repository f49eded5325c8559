#!/usr/bin/env bash
# Fetch the real NVIDIA user space of the three driver branches Debian ships and extract each into its own cache
# (default .cache/nvidia-<branch> in this checkout, or $FAKEHW_REAL_NVIDIA_CACHE/nvidia-<branch>) with
# dpkg-deb -x: nvidia-smi and libnvidia-ml1 (the real library, whose exports and export table the tests compare
# with the fake), plus libnvidia-ml-dev (nvml.h) for 535. Nothing is installed system-wide.
#
#   535.261.03  bookworm non-free        550.163.01  trixie non-free (sid too)        555.58.02  experimental
#
# The Debian mirror can serve a bad index (HOST.md): each branch is tried through apt with a private sources list
# (suite after suite), then straight from the archive's pool by file name, every .deb checked against the SHA-256
# pinned below. A branch that cannot be had gets a FAILED file in its cache saying why, which the tests that need
# it report when they skip. Idempotent (quick when every cache is complete); needs root for apt, else says so.
#
# Usage: tools/fetch-real-nvidia.sh [535|550|555 ...]     (default: all three)
# Environment: FAKEHW_REAL_NVIDIA_CACHE (where the caches go), FAKEHW_DEBIAN_MIRRORS (mirrors to try).
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${FAKEHW_REAL_NVIDIA_CACHE:-$root/.cache}"
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
mirror="${mirror:-http://deb.debian.org/debian}"
mirrors=("$mirror")
[ "$mirror" = "http://deb.debian.org/debian" ] || mirrors+=("http://deb.debian.org/debian")
# FAKEHW_DEBIAN_MIRRORS="URL ...": the mirrors to try, in order, instead (tests use it to play a bad mirror).
[ -z "${FAKEHW_DEBIAN_MIRRORS:-}" ] || read -r -a mirrors <<<"$FAKEHW_DEBIAN_MIRRORS"

# branch -> suites to try, pinned package files (pool path relative to the mirror) and their SHA-256.
declare -A SUITES=([535]="bookworm bookworm-updates" [550]="trixie sid" [555]="experimental")
declare -A DEBS=(
  [535]="nvidia-graphics-drivers/nvidia-smi_535.261.03-1_amd64.deb:9b4392fa97957603d96f3cf1141fe78d871f5bcdd2e6bf810bce278cc14cb6d4
nvidia-graphics-drivers/libnvidia-ml1_535.261.03-1_amd64.deb:c729da6ab729309dc3f481fe4d38f04ea03b0793154b0962b60117d2f37d082e
nvidia-cuda-toolkit/libnvidia-ml-dev_11.8.86~11.8.0-5~deb12u1_amd64.deb:de7f0cd8093d3f91cec69ca6ef15ccf577f2ba6538f623f7300f3d5bb0b3a34f"
  [550]="nvidia-graphics-drivers/nvidia-smi_550.163.01-2_amd64.deb:547978bd189284911beace21d83834866026e4d5b2026d8bcb74f6cd147c8be9
nvidia-graphics-drivers/libnvidia-ml1_550.163.01-2_amd64.deb:01c1b67d511d7f52c6aa60e14ed56a8eb725d5dc85784a08214d6cb0f4fd1f89"
  [555]="nvidia-graphics-drivers/nvidia-smi_555.58.02-4_amd64.deb:f7bc9064215ccec053701d95c527a69fac760574358067e088689e1366113ba4
nvidia-graphics-drivers/libnvidia-ml1_555.58.02-4_amd64.deb:b731d4ae7f68bd940e6f4c7f072a17b58f38685f875087e61f29c1f23dc7972b"
)

say() { echo "fetch-real-nvidia: $*" >&2; }

complete() {  # a cache that has everything its tests use
  local dest="$1" branch="$2"
  [ -f "$dest/VERSION" ] && [ -x "$dest/usr/lib/nvidia/current/nvidia-smi" ] &&
    compgen -G "$dest/usr/lib/*/nvidia/current/libnvidia-ml.so.$branch.*" >/dev/null &&
    { [ "$branch" != 535 ] || [ -f "$dest/usr/include/nvml.h" ]; }
}

verify() {  # every pinned .deb is in $1 with its SHA-256
  local dir="$1" branch="$2" entry file sum
  while IFS= read -r entry; do
    file="$(basename "${entry%%:*}")"; sum="${entry##*:}"
    [ -f "$dir/$file" ] && echo "$sum  $dir/$file" | sha256sum -c --quiet - >/dev/null 2>&1 || return 1
  done <<<"${DEBS[$branch]}"
}

via_apt() {  # download the pinned .debs into $1 through apt from one suite
  local dir="$1" branch="$2" suite="$3" m="$4" work="$1/apt-$3"
  mkdir -p "$work/lists/partial" "$work/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $m $suite non-free" >"$work/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives" -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq >"$work/log" 2>&1 || return 1
  local entry file pkgs=()
  while IFS= read -r entry; do
    file="$(basename "${entry%%:*}")"
    pkgs+=("$(cut -d_ -f1 <<<"$file")=$(cut -d_ -f2 <<<"$file")")
  done <<<"${DEBS[$branch]}"
  (cd "$dir" && apt-get "${opts[@]}" download -qq "${pkgs[@]}" >>"$work/log" 2>&1) || return 1
  verify "$dir" "$branch"
}

via_pool() {  # fetch the pinned files straight from the pool of mirror $3
  local dir="$1" branch="$2" m="$3" entry path
  command -v curl >/dev/null || command -v wget >/dev/null || return 1
  while IFS= read -r entry; do
    path="pool/non-free/n/${entry%%:*}"
    if command -v curl >/dev/null; then
      curl -fsL --retry 2 -o "$dir/$(basename "$path")" "$m/$path" || return 1
    else
      wget -q -O "$dir/$(basename "$path")" "$m/$path" || return 1
    fi
  done <<<"${DEBS[$branch]}"
  verify "$dir" "$branch"
}

fetch_branch() {
  local branch="$1" dest="$cache/nvidia-$1"
  complete "$dest" "$branch" && return 0
  local dl="$cache/nvidia-$branch.dl" tried=() ok="" m suite
  rm -rf "$dl"
  mkdir -p "$dl"
  for m in "${mirrors[@]}"; do
    for suite in ${SUITES[$branch]}; do
      if via_apt "$dl" "$branch" "$suite" "$m"; then ok="apt $suite from $m"; break 2; fi
      tried+=("apt $suite from $m")
    done
    if via_pool "$dl" "$branch" "$m"; then ok="pool of $m"; break; fi
    tried+=("pool of $m")
  done
  mkdir -p "$dest"
  if [ -z "$ok" ]; then
    printf 'the Debian archive did not serve the pinned %s packages (tried: %s)\n' "$branch" \
      "$(IFS=';'; echo "${tried[*]}")" >"$dest/FAILED"
    rm -rf "$dl"
    say "branch $branch: $(cat "$dest/FAILED"); the tests that need it skip"
    return 1
  fi
  rm -rf "$dest.new" && mkdir -p "$dest.new"
  local deb
  for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$dest.new" || return 1; done
  dpkg-deb -f "$dl"/nvidia-smi_*.deb Version >"$dest.new/VERSION"
  rm -rf "$dest" "$dl"
  mv "$dest.new" "$dest"
  say "nvidia-smi $(cat "$dest/VERSION") extracted into $dest ($ok)"
}

branches=("$@")
[ ${#branches[@]} -gt 0 ] || branches=(535 550 555)
for b in "${branches[@]}"; do
  [ -n "${DEBS[$b]:-}" ] || { say "unknown branch $b (known: 535 550 555)"; exit 2; }
done
all_complete=1
for b in "${branches[@]}"; do complete "$cache/nvidia-$b" "$b" || all_complete=""; done
[ -n "$all_complete" ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  say "needs root, apt-get and dpkg-deb; the tests that need the real nvidia-smi will skip"
  exit 0
fi
for b in "${branches[@]}"; do fetch_branch "$b"; done
exit 0
