#!/usr/bin/env bash
# Makes the secrets an okl deployment mounts: bearer tokens and, optionally, TLS certificates.
# Everything goes to one directory (default deploy/secrets, next to this script), which gets a
# .gitignore of `*` so that nothing in it is ever committed:
#
#   DIR/okl/                 mount this directory read-only at /etc/okl in the container
#     tokens        0644     okl_server's --auth_tokens_file: one line per token with the
#                            token's SHA-256, role and tenants (no token itself: nothing secret)
#     tls/ca.crt    0644     (tls) the CA that signed tls.crt: clients' --tls_ca
#     tls/tls.crt   0644     (tls) the server's certificate (serverAuth and clientAuth)
#     tls/tls.key   0400     (tls) its key, owned by uid 10001 (the image's user) when run as
#                            root; otherwise 0600, and see the message printed
#   DIR/NAME.token  0600     a bearer token (the secret: give it to its user, e.g. $OKL_TOKEN)
#   DIR/ca.key      0600     (tls) the CA's key: keep it, and off every server
#   DIR/clients/NAME.{crt,key}  (client) a client certificate for mutual TLS
#
# Usage:
#   deploy/make_secrets.sh init                  DIR/okl/tokens with one admin token,
#                                                DIR/admin.token (refuses if tokens exists)
#   deploy/make_secrets.sh token NAME --role=read|write|admin [--tenants=a,b|*]
#                                                a new token: DIR/NAME.token, and its line
#                                                (# NAME) appended to DIR/okl/tokens
#   deploy/make_secrets.sh revoke NAME           removes NAME's line from DIR/okl/tokens
#   deploy/make_secrets.sh tls [--hosts=h1,h2,...] [--days=N]
#                                                a CA (once) and a server certificate for
#                                                localhost, 127.0.0.1, okl and the --hosts
#   deploy/make_secrets.sh client NAME           a client certificate signed by that CA
# Options: --dir=DIR (default: deploy/secrets). The tokens file is always replaced whole (a
# new file renamed over it), so a running server never reads half of it: after a change, send
# okl_server SIGHUP (docker/podman kill --signal HUP okl; on Kubernetes see deploy/README.md).
#
# Tokens come from `okl token new`: $OKL (a command, e.g. "podman run --rm --entrypoint=okl
# localhost/okl:latest") if set, else `okl` on PATH, else build/release/client/okl, else the
# okl in the image $OKL_IMAGE (default okl:latest) through docker or podman.
set -euo pipefail
umask 077

here=$(cd "$(dirname "$0")" && pwd)
dir=$here/secrets
hosts=""
days=825
role=""
tenants=""
args=()
for arg in "$@"; do
  case $arg in
    --dir=*) dir=${arg#*=} ;;
    --hosts=*) hosts=${arg#*=} ;;
    --days=*) days=${arg#*=} ;;
    --role=*) role=${arg#*=} ;;
    --tenants=*) tenants=${arg#*=} ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "make_secrets: unknown option $arg (--help)" >&2; exit 2 ;;
    *) args+=("$arg") ;;
  esac
done
((${#args[@]})) || { echo "make_secrets: give init, token, revoke, tls or client (--help)" >&2; exit 2; }
command=${args[0]}

die() { echo "make_secrets: $*" >&2; exit 1; }
note() { echo "make_secrets: $*" >&2; }

setup_dir() {
  mkdir -p "$dir/okl"
  chmod 0700 "$dir"
  chmod 0755 "$dir/okl"  # the container's uid (10001) reads it through the mount
  [[ -f $dir/.gitignore ]] || printf '# made by deploy/make_secrets.sh: secrets are never committed\n*\n' >"$dir/.gitignore"
}

okl_cli() {
  if [[ -n ${OKL:-} ]]; then
    # shellcheck disable=SC2086  # $OKL is a command line
    $OKL "$@"
  elif command -v okl >/dev/null; then
    okl "$@"
  elif [[ -x $here/../build/release/client/okl ]]; then
    "$here/../build/release/client/okl" "$@"
  else
    local engine
    engine=$(command -v docker || command -v podman) \
      || die "no okl found: build it (scripts/build.sh), put it on PATH, or set OKL"
    "$engine" run --rm --network=none --entrypoint=okl "${OKL_IMAGE:-okl:latest}" "$@"
  fi
}

# Replaces DIR/okl/tokens with stdin, atomically, mode 0644.
write_tokens() {
  local tmp
  tmp=$(mktemp "$dir/okl/.tokens.XXXXXX")
  cat >"$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$dir/okl/tokens"
}

new_token() {  # NAME ROLE TENANTS
  local name=$1 out token line
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || die "a token's NAME is letters, digits, . _ - (got '$name')"
  [[ ! -e $dir/$name.token ]] || die "$dir/$name.token exists; revoke $name first, or pick another name"
  out=$(okl_cli token new --role="$2" ${3:+--tenants="$3"}) || die "okl token new failed"
  token=$(sed -n 1p <<<"$out")
  line=$(sed -n 2p <<<"$out")
  [[ $token == okl_* && $line =~ ^[0-9a-f]{64}\  ]] || die "unexpected output of okl token new"
  (umask 077; printf '%s\n' "$token" >"$dir/$name.token")
  { [[ -f $dir/okl/tokens ]] && cat "$dir/okl/tokens"; printf '%s  # %s\n' "$line" "$name"; } | write_tokens
  note "token '$name' ($2${3:+ on $3}) in $dir/$name.token; its line is in $dir/okl/tokens"
}

case $command in
  init)
    setup_dir
    [[ ! -e $dir/okl/tokens ]] || die "$dir/okl/tokens exists (add tokens with: $0 token NAME --role=...)"
    printf '%s\n' "# okl_server --auth_tokens_file: <sha256 of token> <read|write|admin> <tenants>" \
      "# Made by deploy/make_secrets.sh; after a change, SIGHUP okl_server." | write_tokens
    new_token admin admin ""
    note "next: mount $dir/okl at /etc/okl (read-only); use the token with OKL_TOKEN=\$(cat $dir/admin.token)"
    ;;
  token)
    ((${#args[@]} == 2)) || die "usage: $0 token NAME --role=read|write|admin [--tenants=a,b]"
    [[ -n $role ]] || die "--role is required"
    setup_dir
    [[ -f $dir/okl/tokens ]] || die "no $dir/okl/tokens yet: run $0 init first"
    new_token "${args[1]}" "$role" "$tenants"
    note "then reload: docker/podman kill --signal HUP <container> (Kubernetes: deploy/README.md)"
    ;;
  revoke)
    ((${#args[@]} == 2)) || die "usage: $0 revoke NAME"
    name=${args[1]}
    [[ -f $dir/okl/tokens ]] || die "no $dir/okl/tokens"
    # The lines that end in "  # NAME" (as `token` writes them).
    # shellcheck disable=SC2016  # awk's $0, not the shell's
    named='{ hit = length($0) >= length(s) && substr($0, length($0) - length(s) + 1) == s }'
    awk -v s="  # $name" "$named"' hit { found = 1 } END { exit !found }' "$dir/okl/tokens" \
      || die "no token named '$name' in $dir/okl/tokens"
    awk -v s="  # $name" "$named"' !hit' "$dir/okl/tokens" | write_tokens
    rm -f "$dir/$name.token"
    note "revoked '$name'; reload with SIGHUP for it to take effect"
    ;;
  tls)
    setup_dir
    command -v openssl >/dev/null || die "openssl is needed (apt-get install openssl)"
    mkdir -p "$dir/okl/tls"
    chmod 0755 "$dir/okl/tls"
    if [[ ! -f $dir/ca.key ]]; then
      # A CA of its own for okl (10 years), EC P-256.
      openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$dir/ca.key" -out "$dir/okl/tls/ca.crt" -days 3650 -subj "/CN=okl CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        2>/dev/null || die "openssl could not make the CA"
      chmod 0644 "$dir/okl/tls/ca.crt"
      note "new CA: $dir/okl/tls/ca.crt (key $dir/ca.key)"
    fi
    san="DNS:localhost,IP:127.0.0.1,DNS:okl"
    IFS=, read -ra extra <<<"$hosts"
    for h in "${extra[@]}"; do
      [[ -n $h ]] || continue
      if [[ $h =~ ^[0-9.]+$ || $h == *:* ]]; then san+=",IP:$h"; else san+=",DNS:$h"; fi
    done
    # The server's certificate, also valid as a client certificate (clientAuth), so that with
    # mutual TLS probes and the router can present it.
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$dir/okl/tls/.tls.key.new" -subj "/CN=okl" 2>/dev/null \
      | openssl x509 -req -CA "$dir/okl/tls/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
          -CAserial "$dir/ca.srl" -days "$days" -out "$dir/okl/tls/tls.crt" \
          -extfile <(printf '%s\n' "subjectAltName=$san" "basicConstraints=critical,CA:FALSE" \
                       "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth,clientAuth") \
          2>/dev/null || die "openssl could not make the server certificate"
    mv -f "$dir/okl/tls/.tls.key.new" "$dir/okl/tls/tls.key"
    chmod 0644 "$dir/okl/tls/tls.crt"
    if [[ $(id -u) -eq 0 ]]; then
      chown 10001:10001 "$dir/okl/tls/tls.key"
      chmod 0400 "$dir/okl/tls/tls.key"
    else
      chmod 0600 "$dir/okl/tls/tls.key"
      note "the container's uid 10001 must read $dir/okl/tls/tls.key: sudo chown 10001:10001 it" \
           "(rootless podman: podman unshare chown 10001:10001 it)"
    fi
    note "server certificate $dir/okl/tls/tls.crt for $san, $days days"
    ;;
  client)
    ((${#args[@]} == 2)) || die "usage: $0 client NAME"
    name=${args[1]}
    [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || die "NAME is letters, digits, . _ -"
    [[ -f $dir/ca.key ]] || die "no CA yet: run $0 tls first"
    mkdir -p "$dir/clients"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$dir/clients/$name.key" -subj "/CN=$name" 2>/dev/null \
      | openssl x509 -req -CA "$dir/okl/tls/ca.crt" -CAkey "$dir/ca.key" -CAserial "$dir/ca.srl" \
          -days "$days" -out "$dir/clients/$name.crt" \
          -extfile <(printf '%s\n' "basicConstraints=critical,CA:FALSE" \
                       "keyUsage=critical,digitalSignature" "extendedKeyUsage=clientAuth") \
          2>/dev/null || die "openssl could not make the client certificate"
    note "client certificate $dir/clients/$name.crt (key $dir/clients/$name.key):" \
         "okl --tls_ca=$dir/okl/tls/ca.crt --tls_cert=$dir/clients/$name.crt --tls_key=$dir/clients/$name.key"
    ;;
  *) die "unknown command '$command': init, token, revoke, tls or client (--help)" ;;
esac
