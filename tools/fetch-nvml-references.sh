#!/usr/bin/env bash
# Fetch the PyPI references the fake-NVML tests judge the library by, into caches of this checkout (nothing is
# installed into the project's environment):
#
#   .cache/nvml-headers/13.4.92/nvml.h          the newest public NVML header (nvidia-nvml-dev 13.4.92, CUDA 13.4)
#   .cache/nvidia-ml-py/13.615.71/pynvml.py     the newest official Python bindings
#   .cache/nvidia-ml-py/12.535.161/pynvml.py    the 535-era bindings, which stay supported
#
# Uses the project's venv pip when there is one (else python3 -m pip). Idempotent: quick when the caches are
# there. A package PyPI cannot serve gets a FAILED file saying why, which the tests that need it report when they
# skip. Environment: FAKEHW_NVML_REFERENCE_CACHE (default .cache).
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${FAKEHW_NVML_REFERENCE_CACHE:-$root/.cache}"
python="$root/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"
say() { echo "fetch-nvml-references: $*" >&2; }

fetch_header() {
  local version="$1" dest="$cache/nvml-headers/$1"
  [ -f "$dest/nvml.h" ] && return 0
  local tmp
  tmp="$(mktemp -d)"
  mkdir -p "$dest"
  # The wheel holds only the header; any platform's copy is the same file.
  if "$python" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
       --python-version 3.11 -d "$tmp" "nvidia-nvml-dev==$version" >"$tmp/log" 2>&1 &&
     "$python" -c 'import sys, zipfile, glob
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith("/nvml.h"))
    open(sys.argv[2], "wb").write(z.read(name))' "$tmp" "$dest/nvml.h.new"; then
    mv "$dest/nvml.h.new" "$dest/nvml.h"
    rm -f "$dest/FAILED"
    say "nvidia-nvml-dev $version: nvml.h in $dest"
  else
    echo "pip could not fetch nvidia-nvml-dev==$version: $(tail -1 "$tmp/log")" >"$dest/FAILED"
    say "$(cat "$dest/FAILED")"
  fi
  rm -rf "$tmp"
}

fetch_bindings() {
  local version="$1" dest="$cache/nvidia-ml-py/$1"
  [ -f "$dest/pynvml.py" ] && return 0
  mkdir -p "$dest"
  if "$python" -m pip install -q --no-deps --target "$dest.new" "nvidia-ml-py==$version" >"$dest/log" 2>&1; then
    rm -rf "$dest" && mv "$dest.new" "$dest"
    say "nvidia-ml-py $version in $dest"
  else
    echo "pip could not install nvidia-ml-py==$version: $(tail -1 "$dest/log")" >"$dest/FAILED"
    rm -rf "$dest.new"
    say "$(cat "$dest/FAILED")"
  fi
}

fetch_header 13.4.92
fetch_bindings 13.615.71
fetch_bindings 12.535.161
exit 0
