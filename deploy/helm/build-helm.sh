#!/usr/bin/env bash
# Builds the helm CLI the chart's tests run (tests/deploy/helm_test.go:
# helm lint --strict, helm template) from its Go module, into
# .run/tools/helm-<version>/helm, once: a binary already there is reused,
# so only a clean clone pays for the build (about 7 minutes on 2 cores,
# docs/decisions.md 89). Prints the binary's path.
#   deploy/helm/build-helm.sh            (make helm)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version="v4.3.2"
dir="$root/.run/tools/helm-$version"
bin="$dir/helm"
if [ ! -x "$bin" ]; then
  echo "build-helm: building helm $version into $dir (once)" >&2
  mkdir -p "$dir"
  # Outside the workspace: helm's own go.mod decides its dependencies,
  # and none of them leak into ours.
  tmp="$(mktemp -d "$dir/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && GOWORK=off GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath "helm.sh/helm/v4/cmd/helm@$version")
  mv "$tmp/helm" "$bin"
fi
"$bin" version --short >/dev/null
echo "$bin"
