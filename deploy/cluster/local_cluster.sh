#!/usr/bin/env bash
# A local okl cluster on loopback: N okl_server replicas, each with its own store, behind
# nginx routing by a consistent hash of the x-okl-tenant header (deploy/cluster/nginx.conf.in).
#
#   deploy/cluster/local_cluster.sh start [N]   # N replicas (default 3) and the router
#   deploy/cluster/local_cluster.sh status      # the same lines, for what is running
#   deploy/cluster/local_cluster.sh stop        # stops them all (the stores stay)
#   deploy/cluster/local_cluster.sh move TENANT N  # moves TENANT's models to replica N
#   deploy/cluster/local_cluster.sh add         # starts one more replica and moves to it
#                                               # the tenants the larger ring gives it
#   deploy/cluster/local_cluster.sh reload      # the router rereads its config and pins
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
# Moves (`okl move`, see `okl help move`) pin a tenant to its new replica in
# $OKL_CLUSTER_DIR/tenant_overrides.map, which the router reads ahead of the ring; the pins
# stay across restarts. `add` starts replica N+1, moves to it exactly the tenants that the
# ring of N+1 replicas assigns to it (deploy/cluster/nginx_ring.py computes nginx's ring),
# then puts it in the router's ring and drops those pins in one reload. Tenants pinned by
# earlier moves stay where they are. Both need an admin token in $OKL_TOKEN when the
# replicas check tokens.
#
# Environment:
#   OKL_CLUSTER_DIR    state: stores, logs, nginx.conf (default /tmp/okl-cluster-$UID)
#   OKL_CLUSTER_PORT   the router's port; replica N listens on it + N (default 50060)
#   OKL_SERVER         the okl_server binary (default build/release/server/okl_server,
#                      built with `cmake --build build/release --target okl_server` if absent)
#   OKL_SERVER_FLAGS   more flags for every replica (e.g. "--auth_tokens_file=...")
#   OKL_CLI            the okl tool (default build/release/client/okl, built if absent)
#   OKL_NGINX          the nginx binary (default: nginx on PATH, then /usr/sbin/nginx;
#                      Debian package `nginx`, installed by scripts/install_deps.sh)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
state=${OKL_CLUSTER_DIR:-/tmp/okl-cluster-$(id -u)}
base_port=${OKL_CLUSTER_PORT:-50060}
startup_timeout_s=30

usage() {
  echo "usage: $0 start [N] | status | stop | move TENANT N | add | reload" >&2
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

# The binary $1 names (its path in $2 if set), built in build/release if it is missing.
find_binary() {
  local target=$1 given=$2 default=$3 binary
  binary=${given:-$root/build/release/$default}
  if [[ ! -x $binary && -z $given ]]; then
    echo "local_cluster: building $target in build/release" >&2
    [[ -f $root/build/release/build.ninja ]] ||
      cmake -S "$root" -B "$root/build/release" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        >/dev/null
    cmake --build "$root/build/release" --target "$target" >/dev/null
  fi
  [[ -x $binary ]] || die "no $target at $binary"
  echo "$binary"
}

find_server() { find_binary okl_server "${OKL_SERVER:-}" server/okl_server; }
find_cli() { find_binary okl "${OKL_CLI:-}" client/okl; }

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

# The addresses of the replicas that are up, one a line, in replica order.
replica_addresses() {
  local dir
  for dir in $(replica_dirs); do
    if alive "$dir/pid"; then echo "127.0.0.1:$(read_port "$dir/port")"; fi
  done
}

# Writes nginx.conf with the replicas that are up in the ring.
write_router_config() {
  local servers="" address
  for address in $(replica_addresses); do
    servers+="    server $address max_fails=0;"$'\n'
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

# The pids of the processes whose parent is $1 (from /proc: procps may be missing).
children() {
  local parent=$1 file line fields pid
  for file in /proc/[0-9]*/stat; do
    { line=$(<"$file"); } 2>/dev/null || continue
    read -r -a fields <<<"${line##*) }"  # state, ppid, ...
    # A process that exits while it is read leaves the line empty: not a child.
    if [[ ${fields[1]:-} == "$parent" ]]; then
      pid=${file#/proc/}
      echo "${pid%/stat}"
    fi
  done
}

# Makes the router reread nginx.conf and the override map, and returns once its new
# worker runs. (`nginx -s reload` only signals the master. Once the new worker runs, the
# old one has been told to quit: it closes its idle connections and sends GOAWAY on the
# busy ones, so clients' next calls reach the new worker.)
reload_router() {
  require_router
  local master old new deadline=$((SECONDS + startup_timeout_s))
  master=$(<"$state/nginx.pid")
  old=$(children "$master" | sort)
  env -u NGINX "$(find_nginx)" -q -s reload -c "$state/nginx.conf" -e "$state/nginx-error.log" ||
    die "nginx did not take the reload (log: $state/nginx-error.log)"
  while :; do
    new=$(children "$master" | sort | comm -13 <(echo "$old") - | head -n1)
    [[ -z $new ]] || break
    ((SECONDS < deadline)) || die "nginx started no new worker in ${startup_timeout_s} s (log: $state/nginx-error.log)"
    sleep 0.02
  done
}

require_router() {
  alive "$state/nginx.pid" || die "no cluster is running in $state: '$0 start' first"
}

# The replica (address) that holds models of tenant $1, if any.
tenant_location() {
  local tenant=$1 cli address
  cli=$(find_cli)
  for address in $(replica_addresses); do
    if "$cli" list --server="$address" --tenant="$tenant" --json 2>/dev/null | grep -q '"model"'; then
      echo "$address"
      return 0
    fi
  done
  return 1
}

# Whether the override map pins tenant $1.
pinned() {
  awk -v key="\"$1\"" '$1 == key { found = 1 } END { exit !found }' "$state/tenant_overrides.map"
}

# okl move of tenant $1 from address $2 to address $3, pinning it in the override map.
move_tenant() {
  local tenant=$1 from=$2 to=$3
  "$(find_cli)" move --tenant="$tenant" --from="$from" --to="$to" \
    --route_map="$state/tenant_overrides.map" \
    --route_reload="'$root/deploy/cluster/local_cluster.sh' reload"
}

move() {
  local tenant=$1 n=$2 to from
  [[ $n =~ ^[1-9][0-9]*$ ]] || usage
  require_router
  alive "$state/replica-$n/pid" || die "replica $n is not running"
  to="127.0.0.1:$(read_port "$state/replica-$n/port")"
  from=$(tenant_location "$tenant") || die "no replica holds models of tenant \"$tenant\""
  [[ $from != "$to" ]] || die "tenant \"$tenant\" is on replica $n already"
  move_tenant "$tenant" "$from" "$to"
}

add() {
  require_router
  local n cli server new_address address tenant owner moved=()
  n=$(replica_addresses | wc -l)
  cli=$(find_cli)
  server=$(find_server)
  start_replica "$server" "$state/replica-$((n + 1))" $((base_port + n + 1))
  wait_for_replica "$state/replica-$((n + 1))"
  new_address="127.0.0.1:$(read_port "$state/replica-$((n + 1))/port")"
  local ring
  ring=$(replica_addresses | paste -sd, -)
  # Each replica's unpinned tenants that the larger ring gives to the new replica.
  for address in $(replica_addresses); do
    [[ $address != "$new_address" ]] || continue
    while read -r tenant owner; do
      [[ $owner == "$new_address" ]] || continue
      pinned "$tenant" && continue
      move_tenant "$tenant" "$address" "$new_address" >&2 ||
        die "moving tenant \"$tenant\" failed (it stays on $address); replica $((n + 1)) runs, outside the ring"
      moved+=("$tenant")
    done < <("$cli" list --server="$address" --json |
      python3 -c 'import json, sys; print("\n".join(sorted({m["tenant"] for m in json.load(sys.stdin)["models"]})))' |
      python3 "$root/deploy/cluster/nginx_ring.py" --replicas="$ring")
  done
  # The new ring now sends the moved tenants where their pins do: drop the pins with the
  # same reload that installs the ring.
  local tenant_pins=$state/tenant_overrides.map
  for tenant in "${moved[@]}"; do
    awk -v key="\"$tenant\"" '$1 != key' "$tenant_pins" >"$tenant_pins.new"
    mv "$tenant_pins.new" "$tenant_pins"
  done
  write_router_config
  env -u NGINX "$(find_nginx)" -t -q -c "$state/nginx.conf" -e "$state/nginx-error.log" ||
    die "nginx rejected $state/nginx.conf"
  reload_router
  echo "moved ${#moved[@]} tenant(s) to replica $((n + 1)): ${moved[*]}" >&2
  print_processes
}

case ${1:-} in
  start) shift; (($# <= 1)) || usage; start "$@" ;;
  status) print_processes ;;
  stop) stop ;;
  move) shift; (($# == 2)) || usage; move "$@" ;;
  reload) reload_router ;;
  add) shift; (($# == 0)) || usage; add ;;
  *) usage ;;
esac
