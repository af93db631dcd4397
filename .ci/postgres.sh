#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests that need one (tests/study/test_postgres.py):
#
#   export AUTOTUNE_TEST_POSTGRES_URL="$(.ci/postgres.sh)"    # start; prints the SQLAlchemy URL
#   .ci/postgres.sh stop                                       # stop it and delete its files
#
# Installs PostgreSQL with apt-get when no server binaries are found (as root, or through sudo),
# creates a new cluster in a temporary folder (trust authentication, 127.0.0.1 only, fsync off:
# it holds test data only), starts it on a free local port, creates the database `autotune_test`
# and prints postgresql://postgres@127.0.0.1:PORT/autotune_test on stdout; everything else goes to
# stderr. PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user
# that the Debian package creates. The server outlives this script; `stop` ends it. Where the
# cluster lives is kept in $AUTOTUNE_PG_STATE (default: a file in /tmp named after the working
# directory, so `start` and `stop` from the same checkout find the same server).
set -euo pipefail

# one recorded server per checkout (a start stops the one an earlier run may have left behind)
STATE="${AUTOTUNE_PG_STATE:-/tmp/autotune-postgres-$(pwd | cksum | cut -d' ' -f1).state}"
DATABASE="autotune_test"

say() { echo "postgres.sh: $*" >&2; }

find_bindir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
      echo "$dir"
      return 0
    fi
  done
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    dirname "$(command -v initdb)"
    return 0
  fi
  return 1
}

install_postgres() {
  say "no PostgreSQL server found: installing it with apt-get"
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || { say "not root and no sudo: install postgresql yourself"; exit 1; }
    sudo=(sudo)
  fi
  # the package's own cluster is not needed: keep apt from starting services where it can
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
    apt-get install -y -qq --no-install-recommends postgresql postgresql-client >&2
}

free_port() {
  local py
  for py in python3 python; do
    if command -v "$py" >/dev/null; then
      "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
      return 0
    fi
  done
  echo $((20000 + RANDOM % 20000))
}

# Run a PostgreSQL program as the cluster's owner (postgres when this script runs as root).
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    if command -v runuser >/dev/null; then
      runuser -u postgres -- "$@"
    else
      su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
  else
    "$@"
  fi
}

start() {
  local bindir dir port url
  if [[ -f "$STATE" ]]; then
    say "a server of an earlier start is recorded in $STATE: stopping it first"
    stop
  fi
  bindir="$(find_bindir)" || { install_postgres; bindir="$(find_bindir)"; } || {
    say "PostgreSQL was installed but initdb/pg_ctl are not found"
    exit 1
  }
  if [[ "$(id -u)" == 0 ]] && ! id postgres >/dev/null 2>&1; then
    say "running as root and there is no postgres user to own the cluster"
    exit 1
  fi
  dir="$(mktemp -d /tmp/autotune-pg.XXXXXX)"
  chmod 700 "$dir"
  [[ "$(id -u)" == 0 ]] && chown postgres: "$dir"
  say "cluster in $dir ($("$bindir/postgres" --version))"
  as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale --no-sync \
    >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  local attempt
  for attempt in 1 2 3 4 5; do
    port="$(free_port)"
    if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
      >&2; then
      break
    fi
    say "could not start on port $port (attempt $attempt)"
    port=""
  done
  [[ -n "$port" ]] || { cat "$dir/server.log" >&2; exit 1; }
  as_owner "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -q -v ON_ERROR_STOP=1 \
    -c "CREATE DATABASE $DATABASE" >&2
  printf '%s\n%s\n%s\n' "$bindir" "$dir" "$port" >"$STATE"
  url="postgresql://postgres@127.0.0.1:$port/$DATABASE"
  say "ready: $url (stop with: $0 stop)"
  echo "$url"
}

stop() {
  [[ -f "$STATE" ]] || { say "no server recorded in $STATE"; return 0; }
  local bindir dir port
  { read -r bindir; read -r dir; read -r port; } <"$STATE"
  if [[ -d "$dir/data" ]]; then
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
  fi
  case "$dir" in
    /tmp/autotune-pg.*) rm -rf "$dir" ;;
  esac
  rm -f "$STATE"
  say "stopped the server on port $port"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) say "usage: $0 [start|stop]"; exit 2 ;;
esac
