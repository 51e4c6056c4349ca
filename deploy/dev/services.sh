#!/usr/bin/env bash
# Makes sure a MySQL-compatible server and a Redis server are reachable and
# writes their addresses to .run/services.env for the other scripts.
#
# It uses, in order: the addresses in the environment (IM_LOGIC_MYSQL_DSN or
# SPARK_MYSQL_ADDR, IM_LOGIC_REDIS_ADDR or SPARK_REDIS_ADDR), the usual local
# ones (127.0.0.1:3306 root without password, 127.0.0.1:6379), and otherwise
# starts private instances under .run/ from the system's mariadbd and
# redis-server, installing them with apt-get when they are missing and the
# user is root.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
run="$root/.run"
mkdir -p "$run"
started=""

log() { echo "services: $*" >&2; }

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    log "$1 is missing and I am not root: install it (apt-get install $2) and retry"
    exit 1
  fi
  log "installing $2 with apt-get"
  if [ ! -f "$run/.apt-updated" ]; then apt-get update -qq >/dev/null && touch "$run/.apt-updated"; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $2 >/dev/null
}

mysql_ping() { # host port
  if command -v mariadb-admin >/dev/null 2>&1; then
    mariadb-admin --connect-timeout=2 -h "$1" -P "$2" -uroot ping >/dev/null 2>&1
  elif command -v mysqladmin >/dev/null 2>&1; then
    mysqladmin --connect-timeout=2 -h "$1" -P "$2" -uroot ping >/dev/null 2>&1
  else
    port_open "$1" "$2"
  fi
}

# --- MySQL -------------------------------------------------------------
mysql_dsn="${IM_LOGIC_MYSQL_DSN:-}"
if [ -z "$mysql_dsn" ]; then
  addr="${SPARK_MYSQL_ADDR:-127.0.0.1:3306}"
  host="${addr%:*}"; port="${addr##*:}"
  if ! mysql_ping "$host" "$port"; then
    host=127.0.0.1; port="${SPARK_PRIVATE_MYSQL_PORT:-13306}"
    if ! mysql_ping "$host" "$port"; then
      command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || apt_install mariadbd "mariadb-server mariadb-client"
      mariadbd_bin="$(command -v mariadbd || echo /usr/sbin/mariadbd)"
      datadir="$run/mysql"
      if [ ! -d "$datadir/mysql" ]; then
        log "initialising a private MariaDB in $datadir"
        mkdir -p "$datadir"
        mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$datadir" \
          --auth-root-authentication-method=normal --skip-test-db >"$run/mysql-install.log" 2>&1
      fi
      log "starting a private MariaDB on $host:$port"
      nohup "$mariadbd_bin" --no-defaults --user="$(id -un)" --datadir="$datadir" \
        --socket="$run/mysql.sock" --pid-file="$run/mysql.pid" --port="$port" \
        --bind-address=127.0.0.1 --skip-name-resolve --innodb-flush-log-at-trx-commit=2 \
        --max-connections=1000 --log-error="$run/mysql.err" >/dev/null 2>&1 &
      for _ in $(seq 1 60); do mysql_ping "$host" "$port" && break; sleep 0.5; done
      mysql_ping "$host" "$port" || { log "private MariaDB did not start; see $run/mysql.err"; exit 1; }
      started="$started $(cat "$run/mysql.pid")"
      # Root over TCP must work without a password, like the system default.
      mariadb --no-defaults -S "$run/mysql.sock" -uroot -e \
        "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" 2>/dev/null || true
    fi
  fi
  mysql_dsn="root@tcp($host:$port)/spark_im?parseTime=true&loc=UTC"
  mysql_server="root@tcp($host:$port)/?parseTime=true&loc=UTC"
else
  mysql_server="$(echo "$mysql_dsn" | sed -E 's#\)/[^?]*#)/#')"
fi

# --- Redis -------------------------------------------------------------
redis_ping() { # host port
  if command -v redis-cli >/dev/null 2>&1; then
    [ "$(redis-cli -h "$1" -p "$2" ping 2>/dev/null)" = PONG ]
  else
    port_open "$1" "$2"
  fi
}
redis_addr="${IM_LOGIC_REDIS_ADDR:-${SPARK_REDIS_ADDR:-127.0.0.1:6379}}"
if ! redis_ping "${redis_addr%:*}" "${redis_addr##*:}"; then
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server "redis-server redis-tools"
  port="${SPARK_PRIVATE_REDIS_PORT:-16379}"
  redis_addr="127.0.0.1:$port"
  if ! redis_ping 127.0.0.1 "$port"; then
    log "starting a private Redis on $redis_addr"
    mkdir -p "$run/redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --dir "$run/redis" \
      --save "" --appendonly no --pidfile "$run/redis.pid" --logfile "$run/redis.log"
    for _ in $(seq 1 40); do redis_ping 127.0.0.1 "$port" && break; sleep 0.25; done
    redis_ping 127.0.0.1 "$port" || { log "private Redis did not start; see $run/redis.log"; exit 1; }
    started="$started $(cat "$run/redis.pid")"
  fi
fi
command -v redis-server >/dev/null 2>&1 || apt_install redis-server "redis-server redis-tools"

cat >"$run/services.env" <<ENV
export IM_LOGIC_MYSQL_DSN='$mysql_dsn'
export IM_LOGIC_REDIS_ADDR='$redis_addr'
export IM_DELIVER_REDIS_ADDR='$redis_addr'
export SPARK_TEST_MYSQL_DSN='$mysql_server'
# Processes this invocation started (make run stops them on exit).
export SPARK_STARTED_PIDS='${started# }'
ENV
log "MySQL $mysql_dsn, Redis $redis_addr"
