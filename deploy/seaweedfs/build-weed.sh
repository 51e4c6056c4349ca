#!/usr/bin/env bash
# Builds SeaweedFS's weed binary, the real S3 server the media e2e tests
# run (`weed server -s3`: SigV4, presigned expiry, POST policies), from
# its Go module into .run/tools/weed-<version>/weed, once: a binary
# already there is reused, and a copy keyed by version is kept under
# ${XDG_CACHE_HOME:-$HOME/.cache}/spark-tools/ so a clean clone on the
# same machine skips the build (about 10 minutes of both cores).
# Prints the binary's path.
#   deploy/seaweedfs/build-weed.sh            (make weed)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version="v0.0.0-20261109003541-7506e5f91cd6"
dir="$root/.run/tools/weed-$version"
bin="$dir/weed"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/spark-tools/weed-$version"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  if [ -x "$cache/weed" ]; then
    cp "$cache/weed" "$bin.tmp" && mv "$bin.tmp" "$bin"
  else
    echo "build-weed: building weed $version into $dir (once)" >&2
    tmp="$(mktemp -d "$dir/.build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # A small wrapper module outside the workspace: go install pkg@version
    # refuses a module whose go.mod has replace lines, so the wrapper
    # requires seaweedfs and repeats its non-local replace.
    cp "$root/deploy/seaweedfs/wrapper.go.mod" "$tmp/go.mod"
    (cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
      go build -trimpath -o "$tmp/weed" github.com/seaweedfs/seaweedfs/weed)
    mv "$tmp/weed" "$bin"
    if mkdir -p "$cache" 2>/dev/null; then
      cp "$bin" "$cache/weed.tmp" && mv "$cache/weed.tmp" "$cache/weed" || true
    fi
  fi
fi
"$bin" version >/dev/null 2>&1
echo "$bin"
