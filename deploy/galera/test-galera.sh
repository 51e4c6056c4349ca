#!/usr/bin/env bash
# make test-galera: the store and logic suites and the e2e suite (or the
# part named by GALERA_E2E_RUN) against a three-node MariaDB Galera
# cluster on loopback (tests/cmd/imgalera; logic writes to node 1), then
# the chaos run that kills the writer node under load and fails over
# (GALERA_CHAOS=0 leaves it out), with the time of each piece.
#   GALERA_E2E_RUN='TestX|TestY' deploy/galera/test-galera.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
t0=$SECONDS
source .run/services.env
out="$(mktemp -d "${TMPDIR:-/tmp}/spark-galera.XXXXXX")"
go build -o "$out/imgalera" ./tests/cmd/imgalera
"$out/imgalera" -nodes 3 >"$out/dsn" 2>"$out/imgalera.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 1 240); do [ -s "$out/dsn" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
if [ ! -s "$out/dsn" ]; then echo "test-galera: the cluster did not start"; cat "$out/imgalera.log"; exit 1; fi
dsn="$(head -1 "$out/dsn")"
echo "test-galera: 3 nodes synced after $((SECONDS - t0))s; suites write to $dsn"

export SPARK_TEST_MYSQL_DSN="$dsn"
export SPARK_BIN_DIR="$root/bin/failpoints"
export SPARK_WEED_BIN="$(deploy/seaweedfs/build-weed.sh)"
rc=0
step() { # name command...
  local name="$1" s=$SECONDS; shift
  if "$@"; then echo "test-galera: $name PASS in $((SECONDS - s))s"
  else echo "test-galera: $name FAIL in $((SECONDS - s))s"; rc=1; fi
}
step "store+logic suites" go test -count=1 ./logic/...
step "e2e suite" go test -count=1 -timeout 20m -parallel "${E2E_PARALLEL:-4}" -run "${GALERA_E2E_RUN:-.}" ./tests/e2e/
if [ "${GALERA_CHAOS:-1}" != 0 ]; then
  step "chaos: writer kill and failover" go test -count=1 -tags chaos -timeout 15m -run TestChaosGaleraWriterKill ./tests/chaos
  for f in "${SPARK_ARTIFACTS_DIR:-.run/artifacts}"/chaos/TestChaosGaleraWriterKill*/verdict.txt; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
fi
echo "test-galera: total $((SECONDS - t0))s"
exit $rc
