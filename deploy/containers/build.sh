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
  podman build --quiet --pull=never -f "$root/deploy/containers/Containerfile.$p" \
    --build-arg VERSION="$tag" --build-arg REVISION="$revision" \
    -t "localhost/spark-$p:$tag" "$ctx" >/dev/null
  echo "localhost/spark-$p:$tag"
done
