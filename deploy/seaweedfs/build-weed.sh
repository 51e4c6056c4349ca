#!/usr/bin/env bash
# Builds SeaweedFS's weed binary, the real S3 server the media e2e tests
# run (`weed server -s3`: SigV4, presigned expiry, POST policies), from
# its Go module into .run/tools/weed-<version>/weed, once: a binary
# already there is reused, so only a clean clone pays for the build.
# Prints the binary's path.
#   deploy/seaweedfs/build-weed.sh            (make weed)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version="v0.0.0-20261109003541-7506e5f91cd6"
dir="$root/.run/tools/weed-$version"
bin="$dir/weed"
if [ ! -x "$bin" ]; then
  echo "build-weed: building weed $version into $dir (once)" >&2
  mkdir -p "$dir"
  tmp="$(mktemp -d "$dir/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # A small wrapper module outside the workspace: go install pkg@version
  # refuses a module whose go.mod has replace lines, so the wrapper
  # requires seaweedfs and repeats its non-local replace.
  cp "$root/deploy/seaweedfs/wrapper.go.mod" "$tmp/go.mod"
  (cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
    go build -trimpath -o "$tmp/weed" github.com/seaweedfs/seaweedfs/weed)
  mv "$tmp/weed" "$bin"
fi
"$bin" version >/dev/null
echo "$bin"
