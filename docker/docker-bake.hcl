# Release build of the fat image: `docker buildx bake -f docker/docker-bake.hcl --push` from the
# repository root, with the pins of ci/pins.env and the commit exported, e.g.
#   set -a; . ci/pins.env; set +a
#   REVISION=$(git rev-parse HEAD) CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) \
#   SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) VERSION=0.1.0 docker buildx bake -f docker/docker-bake.hcl
# The CUDA layer alone takes ~25 min (six SASS targets); give the builder a persistent cache.

variable "REGISTRY" { default = "ghcr.io/luce-org" }
variable "VERSION" { default = "0.0.0-dev" }
variable "REVISION" { default = "unknown" }
variable "CREATED" { default = "1970-01-01T00:00:00Z" }
variable "SOURCE_DATE_EPOCH" { default = "0" }
variable "LLAMA_CPP_PYTHON_VERSION" { default = "" }
variable "LLAMA_CPP_PYTHON_SHA256" { default = "" }
variable "LLAMA_CPP_COMMIT" { default = "" }
variable "CUDA_VERSION" { default = "12.8.1" }
variable "CUDA_ARCHS" { default = "75;80;86;89;90;120" }
variable "ROCM_VERSION" { default = "6.4.1" }
variable "ROCM_TARGETS" { default = "gfx1151;gfx1201" }

group "default" {
  targets = ["lucebox"]
}

target "lucebox" {
  context    = "."
  dockerfile = "docker/Dockerfile"
  platforms  = ["linux/amd64"]
  tags = [
    "${REGISTRY}/lucebox:${VERSION}",
    "${REGISTRY}/lucebox:latest",
  ]
  args = {
    VERSION                  = VERSION
    REVISION                 = REVISION
    CREATED                  = CREATED
    SOURCE_DATE_EPOCH        = SOURCE_DATE_EPOCH
    LLAMA_CPP_PYTHON_VERSION = LLAMA_CPP_PYTHON_VERSION
    LLAMA_CPP_PYTHON_SHA256  = LLAMA_CPP_PYTHON_SHA256
    LLAMA_CPP_COMMIT         = LLAMA_CPP_COMMIT
    CUDA_VERSION             = CUDA_VERSION
    CUDA_ARCHS               = CUDA_ARCHS
    ROCM_VERSION             = ROCM_VERSION
    ROCM_TARGETS             = ROCM_TARGETS
  }
  # Manifest-level annotations carry the same provenance as the image labels.
  annotations = [
    "index,manifest:org.opencontainers.image.source=https://github.com/Luce-Org/lucebox",
    "index,manifest:org.opencontainers.image.version=${VERSION}",
    "index,manifest:org.opencontainers.image.revision=${REVISION}",
    "index,manifest:org.opencontainers.image.created=${CREATED}",
  ]
  attest = [
    "type=provenance,mode=max",
    "type=sbom",
  ]
  cache-from = ["type=registry,ref=${REGISTRY}/lucebox:buildcache"]
  cache-to   = ["type=registry,ref=${REGISTRY}/lucebox:buildcache,mode=max"]
}
