#!/usr/bin/env bash
# Builds okl's container image from the repository's Dockerfile without a Docker daemon or a
# registry, as root on a Debian 12 machine:
#   1. a Debian 12 base image: debootstrap (minbase) from the apt mirror this machine is
#      configured with, `podman import`ed as $OKL_BASE_IMAGE (default localhost/okl-debian:12).
#      Skipped when that image is already in podman's store: the base is built once per machine.
#   2. `buildah bud --pull=never --isolation=chroot --network=host --layers --format docker`
#      with BASE_IMAGE=$OKL_BASE_IMAGE, tagged $OKL_IMAGE (default localhost/okl:latest).
#      --layers reuses unchanged steps of earlier builds; --format docker keeps the HEALTHCHECK
#      (the OCI format has no field for it). The build stage compiles through ccache in a
#      cache mount (the Dockerfile's okl-ccache, kept by buildah in /var/tmp/buildah-cache/).
#      OKL_APT_REFRESH (default: this ISO week, e.g. 2026-W49) is a build argument of both
#      stages' package layers: a new value installs the packages afresh, so the cached layers
#      take Debian's security updates once a week. The debootstrapped base itself is kept
#      until OKL_REBUILD_BASE=1.
# Environment: OKL_BASE_IMAGE, OKL_IMAGE, OKL_JOBS (compile jobs in the build stage; default
# nproc), OKL_DEBIAN_MIRROR (overrides the mirror read from /etc/apt/sources*),
# OKL_REBUILD_BASE=1 (debootstrap the base again even if it exists), OKL_APT_REFRESH.
set -euo pipefail
cd "$(dirname "$0")/../.."

base=${OKL_BASE_IMAGE:-localhost/okl-debian:12}
image=${OKL_IMAGE:-localhost/okl:latest}
jobs=${OKL_JOBS:-$(nproc)}
apt_refresh=${OKL_APT_REFRESH:-$(date -u +%G-W%V)}

log() { echo "build_image: $*" >&2; }
die() { echo "build_image: ERROR: $*" >&2; exit 1; }
base_tmp=""
trap '[[ -z $base_tmp ]] || rm -rf "$base_tmp"' EXIT

[[ $(id -u) -eq 0 ]] || die "run as root (debootstrap and buildah's chroot isolation need it)"
bash deploy/container/install_container_deps.sh

# Prints the URI of every Debian source on this machine, one per line, as "URI SUITE...":
# deb822 files (*.sources) and one-line files (sources.list, *.list). Disabled entries and
# files with other extensions are skipped.
apt_sources() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk 'BEGIN { RS=""; FS="\n" }
         { uris=""; suites=""; enabled=1; types="";
           for (i = 1; i <= NF; i++) {
             if ($i ~ /^URIs:/)    { uris = substr($i, 6) }
             if ($i ~ /^Suites:/)  { suites = substr($i, 8) }
             if ($i ~ /^Types:/)   { types = substr($i, 7) }
             if ($i ~ /^Enabled:[ \t]*no/) { enabled = 0 }
           }
           if (enabled && types ~ /(^|[ \t])deb([ \t]|$)/) {
             n = split(uris, u, /[ \t]+/);
             for (j = 1; j <= n; j++) if (u[j] != "") print u[j], suites
           } }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    # deb [options] URI SUITE COMPONENTS...
    sed -E -n 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+([^[:space:]]+).*/\2 \3/p' "$f"
  done
}

build_base() {
  local mirror security="" rootfs tmp
  local sources
  sources=$(apt_sources)
  mirror=${OKL_DEBIAN_MIRROR:-$(awk '{ for (i = 2; i <= NF; i++) if ($i == "bookworm") { print $1; exit } }' <<<"$sources")}
  [[ -n $mirror ]] || die "no apt source serves Debian 12 (bookworm) in /etc/apt/sources*; set OKL_DEBIAN_MIRROR"
  security=$(awk '{ for (i = 2; i <= NF; i++) if ($i == "bookworm-security") { print $1; exit } }' <<<"$sources")
  tmp=$(mktemp -d /var/tmp/okl-base.XXXXXX)
  base_tmp=$tmp  # removed on exit, also when a step fails
  rootfs=$tmp/rootfs
  log "debootstrap Debian 12 (minbase) from $mirror into $rootfs"
  local t0=$SECONDS
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 \
    || { tail -n 30 "$tmp/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  log "debootstrap took $((SECONDS - t0)) s"

  # The image's apt sources: the same mirror (and security mirror, if this machine has one),
  # in the deb822 form Debian's own debian:12 image uses.
  rm -f "$rootfs/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\n' "$mirror"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    if [[ -n $security ]]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n' "$security"
      printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
  } >"$rootfs/etc/apt/sources.list.d/debian.sources"
  # As in Debian's docker images: no package cache kept, no recommends by default.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    >"$rootfs/etc/apt/apt.conf.d/99okl-no-recommends"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/run/*
  : >"$rootfs/etc/hostname"
  log "podman import as $base"
  tar --numeric-owner --xattrs -C "$rootfs" -c . \
    | podman import --change 'CMD ["/bin/bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --message "Debian 12 minbase, debootstrapped from $mirror" - "$base" >/dev/null \
    || die "podman import failed"
}

if [[ ${OKL_REBUILD_BASE:-0} == 1 ]] && podman image exists "$base"; then
  podman rmi -f "$base" >/dev/null
fi
if podman image exists "$base"; then
  log "base image $base is in podman's store; not debootstrapping"
else
  build_base
fi

log "buildah bud -> $image (BASE_IMAGE=$base, OKL_JOBS=$jobs, OKL_APT_REFRESH=$apt_refresh)"
t0=$SECONDS
buildah bud --pull=never --isolation=chroot --network=host --layers --force-rm --format docker \
  --build-arg BASE_IMAGE="$base" --build-arg OKL_JOBS="$jobs" \
  --build-arg OKL_APT_REFRESH="$apt_refresh" \
  -t "$image" -f Dockerfile . \
  || die "buildah bud failed (the failing step is above)"
log "buildah bud took $((SECONDS - t0)) s"
podman image inspect "$image" --format '{{.Id}} {{.Size}}' \
  | awk -v img="$image" '{ printf "build_image: %s: id %.12s, %.1f MB\n", img, $1, $2 / 1e6 }' >&2
# Older builds' untagged images (earlier layer caches) would pile up run after run: drop those
# older than a day; the newest build's layers stay for the next run.
podman image prune -f --filter until=24h >/dev/null 2>&1 || true
