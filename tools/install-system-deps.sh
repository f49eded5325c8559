#!/usr/bin/env bash
# Install the system packages the tests and benchmarks use. Idempotent and quick when all is present.
# As root it installs; otherwise it says what is missing (tests that need it skip with a reason).
#
#   tools/install-system-deps.sh          everything `make test` uses (Docker, Slurm, Chromium, ...)
#   tools/install-system-deps.sh --run    only what `make run` and the README's tour use: the compiler of the
#                                         fake NVML, nft/ip for the fabric target, the real nvidia-smi
set -euo pipefail

scope=all
case "${1:-}" in
  --run) scope=run ;;
  "") ;;
  *) echo "usage: $0 [--run]" >&2; exit 2 ;;
esac

# Debian packages (bookworm main) the suite uses. python3-venv: Debian's python3 has no ensurepip without it.
PACKAGES=(python3-venv gcc make)
# Emulated fabric (fakehw.fabric): ip/tc for links and qdiscs, nft for VLAN rules and impairments, nsenter.
PACKAGES+=(iproute2 nftables util-linux)
if [ "$scope" = all ]; then
  # Fake NVML: the riscv64 cross compiler (the shim must build for riscv64 node images).
  PACKAGES+=(gcc-riscv64-linux-gnu libc6-dev-riscv64-cross)
  # Fake platform: hwloc's lstopo reads the fake root (hwloc-nox has no X libraries; the full hwloc package is as
  # good), numactl and lspci read it when it is mounted.
  PACKAGES+=(numactl pciutils)
  # RDMA: rdma-core's ibverbs-utils (ibv_devices) and infiniband-diags (ibstat) read the NICs' verbs devices.
  # ibverbs-providers holds the drivers (mlx5 among them) libibverbs matches the devices against: libibverbs1 only
  # recommends it, and without it ibv_devices lists no device (--no-install-recommends below).
  PACKAGES+=(ibverbs-utils ibverbs-providers infiniband-diags)
  command -v lstopo-no-graphics >/dev/null || PACKAGES+=(hwloc-nox)
  # Certification report: the HTML report is rendered in headless Chromium and its screenshot read by tesseract.
  PACKAGES+=(chromium tesseract-ocr tesseract-ocr-eng fonts-dejavu-core)
  # Signed reports: openssl checks the DSSE signatures and key ids conformance writes (an oracle outside our code).
  PACKAGES+=(openssl)
  # Scheduler conformance (testbed/slurm): Slurm's daemons and clients and munge. testbed.slurm runs them with its
  # own configuration, key and socket; the packages' own services are never started (see policy-rc.d below).
  PACKAGES+=(slurmctld slurmd slurm-client munge)
  # CXL: Debian's cxl/daxctl (ndctl 76.1) read the fake tree through a node view; jq and uuidgen are what ndctl's
  # own CXL tests use; fuse3 gives fusermount3 for the live sysfs (fakehw/livefs).
  PACKAGES+=(ndctl daxctl jq uuid-runtime fuse3)
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
  :
elif [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-system-deps: not root (or no apt-get); please install: ${missing[*]}" >&2
else
  echo "install-system-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # Daemons from these packages (munge, slurmd, slurmctld) must not start at install: no service manager runs
  # here and slurmd has no configuration. Keep them from starting unless the machine already has a policy.
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
  fi
  rc=0
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
  [ "$rc" -eq 0 ] || exit "$rc"
fi

# Fake NVML: the real nvidia-smi 535, libnvidia-ml1 and nvml.h from bookworm non-free, extracted into a project
# cache (never installed system-wide) for the tests that compare the fake with them.
"$(dirname "$0")/fetch-real-nvidia.sh" ||
  echo "install-system-deps: the real NVIDIA packages were not fetched; the tests that need them skip" >&2

[ "$scope" = all ] || exit 0

# Fake NVML: the newest public nvml.h and nvidia-ml-py 13.x/12.535 from PyPI, into project caches (the tests judge
# the library's exports, struct layouts and Python sweeps by them).
"$(dirname "$0")/fetch-nvml-references.sh" ||
  echo "install-system-deps: the NVML references were not fetched; the tests that need them skip" >&2

# hwloc 2.12 (bookworm has 2.9) from bookworm-backports, extracted into a project cache: its lstopo labels NUMA
# nodes from HMAT figures (memory tiers), which the sysfs tests check the tree against.
"$(dirname "$0")/fetch-real-hwloc.sh" ||
  echo "install-system-deps: hwloc 2.12 was not fetched; the tests that need it skip" >&2

# CXL peer suite: ndctl v81 (what ../shared/peer-suites/ndctl-cxl was written for) built into a project cache.
"$(dirname "$0")/build-ndctl.sh" ||
  echo "install-system-deps: ndctl 81 was not built; the ndctl peer-suite tests skip" >&2

# Docker backend: Docker engine with the containerd image store, buildx, QEMU + binfmt_misc for riscv64 nodes and
# debootstrap for the offline base images (testbed/host.py). Quick when everything is there; the report is shown
# only when it did something or something is missing (as a user it names the commands to run as root).
testbed_bin="$(dirname "$0")/../.venv/bin/testbed"
if [ -x "$testbed_bin" ]; then
  if ! report="$("$testbed_bin" host setup 2>&1)" || grep -q "^  did " <<<"$report"; then
    echo "$report" >&2
  fi
fi
