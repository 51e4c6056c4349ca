#!/usr/bin/env bash
# make test-tidb: the store and logic suites and the e2e suite (or the
# part named by TIDB_E2E_RUN) against one tidb-server on unistore, then
# the chaos runs on a private tidb-server each (TIDB_CHAOS=0 skips them;
# TIDB_SUITES=0 skips the suites), then, with TIDB_BENCH=1, the bench's
# p2p scenario against the same tidb-server (figures only: unistore is a
# test store), with the time of each piece. tidb-server is built once
# (build-tidb.sh).
#   TIDB_E2E_RUN='TestX|TestY' deploy/tidb/test-tidb.sh
#   TIDB_SUITES=0 TIDB_CHAOS=0 TIDB_BENCH=1 deploy/tidb/test-tidb.sh
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
if [ "${TIDB_SUITES:-1}" != 0 ]; then
  step "store+logic suites" go test -count=1 ./logic/...
  step "e2e suite" go test -count=1 -timeout 20m -parallel "${E2E_PARALLEL:-4}" -run "${TIDB_E2E_RUN:-.}" ./tests/e2e/
fi
if [ "${TIDB_CHAOS:-1}" != 0 ]; then
  go vet -tags chaos ./tests/chaos
  # The kills and outages, the rolling restart and the checker's negative
  # control; the Galera run has its own engine (make test-galera).
  step "chaos on TiDB" go test -count=1 -tags chaos -timeout 25m \
    -run 'TestChaos(KillsAndOutages|RollingRestart|CheckerFails)' ./tests/chaos
  for f in "${SPARK_ARTIFACTS_DIR:-.run/artifacts}"/chaos/TestChaos{Kills,Rolling,Checker}*/verdict.txt; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
fi
if [ "${TIDB_BENCH:-0}" != 0 ]; then
  go build -o bin/imbench ./bench/cmd/imbench
  step "bench p2p on TiDB" bin/imbench -profile short -scenarios p2p -out bench/results/engines/tidb
fi
echo "test-tidb: total $((SECONDS - t0))s"
exit $rc
