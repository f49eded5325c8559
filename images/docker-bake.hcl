# Node images for docker buildx bake. Run from the repository root:
#
#   offline (bases made by `testbed images base`):  docker buildx bake -f images/docker-bake.hcl node --load
#   online (GitHub Actions, a registry is there):   docker buildx bake -f images/docker-bake.hcl node-online
#   the kind node image (online only):              docker buildx bake -f images/docker-bake.hcl kind-node --load
#
# `testbed images build` is the same build with content-addressed tags; use it offline.

variable "TAG" {
  default = "fakehw/node:dev"
}

variable "BASE_AMD64" {
  default = "fakehw/base:amd64"
}

variable "BASE_RISCV64" {
  default = "fakehw/base:riscv64"
}

variable "BASE_ARM64" {
  default = "fakehw/base:arm64"
}

# The base of the build stages (fake NVML cross compilers, the wheel): the build machine's own architecture.
variable "BUILD_BASE" {
  default = "fakehw/base:amd64"
}

variable "ONLINE_BASE" {
  default = "debian:trixie-slim"
}

variable "KIND_NODE_IMAGE" {
  default = "kindest/node:v1.37.0"
}

variable "KIND_TAG" {
  default = "fakehw/kind-node:dev"
}

group "default" {
  targets = ["node"]
}

# The node image from the offline debootstrap bases (fakehw/base:<arch>, made by `testbed images base`).
target "node" {
  context    = "."
  dockerfile = "images/node/Dockerfile"
  platforms  = ["linux/amd64", "linux/riscv64"]
  tags       = ["${TAG}"]
  args = {
    BASE_AMD64   = "${BASE_AMD64}"
    BASE_RISCV64 = "${BASE_RISCV64}"
    BASE_ARM64   = "${BASE_ARM64}"
    BUILD_BASE   = "${BUILD_BASE}"
  }
}

# The same image from debian:trixie-slim (multi-arch, riscv64 included); the Dockerfile installs the packages.
target "node-online" {
  inherits = ["node"]
  args = {
    BASE_AMD64   = "${ONLINE_BASE}"
    BASE_RISCV64 = "${ONLINE_BASE}"
    BASE_ARM64   = "${ONLINE_BASE}"
    BUILD_BASE   = "${ONLINE_BASE}"
  }
}

# A kind node with the fake NVML and the fakehw agent (kindest/node exists for amd64 and arm64 only).
target "kind-node" {
  context    = "."
  dockerfile = "images/kind-node/Dockerfile"
  platforms  = ["linux/amd64"]
  tags       = ["${KIND_TAG}"]
  args = {
    KIND_NODE_IMAGE = "${KIND_NODE_IMAGE}"
  }
}
