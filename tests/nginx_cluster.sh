#!/usr/bin/env bash
# Several servers behind nginx, tested end to end: three `asyncflow serve` behind an nginx round-robin
# upstream, three HTTP-mode workers (`asyncflow worker --server <nginx>`) with no database
# access, 10,000 tasks pushed through three stages with the bulk create endpoint, one server
# SIGKILLed mid-run. Then it checks, in the database:
#   - every task succeeded, and exactly the tasks created exist (nothing lost, nothing doubled);
#   - each stage of each task was finished by exactly one accepted report (a report from a worker
#     whose claim had gone stale was never applied);
#   - the attempts of a task never overlap in time (no task was held by two workers at once);
# and that every worker exits 0 on SIGTERM. Every process it starts is stopped on exit.
#
#   bash tests/nginx_cluster.sh          (tests/nginx_cluster.rs runs it under `cargo test`)
#
# Environment:
#   ASYNCFLOW_BIN               the binary (default target/debug/asyncflow, built with cargo)
#   NGINX_CLUSTER_DATABASE_URL  an empty, private database to use as it is (the Rust wrapper's)
#   DATABASE_URL                otherwise: a server (postgres://... URL) on which a private
#                               database is created and dropped; unset: the local server on
#                               127.0.0.1:5432 (createdb), or else a private cluster (initdb)
#   TASKS                       how many tasks (default 10000)
#   KEEP_TMP=1                  keep the temporary directory (logs, nginx.conf) after the run
# Needs nginx, curl and psql; as root with apt-get, missing ones are installed from Debian's
# packages.
set -euo pipefail
cd "$(dirname "$0")/.."

TASKS=${TASKS:-10000}
TOKEN="nginx-cluster-token-$RANDOM$RANDOM"
STARTED=$(date +%s%N)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/af-nginx.XXXXXX")
chmod 755 "$TMP" # nginx's worker processes (an unprivileged user) read under it
PIDS=()          # every background process, stopped on exit
DROP_DB=""       # "<admin URL> <name>" of a database this script created
PRIVATE_PG=""    # data directory of a cluster this script started

say() {
  local ms=$((($(date +%s%N) - STARTED) / 1000000))
  printf '[%4d.%01ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*"
}

fail() {
  say "FAILED: $*" >&2
  for f in "$TMP"/*.log; do
    [ -s "$f" ] || continue
    echo "---- last lines of $(basename "$f")" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

stop_all() {
  local pid alive
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 50); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "$@"; do kill -KILL "$pid" 2>/dev/null; done
  return 0
}

cleanup() {
  local status=$?
  set +e
  # Workers first (they hand back what they hold while the servers still answer), then the
  # rest; SIGKILL whatever is still there after 5 s.
  stop_all ${WORKER_PIDS[@]+"${WORKER_PIDS[@]}"}
  stop_all ${PIDS[@]+"${PIDS[@]}"}
  wait 2>/dev/null
  if [ -n "$DROP_DB" ]; then
    read -r admin name <<<"$DROP_DB"
    psql "$admin" -qXc "drop database if exists $name with (force)" >/dev/null 2>&1
  fi
  if [ -n "$PRIVATE_PG" ]; then
    as_postgres "$PG_BIN/pg_ctl" -D "$PRIVATE_PG" -m immediate stop >/dev/null 2>&1
  fi
  if [ "${KEEP_TMP:-}" = 1 ] || [ $status != 0 ]; then
    echo "logs kept in $TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit $status
}
WORKER_PIDS=()
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- tools -------------------------------------------------------------------------------
NGINX=$(command -v nginx || true)
[ -z "$NGINX" ] && [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx
missing=()
[ -z "$NGINX" ] && missing+=(nginx)
command -v curl >/dev/null || missing+=(curl)
command -v psql >/dev/null || missing+=(postgresql-client)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    fail "missing ${missing[*]}, and they cannot be installed here (needs root and apt-get): install them first"
  fi
  say "installing ${missing[*]} from Debian's packages"
  apt-get update -q >"$TMP/apt.log" 2>&1 || fail "apt-get update failed (see apt.log)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$TMP/apt.log" 2>&1 ||
    fail "apt-get install ${missing[*]} failed (see apt.log)"
  NGINX=$(command -v nginx || echo /usr/sbin/nginx)
fi
"$NGINX" -v 2>&1 | sed 's/^/    /'

BIN=${ASYNCFLOW_BIN:-}
if [ -z "$BIN" ]; then
  say "building target/debug/asyncflow"
  cargo build -q --bin asyncflow
  BIN=$PWD/target/debug/asyncflow
fi
[ -x "$BIN" ] || fail "no asyncflow binary at $BIN"

USED_PORTS=" "
# Ports below the kernel's ephemeral range: the tests running beside this one bind port 0 and
# open client connections, and either may take a port of that range between the look below and
# the bind of the process it is for (a server once failed with "Address already in use").
read -r EPHEMERAL_LOW _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPHEMERAL_LOW=32768
[ "$EPHEMERAL_LOW" -gt 12000 ] 2>/dev/null || EPHEMERAL_LOW=32768
free_port() {
  local port
  for _ in $(seq 200); do
    port=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000)))
    case $USED_PORTS in *" $port "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      USED_PORTS="$USED_PORTS$port "
      echo "$port"
      return 0
    fi
  done
  return 1
}

# ---- a private database ------------------------------------------------------------------
with_database() { # URL with its database replaced: postgres://user@host:port/<db>?query
  local url=$1 db=$2 query=""
  case $url in *\?*) query="?${url#*\?}" url=${url%%\?*} ;; esac
  local scheme=${url%%://*} rest=${url#*://}
  echo "$scheme://${rest%%/*}/$db$query"
}
DB_NAME="af_nginx_$$_$RANDOM"
if [ -n "${NGINX_CLUSTER_DATABASE_URL:-}" ]; then
  DB_URL=$NGINX_CLUSTER_DATABASE_URL
elif [ -n "${DATABASE_URL:-}" ]; then
  case $DATABASE_URL in postgres://* | postgresql://*) ;; *) fail "DATABASE_URL must be a postgres:// URL" ;; esac
  psql "$DATABASE_URL" -qXc "create database $DB_NAME" || fail "cannot create a database with DATABASE_URL"
  DROP_DB="$DATABASE_URL $DB_NAME"
  DB_URL=$(with_database "$DATABASE_URL" "$DB_NAME")
elif [ -z "${NGINX_CLUSTER_PRIVATE_PG:-}" ] && (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null &&
  createdb -h 127.0.0.1 -p 5432 -U postgres "$DB_NAME" 2>/dev/null; then
  DROP_DB="postgres://postgres@127.0.0.1:5432/postgres $DB_NAME"
  DB_URL="postgres://postgres@127.0.0.1:5432/$DB_NAME"
else
  PG_BIN=$(dirname "$(command -v initdb || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true)")
  [ -x "$PG_BIN/initdb" ] || fail "no PostgreSQL: set DATABASE_URL, or install postgresql"
  PRIVATE_PG=$TMP/pgdata
  PG_PORT=$(free_port)
  mkdir -p "$PRIVATE_PG" && chmod 700 "$PRIVATE_PG"
  [ "$(id -u)" = 0 ] && chown postgres "$PRIVATE_PG" && touch "$TMP/postgres.log" && chown postgres "$TMP/postgres.log"
  say "starting a private PostgreSQL on port $PG_PORT"
  as_postgres "$PG_BIN/initdb" -D "$PRIVATE_PG" -U postgres --auth=trust >"$TMP/initdb.log" 2>&1 || fail "initdb failed"
  as_postgres "$PG_BIN/pg_ctl" -D "$PRIVATE_PG" -l "$TMP/postgres.log" -w -o \
    "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off -c max_connections=200" \
    start >/dev/null || fail "the private PostgreSQL did not start"
  psql "postgres://postgres@127.0.0.1:$PG_PORT/postgres" -qXc "create database $DB_NAME" || fail "createdb failed"
  DB_URL="postgres://postgres@127.0.0.1:$PG_PORT/$DB_NAME"
fi
export ASYNCFLOW_LOG=${ASYNCFLOW_LOG:-asyncflow=info,warn}
DATABASE_URL=$DB_URL "$BIN" migrate >"$TMP/migrate.log" 2>&1 || fail "asyncflow migrate failed"
sql() { psql "$DB_URL" -qXAtc "$1"; }

# ---- three servers behind nginx ----------------------------------------------------------
SERVER_PORTS=() SERVER_PIDS=()
for i in 0 1 2; do
  port=$(free_port)
  DATABASE_URL=$DB_URL "$BIN" serve --listen "127.0.0.1:$port" --token "$TOKEN" --pool-size 8 \
    >"$TMP/serve$i.log" 2>&1 &
  SERVER_PORTS+=("$port") SERVER_PIDS+=($!) PIDS+=($!)
done
ready() { curl -sf -o /dev/null --max-time 2 "$1"; }
for i in 0 1 2; do
  for _ in $(seq 150); do ready "http://127.0.0.1:${SERVER_PORTS[$i]}/readyz" && break; sleep 0.1; done
  ready "http://127.0.0.1:${SERVER_PORTS[$i]}/readyz" || fail "server $i did not become ready"
done

NGINX_PORT=$(free_port)
mkdir -p "$TMP/nginx"
for d in body proxy fastcgi uwsgi scgi; do mkdir -p "$TMP/nginx/$d" && chmod 1777 "$TMP/nginx/$d"; done
{
  echo "worker_processes 1;"
  echo "daemon off;"
  echo "pid $TMP/nginx/nginx.pid;"
  echo "error_log $TMP/nginx.log warn;"
  echo "events { worker_connections 1024; }"
  echo "http {"
  echo "  access_log off;"
  for d in body proxy fastcgi uwsgi scgi; do
    [ $d = body ] && echo "  client_body_temp_path $TMP/nginx/$d;" || echo "  ${d}_temp_path $TMP/nginx/$d;"
  done
  echo "  client_max_body_size 8m;"
  echo "  client_body_buffer_size 8m;"
  echo "  upstream asyncflow {"
  for port in "${SERVER_PORTS[@]}"; do echo "    server 127.0.0.1:$port max_fails=1 fail_timeout=5s;"; done
  echo "    keepalive 32;"
  echo "    keepalive_timeout 20s;"
  echo "  }"
  echo "  server {"
  echo "    listen 127.0.0.1:$NGINX_PORT;"
  echo "    location / {"
  echo "      proxy_pass http://asyncflow;"
  echo "      proxy_http_version 1.1;"
  echo "      proxy_set_header Connection \"\";"
  echo "      proxy_connect_timeout 2s;"
  echo "      proxy_read_timeout 30s;"
  echo "      proxy_max_temp_file_size 0;"
  # the default: a POST goes to the next server only if it was never sent to one (no double hold)
  echo "      proxy_next_upstream error timeout;"
  echo "    }"
  echo "  }"
  echo "}"
} >"$TMP/nginx/nginx.conf"
"$NGINX" -p "$TMP/nginx" -e "$TMP/nginx.log" -c "$TMP/nginx/nginx.conf" >>"$TMP/nginx.log" 2>&1 &
PIDS+=($!)
LB="http://127.0.0.1:$NGINX_PORT"
for _ in $(seq 100); do ready "$LB/readyz" && break; sleep 0.1; done
ready "$LB/readyz" || fail "nginx did not come up on $LB"
say "3 servers on ports ${SERVER_PORTS[*]} behind nginx on $NGINX_PORT"

# Maintenance runs beside the servers (HTTP workers never run it): it rescues a task whose
# worker vanished, the backstop for a claim that nobody received.
DATABASE_URL=$DB_URL "$BIN" maintain --rescue-interval 1 >"$TMP/maintain.log" 2>&1 &
PIDS+=($!)

# ---- the type, the workers, the tasks ----------------------------------------------------
# The same settings as the function.toml below: the tasks are created before a worker has
# registered the type, and need its initial stage.
echo '{"initial_stage": "s1", "schedule_interval": 0.2, "max_processing_time": 10,
  "max_retry_num": 5, "max_retry_interval": -1}' >"$TMP/settings.json"
mkdir -p "$TMP/functions/noop"
cat >"$TMP/functions/noop/function.toml" <<'EOF'
type = "noop"
command = ["./run"]
timeout = 10
[settings]
initial_stage = "s1"
schedule_interval = 0.2
max_processing_time = 10
max_retry_num = 5
max_retry_interval = -1
EOF
cat >"$TMP/functions/noop/run" <<'EOF'
#!/bin/sh
case "$ASYNCFLOW_STAGE" in
  s1) echo '{"next_stage": "s2"}' ;;
  s2) echo '{"next_stage": "s3"}' ;;
  *) echo '{"result": {"ok": true}}' ;;
esac
EOF
chmod +x "$TMP/functions/noop/run"
api() { # METHOD PATH [BODY-FILE]
  curl -sS --fail-with-body --max-time 60 -X "$1" -H "Authorization: Bearer $TOKEN" \
    -H 'Content-Type: application/json' ${3:+--data-binary "@$3"} "$LB$2"
}
api PUT /v1/task-types/noop "$TMP/settings.json" >/dev/null || fail "registering the type through nginx failed"

for i in 0 1 2; do
  # A database URL that leads nowhere: HTTP workers must not need one.
  DATABASE_URL=postgres://nobody@127.0.0.1:1/none "$BIN" worker --server "$LB" --token "$TOKEN" \
    --functions "$TMP/functions" --worker-id "http-worker-$i" --concurrency 32 --shutdown-grace 10s \
    >"$TMP/worker$i.out" 2>"$TMP/worker$i.log" &
  WORKER_PIDS+=($!) PIDS+=($!)
done

{
  printf '{"type": "noop", "tasks": ['
  for ((n = 0; n < TASKS; n++)); do
    [ $n -gt 0 ] && printf ','
    printf '{"context": {"n": %d}}' $n
  done
  printf ']}'
} >"$TMP/tasks.json"
api POST /v1/tasks/bulk "$TMP/tasks.json" >"$TMP/created.json" || fail "bulk create failed: $(cat "$TMP/created.json")"
created=$(grep -o '"noop-[0-9]*-[0-9]*"' "$TMP/created.json" | sort -u | wc -l)
[ "$created" = "$TASKS" ] || fail "bulk create returned $created distinct ids, not $TASKS"
say "created $TASKS tasks through nginx (one bulk call); 3 HTTP workers running"

# Progress in stages finished (order_time is first come, first served across stages: every
# task's s1 runs before the first s3), and tasks succeeded.
progress() {
  sql "select sum(case when status = 'succeeded' then 3 when stage = 's3' then 2 when stage = 's2' then 1 else 0 end),
    count(*) filter (where status = 'succeeded') from asyncflow.tasks where task_type = 'noop'" | tr '|' ' '
}
alive() { for pid in "${WORKER_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || fail "a worker exited early"; done; }
deadline=$(($(date +%s) + ${DEADLINE_SECONDS:-150}))
read -r stages done_tasks <<<"$(progress)"
until [ "$stages" -ge $((TASKS * 3 * 3 / 10)) ]; do
  [ "$(date +%s)" -lt $deadline ] || fail "too slow before the crash: $stages stages finished"
  alive
  sleep 0.2
  read -r stages done_tasks <<<"$(progress)"
done
{ kill -KILL "${SERVER_PIDS[1]}" && wait "${SERVER_PIDS[1]}"; } 2>/dev/null || true
say "SIGKILLed server 1 (port ${SERVER_PORTS[1]}) after $stages of $((TASKS * 3)) stages; going on with two"

last=$stages
until [ "$done_tasks" = "$TASKS" ]; do
  [ "$(date +%s)" -lt $deadline ] || fail "only $done_tasks of $TASKS succeeded in time ($stages stages)"
  alive
  if [ $((stages / 7500)) != $((last / 7500)) ]; then say "$stages stages finished, $done_tasks tasks succeeded"; fi
  last=$stages
  sleep 0.2
  read -r stages done_tasks <<<"$(progress)"
done
say "all $TASKS succeeded"

for pid in "${WORKER_PIDS[@]}"; do kill -TERM "$pid"; done
for i in 0 1 2; do
  status=0
  wait "${WORKER_PIDS[$i]}" || status=$?
  [ $status = 0 ] || fail "worker $i exited with status $status after SIGTERM"
  echo "    worker $i: $(cat "$TMP/worker$i.out")"
done
WORKER_PIDS=()

# ---- checks ------------------------------------------------------------------------------
read -r total ok with_result <<<"$(sql "select count(*), count(*) filter (where status = 'succeeded'),
  count(*) filter (where result = '{\"ok\": true}') from asyncflow.tasks where task_type = 'noop'" | tr '|' ' ')"
[ "$total" = "$TASKS" ] && [ "$ok" = "$TASKS" ] && [ "$with_result" = "$TASKS" ] ||
  fail "tasks: $total in all, $ok succeeded, $with_result with the result (want $TASKS each)"
ids_ok=$(grep -o '"noop-[0-9]*-[0-9]*"' "$TMP/created.json" | tr -d '"' | sort -u |
  psql "$DB_URL" -qXAt -c "create temp table created (id text)" -c "copy created from stdin" \
    -c "select count(*) from created c, asyncflow.get_task(c.id) t where t ->> 'status' = 'succeeded'")
[ "$ids_ok" = "$TASKS" ] || fail "only $ids_ok of the $TASKS ids the bulk call returned are succeeded tasks"

# Each stage finished by exactly one accepted report, in order s1, s2, s3.
bad_stages=$(sql "select count(*) from asyncflow.tasks t where t.task_type = 'noop' and (
  select array_agg(x ->> 'stage' order by (x ->> 'start')::timestamptz)
  from jsonb_array_elements(asyncflow.task_log(t)) x where x ->> 'outcome' in ('advance', 'succeed'))
  is distinct from array['s1', 's2', 's3']")
[ "$bad_stages" = 0 ] || fail "$bad_stages tasks did not finish s1, s2, s3 exactly once each, in order"

# No overlap between consecutive attempts of a task (the next claim starts after the previous
# attempt's report). 'start' is the claim's transaction time, 'cost_ms' is floored, so 2 ms of
# slack; a rescued attempt ends at its rescue, and its worker's late report is refused.
read -r overlaps attempts retried rescued released min_gap <<<"$(sql "
  with e as (
    select t.id, x ->> 'worker' as worker, x ->> 'outcome' as outcome, (x ->> 'start')::timestamptz as start,
      (x ->> 'start')::timestamptz + (x ->> 'cost_ms')::float8 * interval '1 millisecond' as finish
    from asyncflow.tasks t cross join lateral jsonb_array_elements(asyncflow.task_log(t)) x
    where t.task_type = 'noop' and x ? 'start'
  ), o as (
    select *, lag(finish) over w as prev_finish from e window w as (partition by id order by start)
  )
  select count(*) filter (where start < prev_finish - interval '2 milliseconds'), count(*),
    count(*) filter (where outcome = 'fail'), count(*) filter (where outcome = 'rescued'),
    count(*) filter (where outcome = 'release'),
    coalesce(round(extract(epoch from min(start - prev_finish)) * 1000, 1), 0)
  from o" | tr '|' ' ')"
[ "$overlaps" = 0 ] || fail "$overlaps attempts started before the previous attempt of the same task ended"
workers=$(sql "select string_agg(distinct x ->> 'worker', ' ') from asyncflow.tasks t
  cross join lateral jsonb_array_elements(asyncflow.task_log(t)) x where t.task_type = 'noop'")
say "checked: $TASKS/$TASKS succeeded with their result, each stage finished once, no overlapping attempts"
echo "    $attempts attempts by $workers; $retried failed tries, $rescued rescued, $released handed back;"
echo "    smallest gap between a report and the next claim of the same task: $min_gap ms"
say "nginx cluster: passed"
