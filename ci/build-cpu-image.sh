#!/usr/bin/env bash
# Builds the CPU image the tests run, offline: no registry, no BuildKit.
#   1. the CPU engine (`ci/build-engine.sh`) and the supervisor (`cargo build --release -p lucebox`);
#   2. a base rootfs assembled here: busybox-static, the glibc libraries both binaries link (from
#      ldd), /etc/passwd, `docker import`ed as lucebox/base-cpu:local;
#   3. docker/cpu/Dockerfile on top, with the fat image's layout, tagged lucebox/lucebox-cpu:test.
# Prints the image tag. Needs a running dockerd (ci/docker.sh starts one).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
source "$here/pins.env"

image=${LUCEBOX_CPU_IMAGE:-lucebox/lucebox-cpu:test}
base=lucebox/base-cpu:local
target_dir=${CARGO_TARGET_DIR:-$repo/target}

command -v docker >/dev/null || { echo "build-cpu-image: docker missing (ci/install-deps.sh installs docker.io)" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "build-cpu-image: no dockerd answering (run ci/docker.sh)" >&2; exit 1; }
busybox=$(command -v busybox || true)
if [ -z "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  echo "build-cpu-image: installing busybox-static" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >&2
  busybox=/bin/busybox
fi

engine=$(bash "$here/build-engine.sh")
echo "build-cpu-image: building lucebox (release)" >&2
(cd "$repo" && cargo build --release -p lucebox >&2)
supervisor="$target_dir/release/lucebox"
[ -x "$supervisor" ] || { echo "build-cpu-image: $supervisor not built" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- base rootfs -------------------------------------------------------------------------------
root="$work/rootfs"
mkdir -p "$root"/{bin,etc,tmp,root,proc,sys,dev,run,usr/lib/x86_64-linux-gnu,usr/lib64,usr/local/bin,var/lib/lucebox}
chmod 1777 "$root/tmp"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
# Every shared library either binary needs, at the path the loader looks for it.
for lib in $( { ldd "$engine"; ldd "$supervisor"; } | awk '/=> \//{print $3} /^[ \t]*\/.*ld-linux/{print $1}' | sort -u); do
  dest="$root/usr${lib#/usr}"
  mkdir -p "$(dirname "$dest")"
  cp -L "$lib" "$dest"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
# Reproducible layer: fixed owner and mtime for every entry.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='@0' -C "$root" -cf "$work/rootfs.tar" .
docker import --message "lucebox base rootfs (busybox + glibc)" "$work/rootfs.tar" "$base" >/dev/null

# --- build context -----------------------------------------------------------------------------
ctx="$work/context"
mkdir -p "$ctx/bin" "$ctx/profiles"
cp "$repo/docker/cpu/Dockerfile" "$ctx/Dockerfile"
cp "$supervisor" "$ctx/bin/lucebox"
cp "$engine" "$ctx/bin/llama-server"
strip "$ctx/bin/lucebox" "$ctx/bin/llama-server" 2>/dev/null || true
if [ -d "$repo/profiles" ]; then
  cp -r "$repo/profiles/." "$ctx/profiles/"
else
  echo "build-cpu-image: warning: no profiles/ in the repository; the image carries none" >&2
fi
if [ -f "$repo/engine/variants.toml" ]; then
  cp "$repo/engine/variants.toml" "$ctx/variants.toml"
else
  echo "build-cpu-image: warning: no engine/variants.toml; the image carries an empty manifest" >&2
  : > "$ctx/variants.toml"
fi

revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
created=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%dT%H:%M:%SZ)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/supervisor/Cargo.toml" | head -1)
# The same facts as the labels, for `lucebox version --json` inside the image.
cat > "$ctx/provenance.json" <<JSON
{"title":"lucebox-cpu","version":"$version","revision":"$revision","created":"$created",
 "variants":["cpu"],"engine_commits":{"llama.cpp":"$LLAMA_CPP_COMMIT"}}
JSON

DOCKER_BUILDKIT=0 docker build --quiet -t "$image" \
  --build-arg "REVISION=$revision" --build-arg "CREATED=$created" --build-arg "VERSION=$version" \
  --build-arg "LLAMA_CPP_COMMIT=$LLAMA_CPP_COMMIT" "$ctx" >&2
echo "$image"
