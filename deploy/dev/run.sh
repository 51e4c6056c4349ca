#!/usr/bin/env bash
# `make run`: a whole local cluster — MySQL and Redis (found or started),
# migrations, logic, deliver and two gates — in the foreground. Ctrl-C stops
# everything this script started.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cfg="${SPARK_CONFIG:-deploy/dev/im.yaml}"
logs=".run/logs"
mkdir -p "$logs"

deploy/dev/services.sh
# shellcheck disable=SC1091
source .run/services.env

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo
  echo "stopping…"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in $SPARK_STARTED_PIDS; do kill -TERM "$p" 2>/dev/null || true; done
  echo "stopped"
  exit 0
}
trap cleanup INT TERM EXIT

bin/migrate -config "$cfg"

start() { # name, then env assignments, then the command
  local name="$1"; shift
  env "$@" >"$logs/$name.log" 2>&1 &
  pids+=("$!")
}
wait_ready() { # name
  for _ in $(seq 1 150); do
    if grep -q '"msg":"ready to serve"' "$logs/$1.log" 2>/dev/null; then return 0; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null && ! grep -q . "$logs/$1.log"; then break; fi
    sleep 0.2
  done
  echo "$1 did not become ready; its log ($logs/$1.log) ends with:" >&2
  tail -n 20 "$logs/$1.log" >&2
  exit 1
}

start logic   IM_LOGIC_MACHINE_ID=1 bin/logic -config "$cfg";  wait_ready logic
start deliver IM_DELIVER_ID=deliver-1 bin/deliver -config "$cfg"; wait_ready deliver
start gate-1  IM_GATE_ID=gate-1 bin/gate -config "$cfg";  wait_ready gate-1
start gate-2  IM_GATE_ID=gate-2 IM_GATE_TCP_ADDR=127.0.0.1:8101 IM_GATE_PUSH_ADDR=127.0.0.1:8111 \
  IM_GATE_ADMIN_ADDR=127.0.0.1:8121 IM_GATE_WS_ADDR=127.0.0.1:8181 bin/gate -config "$cfg"; wait_ready gate-2

cat <<TXT

Spark IM is running (config $cfg, logs in $logs/).

  gate-1    client TCP 127.0.0.1:8100   push gRPC 127.0.0.1:8110   admin http://127.0.0.1:8120
            WebSocket ws://127.0.0.1:8180/ws
  gate-2    client TCP 127.0.0.1:8101   push gRPC 127.0.0.1:8111   admin http://127.0.0.1:8121
            WebSocket ws://127.0.0.1:8181/ws
  logic     gRPC 127.0.0.1:9000 (Gateway, Api, health, reflection)  HTTP/JSON Api http://127.0.0.1:9010 (/openapi.json)  admin http://127.0.0.1:9020
  deliver   admin http://127.0.0.1:9040
  MySQL     $IM_LOGIC_MYSQL_DSN
  Redis     $IM_LOGIC_REDIS_ADDR

Development credentials (deploy/dev/im.yaml — never use them elsewhere):
  JWT secret  dev-jwt-secret-change-me     API key  dev-api-key
  cluster secret  dev-cluster-secret

Chat from two terminals, each user on its own gate (and the other if it stops):
  bin/imcli -config $cfg -user 1001 -gate 127.0.0.1:8100,127.0.0.1:8101
  bin/imcli -config $cfg -user 1002 -gate 127.0.0.1:8101,127.0.0.1:8100
then type "<to_user_id> <text>", e.g. "1002 hello".

Press Ctrl-C to stop.
TXT
wait -n "${pids[@]}" || true
echo "a process exited; see $logs/" >&2
