#!/usr/bin/env bash
# Builds the images localhost/spark-<proc>:<tag> (gate, logic, deliver,
# migrate) with podman from deploy/containers/Containerfile.<proc>. The
# binaries are built here on the host, static (CGO_ENABLED=0), into a
# fresh build context with the container config: nothing is pulled, so
# it works without an image registry.
#   deploy/containers/build.sh [tag]      (make images; tag: dev)
# SPARK_IMAGE_CONTEXT names the context directory (default
# .run/images/context); SPARK_IMAGES the processes (default all four).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tag="${1:-dev}"
ctx="${SPARK_IMAGE_CONTEXT:-$root/.run/images/context}"
procs="${SPARK_IMAGES:-gate logic deliver migrate}"
command -v podman >/dev/null 2>&1 || { echo "build.sh: podman missing (make test-deps)" >&2; exit 1; }

rm -rf "$ctx" && mkdir -p "$ctx"
pkgs=()
for p in $procs; do
  case "$p" in
    gate) pkgs+=(./gate/cmd/gate) ;;
    logic) pkgs+=(./logic/cmd/logic) ;;
    migrate) pkgs+=(./logic/cmd/migrate) ;;
    deliver) pkgs+=(./deliver/cmd/deliver) ;;
    *) echo "build.sh: unknown process $p" >&2; exit 1 ;;
  esac
done
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/" "${pkgs[@]}")
cp "$root/deploy/containers/im.yaml" "$ctx/im.yaml"
revision="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
for p in $procs; do
  image="localhost/spark-$p:$tag"
  old="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
  # --layers=false: no cache and no intermediate images. buildah keys its
  # cache on the instruction text, not the build args, so a cached LABEL
  # would keep an older revision; and the build takes a second anyway.
  podman build --quiet --layers=false --pull=never -f "$root/deploy/containers/Containerfile.$p" \
    --build-arg VERSION="$tag" --build-arg REVISION="$revision" \
    -t "$image" "$ctx" >/dev/null
  # The image this tag named before is left untagged by a rebuild: remove
  # it, so repeated builds (every make deploy-check) do not pile up.
  new="$(podman image inspect --format '{{.Id}}' "$image")"
  if [ -n "$old" ] && [ "$old" != "$new" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi
  echo "$image"
done
