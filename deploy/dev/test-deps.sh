#!/usr/bin/env bash
# Makes sure what the end-to-end tests drive besides the Go binaries is
# here: Nginx with its stream module (the SNI front test), Chromium (the
# browser SDK test), the SDK's npm packages, the MariaDB and Redis
# servers the tests run privately, and systemd-analyze and podman for the
# deployment checks. Missing system packages are
# installed with apt-get when the user is root; otherwise it says what to
# install and fails, so a test never skips for want of a dependency.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
run="$root/.run"
mkdir -p "$run"

log() { echo "test-deps: $*" >&2; }

missing=""
command -v nginx >/dev/null 2>&1 || missing="$missing nginx"
[ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || nginx -V 2>&1 | grep -q -- '--with-stream\b' || missing="$missing libnginx-mod-stream"
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || missing="$missing chromium"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
# The outage tests and the chaos runner stop and start a private mariadbd
# and redis-servers (a 3-master cluster too), whatever MySQL and Redis
# `make services` found.
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || missing="$missing mariadb-server"
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
# tests/deploy (make deploy-check): systemd-analyze verifies the units,
# podman builds the images (it cannot run them here, and need not).
command -v systemd-analyze >/dev/null 2>&1 || missing="$missing systemd"
command -v podman >/dev/null 2>&1 || missing="$missing podman"

if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing:$missing; install them (apt-get install$missing) and retry"
    exit 1
  fi
  log "installing$missing with apt-get"
  if [ ! -f "$run/.apt-updated" ]; then apt-get update -qq >/dev/null && touch "$run/.apt-updated"; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

# The browser SDK's packages (TypeScript, playwright-core), from its lock
# file; reinstalled only when the lock file changed.
sdk="$root/sdk/ts"
if [ -f "$sdk/package-lock.json" ]; then
  stamp="$sdk/node_modules/.lock-stamp"
  if [ ! -f "$stamp" ] || ! cmp -s "$sdk/package-lock.json" "$stamp"; then
    log "npm ci in sdk/ts"
    (cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    cp "$sdk/package-lock.json" "$stamp"
  fi
  if grep -q '"build"' "$sdk/package.json"; then
    (cd "$sdk" && npm run --silent build)
  fi
fi
