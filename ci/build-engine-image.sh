#!/usr/bin/env bash
# Builds the local CPU engine image `lucebox/engine-cpu:test` without pulling anything:
#   1. assembles a rootfs: llama-server (from ci/build-engine.sh), every library `ldd` lists
#      (plus the dynamic loader), and busybox-static for a shell when debugging;
#   2. `docker import`s it as `lucebox/engine-base:test`;
#   3. `docker build`s docker/engine-cpu/Dockerfile FROM that base (legacy builder).
# Needs a running dockerd (ci/docker.sh). Skips the work when the image already holds this binary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
base_tag=${LUCEBOX_ENGINE_BASE_IMAGE:-lucebox/engine-base:test}
image_tag=${LUCEBOX_ENGINE_IMAGE:-lucebox/engine-cpu:test}

server=$(bash "$here/build-engine.sh")
[ -x "$server" ] || { echo "build-engine-image: no llama-server at $server" >&2; exit 1; }
busybox=$(command -v busybox || true)
if [ -z "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  echo "build-engine-image: installing busybox-static" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >&2
  busybox=/bin/busybox
fi

server_sum=$(sha256sum "$server" | cut -d' ' -f1)
if [ "$(docker image inspect -f '{{ index .Config.Labels "lucebox.engine-sha256" }}' "$image_tag" 2>/dev/null || true)" = "$server_sum" ]; then
  echo "build-engine-image: $image_tag already holds llama-server $server_sum" >&2
  echo "$image_tag"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/local/lib/engine" "$rootfs/bin" "$rootfs/tmp" \
  "$rootfs/etc" "$rootfs/models"
chmod 1777 "$rootfs/tmp"
install -m 0755 "$server" "$rootfs/usr/local/bin/llama-server"
install -m 0755 "$busybox" "$rootfs/bin/busybox"
for applet in sh ls cat ps kill sleep wget; do ln -s busybox "$rootfs/bin/$applet"; done
# Libraries go to one directory (LD_LIBRARY_PATH in the Dockerfile); the loader keeps its
# absolute path because the binary names it.
ldd "$server" | awk '/=> \//{print $3} /^[ \t]*\/.*ld-linux/{print $1}' | sort -u | while read -r lib; do
  case "$lib" in
    */ld-linux*) mkdir -p "$rootfs$(dirname "$lib")"; cp -L "$lib" "$rootfs$lib" ;;
    *) cp -L "$lib" "$rootfs/usr/local/lib/engine/" ;;
  esac
done
echo "nobody:x:65534:65534:nobody:/:/bin/sh" >"$rootfs/etc/passwd"
echo "nogroup:x:65534:" >"$rootfs/etc/group"

tar -C "$rootfs" -c . | docker import - "$base_tag" >/dev/null
DOCKER_BUILDKIT=0 docker build -q --label "lucebox.engine-sha256=$server_sum" -t "$image_tag" \
  "$repo/docker/engine-cpu" >/dev/null
echo "build-engine-image: built $image_tag ($(docker image inspect -f '{{.Size}}' "$image_tag") bytes)" >&2
echo "$image_tag"
