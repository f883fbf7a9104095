#!/usr/bin/env bash
# What TLS and bearer tokens cost okl_server: okl_loadgen's scenarios (docs/benchmarks.md,
# "Load generator") run three ways back to back against a spawned server --
#   plain      plaintext, no tokens (the figures of docs/benchmarks.md);
#   tls        TLS (server certificate for localhost and 127.0.0.1, from a throw-away CA);
#   tls+token  TLS, and a tokens file on the server with every call carrying a token;
# -- then one table of requests/s (examples/s for stream), p50 and p99 per scenario and
# the ratios to plain. Certificates (openssl) and the token (`okl token new`) go into a
# temporary directory that is removed at the end.
#
# Usage: [ROUNDS=N] bench/security_cost.sh [BUILD_DIR] [okl_loadgen flags...]
#   BUILD_DIR defaults to build/release (built: okl_loadgen okl_server okl);
#   the flags default to docs/benchmarks.md's: --repetitions=3.
#   ROUNDS (default 1) runs the three ways N times in turn and keeps each scenario's
#   fastest run: on a machine that other work disturbs, ROUNDS=3 with --repetitions=1
#   spreads the disturbance over the three ways instead of letting it fall on one.
# Takes about five minutes with the defaults; run it on an otherwise quiet machine.
set -euo pipefail

cd "$(dirname "$0")/.."
build=${1:-build/release}
shift || true
flags=("$@")
((${#flags[@]})) || flags=(--repetitions=3)

loadgen=$build/bench/okl_loadgen
server=$build/server/okl_server
okl=$build/client/okl
for binary in "$loadgen" "$server" "$okl"; do
  [[ -x $binary ]] || {
    echo "security_cost: $binary is missing; cmake --build $build --target okl_loadgen okl_server okl" >&2
    exit 2
  }
done
command -v openssl >/dev/null || { echo "security_cost: needs openssl (scripts/install_deps.sh)" >&2; exit 2; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/okl_security_cost.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# --- Certificates: a CA and a server certificate it signed (ECDSA P-256) ---------------
cat >"$dir/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
EOF
ssl() { openssl "$@" 2>>"$dir/openssl.log" >/dev/null || { cat "$dir/openssl.log" >&2; exit 1; }; }
ssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/ca.key"
ssl req -new -x509 -config "$dir/openssl.cnf" -extensions ca -key "$dir/ca.key" \
  -subj "/CN=okl security_cost CA" -days 1 -sha256 -out "$dir/ca.pem"
ssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/server.key"
ssl req -new -config "$dir/openssl.cnf" -key "$dir/server.key" -subj "/CN=localhost" \
  -out "$dir/server.csr"
ssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -set_serial 2 \
  -days 1 -sha256 -extfile "$dir/openssl.cnf" -extensions server -out "$dir/server.pem"

# --- A write token for okl_loadgen's tenant ("loadgen") ---------------------------------
{
  read -r token
  read -r line
} < <("$okl" token new --role=write --tenants=loadgen)
printf '# okl security_cost.sh\n%s\n' "$line" >"$dir/tokens"

tls_server_args="--tls_cert_file=$dir/server.pem --tls_key_file=$dir/server.key"
run() {  # NAME ROUND [okl_loadgen flags...]
  local name=$1 round=$2
  shift 2
  echo "security_cost: $name (round $round): okl_loadgen --spawn_server=$server ${flags[*]} $*" >&2
  "$loadgen" --spawn_server="$server" "${flags[@]}" "$@" >"$dir/$name.$round.json" \
    2>"$dir/$name.$round.log" || {
    cat "$dir/$name.$round.log" >&2
    exit 1
  }
  grep -E '^(scenario|health|predict|observe|stream) ' "$dir/$name.$round.log" >&2 || true
}
rounds=${ROUNDS:-1}
for ((round = 1; round <= rounds; ++round)); do
  OKL_TOKEN='' run plain "$round"
  OKL_TOKEN='' run tls "$round" --server_args="$tls_server_args" --tls_ca_file="$dir/ca.pem"
  OKL_TOKEN=$token run tls+token "$round" \
    --server_args="$tls_server_args --auth_tokens_file=$dir/tokens" --tls_ca_file="$dir/ca.pem"
done

# --- The table -------------------------------------------------------------------------
/usr/bin/python3 - "$dir" "$rounds" <<'EOF'
import json, sys
d, rounds = sys.argv[1], int(sys.argv[2])
runs = ["plain", "tls", "tls+token"]
def rate(s):
    return s.get("examples_per_s", s["requests_per_s"]) if "streams" in s else s["requests_per_s"]
results = {}
for name in runs:
    for r in range(1, rounds + 1):
        result = json.load(open(f"{d}/{name}.{r}.json"))
        errors = sum(s["errors"] for s in result["scenarios"].values())
        if errors:
            sys.exit(f"security_cost: {name} had {errors} failed calls; see its first_error")
        want = {"plain": "plaintext", "tls": "tls", "tls+token": "tls+token"}[name]
        if result["security"] != want:
            sys.exit(f"security_cost: {name} ran as {result['security']}")
        if name not in results:
            results[name] = result
            continue
        best = results[name]["scenarios"]  # each scenario: its fastest round
        for scenario, s in result["scenarios"].items():
            if rate(s) > rate(best[scenario]):
                best[scenario] = s
plain = results["plain"]["scenarios"]
def others(s):  # cores used by other processes during the window: noise
    if "machine_cpu_cores" not in s:
        return float("nan")
    return max(0.0, s["machine_cpu_cores"] - s["client_cpu_cores"] - s.get("server_cpu_cores", 0))
print(f"\n{'scenario':<10} {'security':<10} {'rate/s':>10} {'p50 us':>8} {'p99 us':>8} "
      f"{'rate/plain':>10} {'p50/plain':>9} {'p99/plain':>9} {'others':>6}")
for scenario in plain:
    for name in runs:
        s = results[name]["scenarios"][scenario]
        p = plain[scenario]
        print(f"{scenario:<10} {name:<10} {rate(s):>10,.0f} {s['p50_us']:>8,.0f} "
              f"{s['p99_us']:>8,.0f} {rate(s) / rate(p):>10.2f} "
              f"{s['p50_us'] / p['p50_us']:>9.2f} {s['p99_us'] / p['p99_us']:>9.2f} "
              f"{others(s):>6.2f}")
print("(rate: requests/s, examples/s for stream, whose latency is per stream; "
      f"{rounds} round(s) of {results['plain']['repetitions']} repetition(s), the fastest "
      "run each; others: CPU cores other processes used meanwhile, i.e. noise)")
EOF
