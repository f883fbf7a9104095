#!/usr/bin/env bash
# A local okl cluster on loopback: N okl_server replicas, each with its own store, behind
# nginx routing by a consistent hash of the x-okl-tenant header (deploy/cluster/nginx.conf.in).
#
#   deploy/cluster/local_cluster.sh start [N]   # N replicas (default 3) and the router
#   deploy/cluster/local_cluster.sh status      # the same lines, for what is running
#   deploy/cluster/local_cluster.sh stop        # stops them all (the stores stay)
#
# `start` prints one line per process:
#   router 127.0.0.1:PORT
#   replica 127.0.0.1:PORT metrics 127.0.0.1:PORT
# Clients connect to the router; okl's client library and tool send x-okl-tenant on every
# call. The addresses are fixed: the router on 127.0.0.1:PORT, replica N on PORT + N (PORT
# is $OKL_CLUSTER_PORT, default 50060), because the ring hashes the replicas' addresses:
# the same addresses give the same ring on every machine and after every restart. Starting
# again with the same directory reuses each replica's store, so the models come back, and
# the hash sends each tenant where it was as long as N and PORT are the same.
#
# Environment:
#   OKL_CLUSTER_DIR    state: stores, logs, nginx.conf (default /tmp/okl-cluster-$UID)
#   OKL_CLUSTER_PORT   the router's port; replica N listens on it + N (default 50060)
#   OKL_SERVER         the okl_server binary (default build/release/server/okl_server,
#                      built with `cmake --build build/release --target okl_server` if absent)
#   OKL_SERVER_FLAGS   more flags for every replica (e.g. "--auth_tokens_file=...")
#   OKL_NGINX          the nginx binary (default: nginx on PATH, then /usr/sbin/nginx;
#                      Debian package `nginx`, installed by scripts/install_deps.sh)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
state=${OKL_CLUSTER_DIR:-/tmp/okl-cluster-$(id -u)}
base_port=${OKL_CLUSTER_PORT:-50060}
startup_timeout_s=30

usage() {
  echo "usage: $0 start [N] | status | stop" >&2
  exit 2
}

# Set while `start` runs: a failed start stops what it started.
starting=0

die() {
  echo "local_cluster: $*" >&2
  if ((starting)); then stop; fi
  exit 1
}

find_nginx() {
  if [[ -n ${OKL_NGINX:-} ]]; then
    echo "$OKL_NGINX"
  elif command -v nginx >/dev/null; then
    command -v nginx
  elif [[ -x /usr/sbin/nginx ]]; then
    echo /usr/sbin/nginx
  else
    die "no nginx: install Debian's nginx (scripts/install_deps.sh does) or set OKL_NGINX"
  fi
}

find_server() {
  local server=${OKL_SERVER:-$root/build/release/server/okl_server}
  if [[ ! -x $server && -z ${OKL_SERVER:-} ]]; then
    echo "local_cluster: building okl_server in build/release" >&2
    [[ -f $root/build/release/build.ninja ]] ||
      cmake -S "$root" -B "$root/build/release" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        >/dev/null
    cmake --build "$root/build/release" --target okl_server >/dev/null
  fi
  [[ -x $server ]] || die "no okl_server at $server (set OKL_SERVER)"
  echo "$server"
}

# The number in a port file once its writer has finished it (ends in a newline).
read_port() {
  local file=$1 text
  [[ -f $file ]] || return 1
  text=$(<"$file")
  [[ $(tail -c1 "$file" | od -An -c | tr -d ' ') == '\n' && $text =~ ^[0-9]+$ ]] || return 1
  echo "$text"
}

# Whether the process of a pid file runs: exists and is not a zombie (exited, not reaped).
alive() {
  local pid_file=$1 stat
  [[ -f $pid_file ]] || return 1
  stat=$(cat "/proc/$(<"$pid_file")/stat" 2>/dev/null) || return 1
  [[ ${stat##*) } != Z* ]]
}

replica_dirs() {
  compgen -G "$state/replica-*" | sort -V || true
}

start_replica() {
  local server=$1 dir=$2 port=$3
  mkdir -p "$dir/data"
  rm -f "$dir/port" "$dir/metrics_port"
  # shellcheck disable=SC2086  # OKL_SERVER_FLAGS is a list of flags
  setsid "$server" --listen="127.0.0.1:$port" --port_file="$dir/port" --data_dir="$dir/data" \
    --metrics_address=127.0.0.1:0 --metrics_port_file="$dir/metrics_port" \
    ${OKL_SERVER_FLAGS:-} </dev/null >"$dir/okl_server.log" 2>&1 &
  echo $! >"$dir/pid"
}

wait_for_replica() {
  local dir=$1 deadline=$((SECONDS + startup_timeout_s))
  until read_port "$dir/port" >/dev/null && read_port "$dir/metrics_port" >/dev/null; do
    if ! alive "$dir/pid"; then
      tail -n 20 "$dir/okl_server.log" >&2
      die "the replica in $dir exited before it listened (log above: $dir/okl_server.log)"
    fi
    ((SECONDS < deadline)) || die "the replica in $dir wrote no port in ${startup_timeout_s} s"
    sleep 0.05
  done
}

# Writes nginx.conf for the replicas that are up.
write_router_config() {
  local servers="" dir
  for dir in $(replica_dirs); do
    servers+="    server 127.0.0.1:$(read_port "$dir/port") max_fails=0;"$'\n'
  done
  mkdir -p "$state/nginx-tmp"
  touch "$state/tenant_overrides.map"
  sed -e "s|@STATE_DIR@|$state|g" -e "s|@ROUTER_LISTEN@|127.0.0.1:$base_port|g" \
    "$root/deploy/cluster/nginx.conf.in" |
    awk -v servers="${servers%$'\n'}" '$0 == "@REPLICAS@" { print servers; next } { print }' \
      >"$state/nginx.conf"
}

print_processes() {
  local dir
  if alive "$state/nginx.pid"; then
    echo "router 127.0.0.1:$(<"$state/router_port")"
  fi
  for dir in $(replica_dirs); do
    if alive "$dir/pid"; then
      echo "replica 127.0.0.1:$(read_port "$dir/port") metrics 127.0.0.1:$(read_port "$dir/metrics_port")"
    fi
  done
}

start() {
  local n=${1:-3}
  [[ $n =~ ^[1-9][0-9]*$ ]] || usage
  [[ $base_port =~ ^[1-9][0-9]*$ ]] && ((base_port + n <= 65535)) ||
    die "OKL_CLUSTER_PORT must be a port with room for $n replicas above it, got $base_port"
  local nginx server dir i
  nginx=$(find_nginx)
  server=$(find_server)
  mkdir -p "$state"
  if alive "$state/nginx.pid" || [[ -n $(for dir in $(replica_dirs); do alive "$dir/pid" && echo up; done) ]]; then
    die "a cluster is already running in $state: '$0 stop' first (or set OKL_CLUSTER_DIR)"
  fi
  starting=1
  # A smaller N than last time: the extra stores stay on disk but are not started.
  for ((i = 1; i <= n; i++)); do
    start_replica "$server" "$state/replica-$i" $((base_port + i))
  done
  for ((i = 1; i <= n; i++)); do
    wait_for_replica "$state/replica-$i"
  done
  for dir in $(replica_dirs); do
    [[ ${dir##*-} -le $n ]] || rm -f "$dir/pid" "$dir/port" "$dir/metrics_port"
  done
  echo "$base_port" >"$state/router_port"
  write_router_config
  # (nginx reads $NGINX as sockets inherited from an upgrade: never pass one on.)
  env -u NGINX "$nginx" -t -q -c "$state/nginx.conf" -e "$state/nginx-error.log" ||
    die "nginx rejected $state/nginx.conf"
  env -u NGINX "$nginx" -c "$state/nginx.conf" -e "$state/nginx-error.log" ||
    die "nginx did not start (log: $state/nginx-error.log)"
  local deadline=$((SECONDS + startup_timeout_s))
  until alive "$state/nginx.pid"; do
    ((SECONDS < deadline)) || die "nginx wrote no pid in ${startup_timeout_s} s"
    sleep 0.05
  done
  starting=0
  print_processes
}

stop_pid_file() {
  local pid_file=$1 pid deadline
  alive "$pid_file" || { rm -f "$pid_file"; return 0; }
  pid=$(<"$pid_file")
  kill -TERM "$pid"
  deadline=$((SECONDS + 20))
  while alive "$pid_file"; do
    if ((SECONDS >= deadline)); then
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.05
  done
  rm -f "$pid_file"
}

stop() {
  local dir
  # The router first, so that no call reaches a replica that is shutting down.
  stop_pid_file "$state/nginx.pid"
  for dir in $(replica_dirs); do
    stop_pid_file "$dir/pid"
  done
}

case ${1:-} in
  start) shift; (($# <= 1)) || usage; start "$@" ;;
  status) print_processes ;;
  stop) stop ;;
  *) usage ;;
esac
