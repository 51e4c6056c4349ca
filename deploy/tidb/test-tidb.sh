#!/usr/bin/env bash
# make test-tidb: the store and logic suites and the e2e suite (or the
# part named by TIDB_E2E_RUN) against one tidb-server on unistore, then
# the chaos run on a private tidb-server (TIDB_CHAOS=0 skips it), with
# the time of each piece. tidb-server is built once (build-tidb.sh).
#   TIDB_E2E_RUN='TestX|TestY' deploy/tidb/test-tidb.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
t0=$SECONDS
bin="$(deploy/tidb/build-tidb.sh)"
echo "test-tidb: tidb-server ready to use after $((SECONDS - t0))s: $bin"
source .run/services.env

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    port_open "$p" || { echo "$p"; return; }
  done
  return 1
}
port="$(free_port)"; status_port="$(free_port)"
data="$(mktemp -d "${TMPDIR:-/tmp}/spark-tidb.XXXXXX")"
"$bin" -store unistore -path "$data/store" -host 127.0.0.1 -P "$port" \
  -status "$status_port" -status-host 127.0.0.1 -socket "$data/tidb.sock" \
  -log-file "$data/tidb.log" -log-slow-query "$data/tidb-slow.log" >"$data/stdout.log" 2>&1 &
tidb_pid=$!
trap 'kill "$tidb_pid" 2>/dev/null; wait "$tidb_pid" 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 120); do port_open "$port" && break; sleep 0.5; done
port_open "$port" || { echo "test-tidb: tidb-server did not start"; tail -30 "$data/tidb.log"; exit 1; }
echo "test-tidb: tidb-server on 127.0.0.1:$port"

export SPARK_TEST_MYSQL_DSN="root@tcp(127.0.0.1:$port)/?parseTime=true&loc=UTC"
export SPARK_TEST_TIDB_SERVER="$bin"
export SPARK_BIN_DIR="$root/bin/failpoints"
rc=0
step() { # name command...
  local name="$1" s=$SECONDS; shift
  if "$@"; then echo "test-tidb: $name PASS in $((SECONDS - s))s"
  else echo "test-tidb: $name FAIL in $((SECONDS - s))s"; rc=1; fi
}
step "store+logic suites" go test -count=1 ./logic/...
step "e2e suite" go test -count=1 -timeout 20m -parallel "${E2E_PARALLEL:-4}" -run "${TIDB_E2E_RUN:-.}" ./tests/e2e/
if [ "${TIDB_CHAOS:-1}" != 0 ]; then
  go vet -tags chaos ./tests/chaos
  step "chaos on TiDB" go test -count=1 -tags chaos -timeout 25m -run TestChaos ./tests/chaos
  for f in "${SPARK_ARTIFACTS_DIR:-.run/artifacts}"/chaos/*/verdict.txt; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
fi
echo "test-tidb: total $((SECONDS - t0))s"
exit $rc
