# okl_server and the okl tool in a slim Debian 12 image.
#
#   docker build -t okl .
#   bash deploy/make_secrets.sh init     # deploy/secrets/okl/tokens (+ deploy/secrets/admin.token)
#   docker run -d --name okl -p 127.0.0.1:50051:50051 -p 127.0.0.1:9464:9464 \
#     -v okl-data:/data -v "$PWD/deploy/secrets/okl:/etc/okl:ro" okl
#   OKL_TOKEN=$(cat deploy/secrets/admin.token) okl list        # calls need a token
#   docker exec okl okl health             # health needs none (so does the HEALTHCHECK)
#   docker kill --signal HUP okl           # re-read /etc/okl/tokens after editing it
#   docker stop -t 30 okl                  # SIGTERM: okl_server drains and exits 0
#
# Secure by default: okl_server serves 0.0.0.0 here, so the ENTRYPOINT requires bearer tokens
# from /etc/okl/tokens (mount a directory holding `tokens` there, read-only). Without that file
# it exits 1 saying so. Without authentication, for local experiments only, say it explicitly:
#   docker run --rm -p 127.0.0.1:50051:50051 okl --auth_tokens_file= --allow_unauthenticated
# TLS: mount the certificate and key too and add --tls_cert_file=/etc/okl/tls/tls.crt
# --tls_key_file=/etc/okl/tls/tls.key (deploy/README.md, "Security").
#
# Without a Docker daemon (this project's machines): deploy/container/build_image.sh builds
# this file with buildah from a debootstrapped Debian 12 base (BASE_IMAGE=localhost/okl-debian:12),
# and deploy/container/container_test.sh runs the image. See deploy/README.md.
#
# Build arguments:
#   BASE_IMAGE       the Debian 12 image both stages start from (default debian:12)
#   OKL_TARGET_ARCH  -march of the binaries (default x86-64-v3: AVX2 + FMA, ~2.5x faster kernel
#                    sweeps; x86-64 for a binary that must run on older CPUs)
#   OKL_JOBS         compile jobs in the build stage (default 2)
#   OKL_APT_REFRESH  any value; a new one installs both stages' packages afresh instead of
#                    reusing the layers of an earlier build (deploy/container/build_image.sh
#                    passes the ISO week, so a machine's layers take security updates weekly)
#
# The build stage compiles through ccache in a build cache mount (id okl-ccache: buildah
# keeps it in /var/tmp/buildah-cache/okl-ccache, Docker's BuildKit in its own cache; never
# in an image), so a rebuild after a one-file change compiles that file and links.
ARG BASE_IMAGE=debian:12

# ---- build stage: compilers and the -dev packages --------------------------------------------
FROM ${BASE_IMAGE} AS build
ARG OKL_APT_REFRESH=
# The packages of scripts/install_deps.sh that building okl_server and okl needs (no clang,
# GoogleTest, benchmark, Python or Prometheus: neither tests nor benchmarks are built here).
RUN echo "packages of ${OKL_APT_REFRESH:-any date}" \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config ccache mold \
      libabsl-dev libeigen3-dev \
      libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc \
      librocksdb-dev prometheus-cpp-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY core core
COPY proto proto
COPY client client
COPY server server
ARG OKL_TARGET_ARCH=x86-64-v3
ARG OKL_JOBS=2
# The cache is bounded at 1 GB; the stage prints its hits. The sloppiness lets ccache cache
# the files that start from precompiled headers (CMakeLists.txt, OKL_PCH).
RUN --mount=type=cache,id=okl-ccache,target=/ccache,sharing=locked \
    export CCACHE_DIR=/ccache CCACHE_MAXSIZE=1G CCACHE_SLOPPINESS=pch_defines,time_macros \
 && ccache --zero-stats >/dev/null \
 && cmake -S /src -B /build -G Ninja -Wno-dev \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DOKL_BUILD_BENCHMARKS=OFF -DOKL_BUILD_TESTS=OFF \
      -DOKL_TARGET_ARCH=${OKL_TARGET_ARCH} \
 && cmake --build /build -j ${OKL_JOBS} --target okl_server okl \
 && ccache --print-stats | awk '$1 ~ /^(direct|preprocessed)_cache_hit$/ { h += $2 } \
      $1 == "cache_miss" { m += $2 } END { printf "okl-ccache: %d of %d compiles cached\n", h, h + m }' \
 && install -D -m 0755 -s /build/server/okl_server /out/okl_server \
 && install -D -m 0755 -s /build/client/okl /out/okl

# ---- runtime stage: the shared libraries, the two binaries, a non-root user -----------------
FROM ${BASE_IMAGE}
ARG OKL_APT_REFRESH=
# No documentation, manual pages or translations from the packages installed here.
RUN printf '%s\n' 'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
      'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
      'path-exclude=/usr/share/locale/*' 'path-exclude=/usr/share/lintian/*' \
      >/etc/dpkg/dpkg.cfg.d/okl-slim \
 && echo "packages of ${OKL_APT_REFRESH:-any date}" \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libsnappy1v5 liblz4-1 libzstd1 libbz2-1.0 zlib1g \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
RUN groupadd --gid 10001 okl \
 && useradd --uid 10001 --gid okl --home-dir /data --no-create-home --no-log-init \
      --shell /usr/sbin/nologin okl \
 && mkdir -p /data && chown okl:okl /data && chmod 0750 /data \
 && install -d -m 0755 /etc/okl
COPY --from=build /out/okl_server /out/okl /usr/local/bin/
# Every shared library the binaries need is in the image, and the HEALTHCHECK's command exists.
RUN if ldd /usr/local/bin/okl_server /usr/local/bin/okl | grep 'not found'; then \
      echo 'missing shared libraries (above)' >&2; exit 1; fi \
 && okl_server --version >/dev/null && okl help health >/dev/null

USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
# 50051: gRPC (okl.v1.OnlineKernelLearning, grpc.health.v1, reflection); 9464: /metrics
EXPOSE 50051 9464
# okl_server drains on SIGTERM (health NOT_SERVING, new calls UNAVAILABLE, calls in flight get
# --shutdown_grace, default 10 s) and exits 0; SIGHUP re-reads --auth_tokens_file (a broken
# file keeps the previous tokens). It is PID 1 here (exec form, no shell): it blocks
# SIGTERM/SIGINT/SIGHUP and takes them with sigwait(), which works for PID 1 too. Give
# `docker stop` more than --shutdown_grace (e.g. -t 30) so that it does not SIGKILL a drain.
STOPSIGNAL SIGTERM
# grpc.health.v1 needs no token. With TLS on the gRPC port, replace this check (plaintext) with
# `okl health --server=127.0.0.1:50051 --tls_ca=/etc/okl/tls/ca.crt` (see deploy/README.md).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["okl", "health", "--server=127.0.0.1:50051", "--timeout=2s"]
# Arguments after the image name are added to these flags (a later one wins).
ENTRYPOINT ["okl_server", "--listen=0.0.0.0:50051", "--metrics_address=0.0.0.0:9464", \
            "--data_dir=/data", "--auth_tokens_file=/etc/okl/tokens"]
