#!/usr/bin/env bash
# Builds tidb-server (TiDB v8.5.4, the unistore store the TiDB tests run
# on: make test-tidb) from this directory's module into
# .run/tools/tidb-server-<version>/tidb-server, once: a binary already
# there is reused. A copy keyed by version is kept under
# ${XDG_CACHE_HOME:-$HOME/.cache}/spark-tools/ so a clean clone on the
# same machine skips the build (about 6 minutes of both cores, 230 MB).
# Prints the binary's path.
#   deploy/tidb/build-tidb.sh            (make tidb)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="v8.5.4-e4e814fdc0af"
dir="$root/.run/tools/tidb-server-$version"
bin="$dir/tidb-server"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/spark-tools/tidb-server-$version"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  if [ -x "$cache/tidb-server" ]; then
    cp "$cache/tidb-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
  else
    echo "build-tidb: building tidb-server $version into $dir (once)" >&2
    tmp="$(mktemp -d "$dir/.build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # GOWORK=off: TiDB's dependencies stay in this module, never in ours.
    (cd "$here" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$tmp/tidb-server" github.com/pingcap/tidb/cmd/tidb-server)
    mv "$tmp/tidb-server" "$bin"
    if mkdir -p "$cache" 2>/dev/null; then
      cp "$bin" "$cache/tidb-server.tmp" && mv "$cache/tidb-server.tmp" "$cache/tidb-server" || true
    fi
  fi
fi
"$bin" -V >/dev/null
echo "$bin"
