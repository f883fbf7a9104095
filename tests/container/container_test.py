#!/usr/bin/python3
"""Drives okl's container image with podman: the image's contract, then the server in it.

Run by deploy/container/container_test.sh (after build_image.sh) with Debian's
/usr/bin/python3 (python3-grpcio, python3-protobuf), as root:

  container_test.py --image=localhost/okl:latest --protoc=/usr/bin/protoc \
      --grpc_python_plugin=/usr/bin/grpc_python_plugin --proto_dir=proto \
      --make_secrets=deploy/make_secrets.sh

What it checks, in order (each step says what failed and shows the server's log):
  1. the image: non-root user, /data a volume, ports 50051 and 9464 exposed, the entrypoint's
     flags (0.0.0.0, --auth_tokens_file=/etc/okl/tokens), a HEALTHCHECK running `okl health`,
     SIGTERM as stop signal; no compiler and no -dev package inside; every shared library of
     okl_server and okl resolves (ldd).
  2. secure by default: without a tokens file the image's server exits 1 naming it; with
     --auth_tokens_file= alone it exits 1 asking for --allow_unauthenticated.
  3. the secrets of deploy/make_secrets.sh (tokens made by the image's own `okl token new`)
     mounted read-only at /etc/okl; a container on a bridge network with both ports published
     on free loopback ports and a host directory (owned by the image's uid) at /data:
     okl_server is PID 1; calls without a token or with an unknown one get UNAUTHENTICATED,
     grpc.health.v1 answers SERVING without one; a write token for one tenant gets
     PERMISSION_DENIED elsewhere and lists only its tenant; with the admin token CreateModel,
     Observe (unary and stream), Predict, ListModels; the image's HEALTHCHECK passes
     (`podman healthcheck run`, no token); /metrics scraped over the published port shows the
     per-model series with the right values.
  4. rotation: a token added and one revoked (make_secrets.sh rewrites the file), then
     `podman kill --signal HUP`: the new token works and the revoked one is UNAUTHENTICATED; a
     broken file and SIGHUP keep the previous tokens in force. No token in the server's log.
  5. `podman stop` (SIGTERM): okl_server drains and the container exits 0.
  6. a new container on the same /data: the same models come back, GetModel's stats equal and
     Predict answers bit-for-bit the same; the store is writable again; a second stop exits 0.
  7. `--auth_tokens_file= --allow_unauthenticated`: calls without a token succeed.
  8. TLS (make_secrets.sh tls): TLS calls with the token succeed, plaintext ones fail, and the
     documented TLS health check (`okl health --tls_ca=...`, compose and Kubernetes) passes as
     the container's health command; mutual TLS: no client certificate, no connection; with
     the one make_secrets.sh client makes, calls and `okl health --tls_cert/--tls_key` work.
The containers and the directories are removed on exit, also on failure or a signal.
"""

import argparse
import atexit
import collections
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ARGS = None
READY_TIMEOUT_S = 60.0
RPC_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30  # podman stop -t: more than okl_server's --shutdown_grace (10 s)
PODMAN_TIMEOUT_S = 120
# podman as root would set RLIMIT_NOFILE/NPROC to values above what this machine's hard limits
# allow (runc then fails with EPERM): the container gets explicit, modest limits.
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=16384:16384"]
# Where the image's ENTRYPOINT reads its tokens (--auth_tokens_file), and the directory that
# deploy/make_secrets.sh makes to be mounted there.
SECRETS_MOUNT = "/etc/okl"
TOKENS_PATH = SECRETS_MOUNT + "/tokens"
TLS_HEALTH = ["okl", "health", "--server=127.0.0.1:50051", "--timeout=2s",
              "--tls_ca=/etc/okl/tls/ca.crt"]

containers = []  # names to remove on exit
tmp_dirs = []


class TestFailure(Exception):
    pass


def log(message):
    print("container_test: " + message, flush=True)


def podman(*args, check=True, timeout=PODMAN_TIMEOUT_S):
    """Runs podman; returns stdout. podman's systemd health-timer complaints are dropped
    (this machine has no systemd; `podman healthcheck run` works without it)."""
    cmd = ["podman"] + list(args)
    try:
        result = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TestFailure("timed out after %ss: %s" % (timeout, " ".join(cmd)))
    stderr = "\n".join(line for line in result.stderr.splitlines()
                       if "unable to get systemd connection" not in line)
    if check and result.returncode != 0:
        raise TestFailure("%s exited %d:\n%s%s" % (" ".join(cmd), result.returncode,
                                                   result.stdout, stderr))
    return result.stdout if check else (result.returncode, result.stdout, stderr)


def cleanup():
    for name in containers:
        subprocess.run(["podman", "rm", "-f", "-v", "-t", "0", name], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    for path in tmp_dirs:
        shutil.rmtree(path, ignore_errors=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def container_log(name):
    code, out, err = podman("logs", name, check=False)
    text = (out + err).strip()
    return "--- log of container %s ---\n%s\n---" % (name, text[-6000:] or "(empty)")


def expect(condition, message, name=None):
    if not condition:
        raise TestFailure(message + ("\n" + container_log(name) if name else ""))


# --- 1. the image ---------------------------------------------------------------------------

def check_image():
    info = json.loads(podman("image", "inspect", ARGS.image))[0]
    config = info.get("Config") or {}
    size_mb = info.get("Size", 0) / 1e6
    log("image %s: %.1f MB, id %s" % (ARGS.image, size_mb, info["Id"][:12]))

    user = config.get("User", "")
    uid = user.split(":")[0]
    expect(uid.isdigit() and int(uid) != 0,
           "the image's USER must be a numeric non-root uid, got %r" % user)
    expect("/data" in (config.get("Volumes") or {}),
           "/data is not a VOLUME: %r" % config.get("Volumes"))
    ports = set(config.get("ExposedPorts") or {})
    expect({"50051/tcp", "9464/tcp"} <= ports, "EXPOSE lacks 50051 or 9464: %r" % ports)
    entrypoint = config.get("Entrypoint") or []
    expect(entrypoint[:1] == ["okl_server"]
           and {"--listen=0.0.0.0:50051", "--metrics_address=0.0.0.0:9464",
                "--data_dir=/data", "--auth_tokens_file=" + TOKENS_PATH} <= set(entrypoint),
           "unexpected ENTRYPOINT (exec form with okl_server and its flags): %r" % entrypoint)
    expect(not any(a.startswith("--allow_unauthenticated") for a in entrypoint)
           and not config.get("Cmd"),
           "the image must not turn authentication off by itself: ENTRYPOINT %r, CMD %r"
           % (entrypoint, config.get("Cmd")))
    # podman shows the docker-format image's HEALTHCHECK beside Config, docker inside it.
    health = (info.get("Healthcheck") or config.get("Healthcheck") or {}).get("Test") or []
    expect(health[:3] == ["CMD", "okl", "health"],
           "HEALTHCHECK is not `okl health ...` (built with --format docker?): %r" % health)
    expect(config.get("StopSignal") in ("SIGTERM", "15", "TERM"),
           "STOPSIGNAL is %r, not SIGTERM" % config.get("StopSignal"))

    probe = podman("run", "--rm", *ULIMITS, "--network=none", "--entrypoint=/bin/sh",
                   ARGS.image, "-c",
                   "for c in cc gcc g++ c++ clang cmake ninja make ld as; do "
                   "  command -v $c; done; "
                   "dpkg-query -W -f='${Package}\\n' | grep -E "
                   "  -e '-dev$' -e '^(gcc|g\\+\\+|cpp|clang|binutils|cmake)(-[0-9.]+)?$' "
                   "  || true; echo ---; "
                   "ldd /usr/local/bin/okl_server /usr/local/bin/okl | grep 'not found' || true; "
                   "echo ---; okl help 2>&1 || true")
    tools, missing, okl_help = probe.split("---\n")
    expect(not tools.strip(), "the runtime image has build tools or -dev packages:\n" + tools)
    expect(not missing.strip(), "shared libraries missing in the image:\n" + missing)
    expect("health" in okl_help,
           "the image's `okl` has no `health` command, so its HEALTHCHECK can never pass:\n"
           + okl_help)
    return int(uid)


# --- gRPC ------------------------------------------------------------------------------------

def load_stubs():
    generated = tempfile.mkdtemp(prefix="okl_container_test.stubs.")
    tmp_dirs.append(generated)
    subprocess.run([ARGS.protoc, "--python_out=" + generated, "--grpc_python_out=" + generated,
                    "--plugin=protoc-gen-grpc_python=" + ARGS.grpc_python_plugin,
                    "-I" + ARGS.proto_dir, "okl/v1/okl.proto"], check=True, timeout=60)
    sys.path.insert(0, generated)
    global grpc, okl_pb2, okl_pb2_grpc
    import grpc  # noqa: F401 (Debian's python3-grpcio)
    from okl.v1 import okl_pb2, okl_pb2_grpc  # noqa: F401


def ref(tenant, model):
    return okl_pb2.ModelRef(tenant=tenant, model=model)


def regression_config():
    return okl_pb2.ModelConfig(
        dim=3,
        kernel=okl_pb2.KernelConfig(gaussian=okl_pb2.KernelConfig.Gaussian(gamma=0.5)),
        loss=okl_pb2.LossConfig(squared=okl_pb2.LossConfig.Squared()),
        learning_rate=okl_pb2.LearningRate(eta0=0.3, schedule=okl_pb2.LearningRate.CONSTANT),
        budget=okl_pb2.Budget(max_terms=64, policy=okl_pb2.Budget.OLDEST),
        offset=True,
        **{"lambda": 0.01})


def classification_config():
    return okl_pb2.ModelConfig(
        dim=2,
        kernel=okl_pb2.KernelConfig(gaussian=okl_pb2.KernelConfig.Gaussian(gamma=1.0)),
        loss=okl_pb2.LossConfig(hinge=okl_pb2.LossConfig.Hinge(rho=1.0)),
        learning_rate=okl_pb2.LearningRate(eta0=0.5,
                                           schedule=okl_pb2.LearningRate.INVERSE_SQRT),
        budget=okl_pb2.Budget(max_terms=100, policy=okl_pb2.Budget.SMALLEST),
        **{"lambda": 0.01})


def regression_rows(count, start=0):
    rows = []
    for t in range(start, start + count):
        x = [math.sin(0.1 * t), math.cos(0.07 * t), ((t * 37) % 101) / 101.0]
        rows.append((x, math.sin(x[0] + 2 * x[1]) + 0.5 * x[2]))
    return rows


def classification_rows(count):
    rows = []
    for t in range(count):
        x = [math.sin(0.3 * t), math.cos(0.11 * t)]
        rows.append((x, 1.0 if x[0] * x[1] > 0 else -1.0))
    return rows


def examples(rows):
    return [okl_pb2.Example(x=okl_pb2.Vector(values=x), y=y) for x, y in rows]


PROBES_REGRESSION = [[0.1 * i, -0.05 * i, 0.3] for i in range(10)]
PROBES_CLASSIFICATION = [[0.2 * i - 1, 0.9 - 0.2 * i] for i in range(10)]


def bearer(token):
    """A client interceptor adding `authorization: Bearer TOKEN` to every call."""

    class CallDetails(collections.namedtuple(
            "CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                            "compression")), grpc.ClientCallDetails):
        pass

    class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.StreamUnaryClientInterceptor):
        def _details(self, d):
            metadata = list(d.metadata or []) + [("authorization", "Bearer " + token)]
            return CallDetails(d.method, d.timeout, metadata, d.credentials,
                               getattr(d, "wait_for_ready", None),
                               getattr(d, "compression", None))

        def intercept_unary_unary(self, continuation, details, request):
            return continuation(self._details(details), request)

        def intercept_stream_unary(self, continuation, details, requests):
            return continuation(self._details(details), requests)

    return Bearer()


def health_check(channel):
    """grpc.health.v1.Health/Check of the whole server, with no token: True if SERVING."""
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    return check(b"", timeout=RPC_TIMEOUT_S) == b"\x08\x01"  # {status: SERVING}


def expect_code(call, code, what, name=None):
    try:
        call()
    except grpc.RpcError as e:
        expect(e.code() == code, "%s: %s (%s), want %s" % (what, e.code(), e.details(), code),
               name)
        return e
    raise TestFailure("%s succeeded, want %s" % (what, code)
                      + ("\n" + container_log(name) if name else ""))


class Server:
    """One container of the image, its ports published on free loopback ports.

    secrets: a directory made by deploy/make_secrets.sh, mounted read-only at /etc/okl;
    token: sent by self.stub with every call (self.bare sends none); tls: (ca, cert, key) PEM
    bytes for a TLS channel (cert and key None without mutual TLS)."""

    def __init__(self, name, data_dir, secrets=None, args=(), token=None, tls=None,
                 health_cmd=None):
        self.name = name
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        containers.append(name)
        options = ["-v", "%s:/data" % data_dir]
        if secrets:
            options += ["-v", "%s:%s:ro" % (secrets, SECRETS_MOUNT)]
        if health_cmd:
            options += ["--health-cmd", json.dumps(health_cmd)]
        podman("run", "-d", "--name", name, *ULIMITS,
               "-p", "127.0.0.1:%d:50051" % self.grpc_port,
               "-p", "127.0.0.1:%d:9464" % self.metrics_port,
               *options, ARGS.image, *args)
        self.channel = self.open_channel(tls)
        self.bare = okl_pb2_grpc.OnlineKernelLearningStub(self.channel)
        self.stub = self.with_token(token) if token else self.bare
        self.wait_ready()

    def open_channel(self, tls):
        target = "127.0.0.1:%d" % self.grpc_port
        if not tls:
            return grpc.insecure_channel(target)
        ca, cert, key = tls
        return grpc.secure_channel(target, grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert))

    def with_token(self, token):
        return okl_pb2_grpc.OnlineKernelLearningStub(
            grpc.intercept_channel(self.channel, bearer(token)))

    def state(self):
        return json.loads(podman("inspect", self.name))[0]["State"]

    def wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = None
        while time.monotonic() < deadline:
            state = self.state()
            expect(state.get("Running"), "container %s stopped while starting (exit code %s)"
                   % (self.name, state.get("ExitCode")), self.name)
            try:
                self.stub.ListModels(okl_pb2.ListModelsRequest(), timeout=2)
                return
            except grpc.RpcError as e:
                last = e
            time.sleep(0.2)
        raise TestFailure("okl_server in %s did not answer ListModels on 127.0.0.1:%d in %ss "
                          "(last: %s)\n%s" % (self.name, self.grpc_port, READY_TIMEOUT_S, last,
                                              container_log(self.name)))

    def log(self):
        code, out, err = podman("logs", self.name, check=False)
        return out + err

    def sighup(self):
        """podman kill --signal HUP; returns the server's log lines about it."""
        before = self.log().count("okl_server: SIGHUP:")
        podman("kill", "--signal", "HUP", self.name)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lines = [l for l in self.log().splitlines() if "okl_server: SIGHUP:" in l]
            if len(lines) > before:
                return lines[before:]
            time.sleep(0.1)
        raise TestFailure("okl_server in %s logged nothing about SIGHUP in 10 s\n%s"
                          % (self.name, container_log(self.name)))

    def metrics(self):
        url = "http://127.0.0.1:%d/metrics" % self.metrics_port
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.read().decode()
        except OSError as e:
            raise TestFailure("scraping %s failed: %s\n%s" % (url, e, container_log(self.name)))

    def stop(self):
        """podman stop (the image's STOPSIGNAL, SIGTERM); okl_server must drain and exit 0."""
        self.channel.close()
        started = time.monotonic()
        podman("stop", "-t", str(STOP_TIMEOUT_S), self.name, timeout=STOP_TIMEOUT_S + 60)
        seconds = time.monotonic() - started
        state = self.state()
        output = container_log(self.name)
        expect(state.get("ExitCode") == 0 and not state.get("OOMKilled"),
               "okl_server in %s exited %s on SIGTERM (want 0)" % (self.name,
                                                                   state.get("ExitCode")),
               self.name)
        expect("draining" in output and "stopped" in output,
               "okl_server's log does not show a drain on SIGTERM", self.name)
        log("%s: stopped by SIGTERM in %.1f s, exit code 0" % (self.name, seconds))


def metric_value(text, name, labels):
    """The value of the sample `name{labels...}` in a Prometheus exposition, or None."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        head, _, value = line.rpartition(" ")
        if all('%s="%s"' % (k, v) in head for k, v in labels.items()):
            return float(value)
    return None


def predictions(stub, r, probes):
    return list(stub.Predict(okl_pb2.PredictRequest(
        ref=r, inputs=[okl_pb2.Vector(values=x) for x in probes]),
        timeout=RPC_TIMEOUT_S).predictions)


def stats(stub, r):
    s = stub.GetModel(r, timeout=RPC_TIMEOUT_S).stats
    return (s.steps, s.expansion_size, s.cumulative_loss, s.mistakes, s.truncation_error_bound)


# --- secrets ---------------------------------------------------------------------------------

def make_secrets(directory, *args):
    """deploy/make_secrets.sh --dir=DIRECTORY ARGS..., with the image's own `okl token new`."""
    env = dict(os.environ)
    env["OKL"] = " ".join(["podman", "run", "--rm", "--network=none", *ULIMITS,
                           "--entrypoint=okl", ARGS.image])
    result = subprocess.run(["bash", ARGS.make_secrets, "--dir=" + directory] + list(args),
                            stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=PODMAN_TIMEOUT_S, env=env)
    if result.returncode != 0:
        raise TestFailure("make_secrets.sh %s exited %d:\n%s%s" % (
            " ".join(args), result.returncode, result.stdout, result.stderr))


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def replace_file(path, text):
    """Replaces `path` by a rename, as make_secrets.sh, editors and the kubelet do."""
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def new_data_dir(uid):
    path = tempfile.mkdtemp(prefix="okl_container_test.data.", dir=ARGS.tmp_dir)
    tmp_dirs.append(path)
    os.chown(path, uid, uid)
    os.chmod(path, 0o750)
    return path


# --- 2. secure by default --------------------------------------------------------------------

def check_secure_defaults(tag):
    """The image's server does not start unauthenticated by accident."""
    for suffix, args, wants in [
            ("no-tokens", [], [TOKENS_PATH, "--auth_tokens_file"]),
            ("no-auth", ["--auth_tokens_file="], ["--allow_unauthenticated"])]:
        name = "okl-container-test-%s-%s" % (tag, suffix)
        containers.append(name)
        podman("run", "-d", "--name", name, *ULIMITS, "--network=none", ARGS.image,
               "--data_dir=", *args)
        code = podman("wait", name).strip()
        text = container_log(name)
        expect(code == "1" and all(want in text for want in wants),
               "okl_server in the image with %r and no tokens file mounted: exit code %s, want "
               "1 with a message naming %s" % (args, code, " and ".join(wants)), name)
    log("without a tokens file at %s the server exits 1 saying so; --auth_tokens_file= alone "
        "exits 1 asking for --allow_unauthenticated" % TOKENS_PATH)


# --- 3.-6. the server in the container, with tokens -----------------------------------------

def run_server_checks(uid, tag, secrets):
    data_dir = new_data_dir(uid)
    mount = os.path.join(secrets, "okl")
    make_secrets(secrets, "init")
    make_secrets(secrets, "token", "acme-writer", "--role=write", "--tenants=acme")
    admin = read(os.path.join(secrets, "admin.token")).strip()
    writer = read(os.path.join(secrets, "acme-writer.token")).strip()
    tokens = [admin, writer]
    log("tokens file from make_secrets.sh (the image's `okl token new`): %d lines"
        % sum(1 for l in read(os.path.join(mount, "tokens")).splitlines()
              if l and not l.startswith("#")))

    server = Server("okl-container-test-%s-a" % tag, data_dir, secrets=mount, token=admin)
    top = podman("top", server.name, "pid", "user", "args")
    pid1 = [line.split() for line in top.splitlines()[1:] if line.split()[:1] == ["1"]]
    expect(pid1 and pid1[0][2] == "okl_server" and pid1[0][1] != "root",
           "okl_server is not PID 1 as a non-root user in the container:\n" + top, server.name)
    log("%s: okl_server is PID 1 (user %s), gRPC on 127.0.0.1:%d, metrics on 127.0.0.1:%d"
        % (server.name, pid1[0][1], server.grpc_port, server.metrics_port))

    # Authentication: nothing without a valid token, except health.
    expect_code(lambda: server.bare.ListModels(okl_pb2.ListModelsRequest(),
                                               timeout=RPC_TIMEOUT_S),
                grpc.StatusCode.UNAUTHENTICATED, "ListModels without a token", server.name)
    expect_code(lambda: server.bare.CreateModel(okl_pb2.CreateModelRequest(
                    ref=ref("acme", "x"), config=regression_config()), timeout=RPC_TIMEOUT_S),
                grpc.StatusCode.UNAUTHENTICATED, "CreateModel without a token", server.name)
    unknown = "okl_" + "A" * 43
    expect_code(lambda: server.with_token(unknown).ListModels(okl_pb2.ListModelsRequest(),
                                                              timeout=RPC_TIMEOUT_S),
                grpc.StatusCode.UNAUTHENTICATED, "ListModels with an unknown token",
                server.name)
    expect(health_check(server.channel),
           "grpc.health.v1 Check without a token did not answer SERVING", server.name)
    log("without a token or with an unknown one: UNAUTHENTICATED; health without one: SERVING")

    stub = server.stub
    reg, cls = ref("acme", "demand"), ref("globex", "fraud")
    info = stub.CreateModel(okl_pb2.CreateModelRequest(ref=reg, config=regression_config()),
                            timeout=RPC_TIMEOUT_S)
    expect(info.stats.steps == 0, "CreateModel: a new model has %d steps" % info.stats.steps)
    stub.CreateModel(okl_pb2.CreateModelRequest(ref=cls, config=classification_config()),
                     timeout=RPC_TIMEOUT_S)
    expect_code(lambda: stub.CreateModel(okl_pb2.CreateModelRequest(
                    ref=reg, config=regression_config()), timeout=RPC_TIMEOUT_S),
                grpc.StatusCode.ALREADY_EXISTS, "a second CreateModel of acme/demand")

    rows = regression_rows(300)
    first = stub.Observe(okl_pb2.ObserveRequest(ref=reg, examples=examples(rows[:100])),
                         timeout=RPC_TIMEOUT_S)
    expect(first.steps == 100 and len(first.predictions) == 100,
           "Observe: steps %d, %d predictions" % (first.steps, len(first.predictions)))

    def stream():
        for start in range(100, 300, 50):
            request = okl_pb2.ObserveRequest(examples=examples(rows[start:start + 50]))
            if start == 100:
                request.ref.CopyFrom(reg)
            yield request
    second = stub.ObserveStream(stream(), timeout=RPC_TIMEOUT_S)
    expect(second.steps == 300, "ObserveStream: steps %d, want 300" % second.steps)
    losses = list(first.losses) + list(second.losses)
    early, late = sum(losses[:50]) / 50, sum(losses[-50:]) / 50
    expect(late < early, "no learning: mean loss %g first, %g last" % (early, late))
    stub.Observe(okl_pb2.ObserveRequest(ref=cls, examples=examples(classification_rows(150))),
                 timeout=RPC_TIMEOUT_S)

    before = {
        "reg": (stats(stub, reg), predictions(stub, reg, PROBES_REGRESSION)),
        "cls": (stats(stub, cls), predictions(stub, cls, PROBES_CLASSIFICATION)),
    }
    expect(before["reg"][0][0] == 300 and before["cls"][0][0] == 150,
           "GetModel steps %d and %d, want 300 and 150" % (before["reg"][0][0],
                                                          before["cls"][0][0]))
    listed = stub.ListModels(okl_pb2.ListModelsRequest(), timeout=RPC_TIMEOUT_S)
    names = sorted((m.ref.tenant, m.ref.model) for m in listed.models)
    expect(names == [("acme", "demand"), ("globex", "fraud")], "ListModels: %r" % names)
    log("with the admin token: CreateModel, Observe, ObserveStream, Predict, GetModel, "
        "ListModels ok (acme/demand: 300 steps, mean loss %.4f -> %.4f)" % (early, late))

    # A write token for tenant acme: acme's models only.
    acme = server.with_token(writer)
    expect(stats(acme, reg) == before["reg"][0], "GetModel acme/demand with acme's token")
    listed = acme.ListModels(okl_pb2.ListModelsRequest(), timeout=RPC_TIMEOUT_S)
    names = sorted((m.ref.tenant, m.ref.model) for m in listed.models)
    expect(names == [("acme", "demand")], "ListModels with acme's token: %r" % names)
    expect_code(lambda: acme.GetModel(cls, timeout=RPC_TIMEOUT_S),
                grpc.StatusCode.PERMISSION_DENIED, "GetModel globex/fraud with acme's token",
                server.name)
    expect_code(lambda: acme.CreateModel(okl_pb2.CreateModelRequest(
                    ref=ref("globex", "x"), config=regression_config()), timeout=RPC_TIMEOUT_S),
                grpc.StatusCode.PERMISSION_DENIED, "CreateModel for globex with acme's token",
                server.name)
    log("a write token for acme: acme's model, ListModels shows acme only, PERMISSION_DENIED "
        "on globex")

    # The image's HEALTHCHECK, run by podman as the engine would: `okl health`, no token.
    code, out, err = podman("healthcheck", "run", server.name, check=False)
    expect(code == 0, "the image's HEALTHCHECK failed (exit %d): %s %s" % (code, out, err),
           server.name)
    log("HEALTHCHECK (okl health, no token): healthy")

    text = server.metrics()
    for name, labels, want in [
            ("okl_model_steps_total", {"tenant": "acme", "model": "demand"}, 300),
            ("okl_model_steps_total", {"tenant": "globex", "model": "fraud"}, 150),
            ("okl_model_expansion_size", {"tenant": "acme", "model": "demand"},
             before["reg"][0][1]),
            ("okl_models", {}, 2),
            ("okl_build_info", {}, 1),
            ("okl_rpc_requests_total", {"method": "CreateModel", "code": "ALREADY_EXISTS"}, 1),
            ("process_max_fds", {}, 20000)]:
        got = metric_value(text, name, labels)
        expect(got == want, "/metrics: %s%s is %s, want %s" % (name, labels, got, want),
               server.name)
    loss = metric_value(text, "okl_model_loss_total", {"tenant": "acme", "model": "demand"})
    expect(loss is not None and math.isclose(loss, before["reg"][0][2], rel_tol=1e-9),
           "/metrics: okl_model_loss_total %s, GetModel's cumulative_loss %s"
           % (loss, before["reg"][0][2]), server.name)
    log("/metrics on the published port: per-model series match GetModel")

    # 4. Rotation: add a token, revoke one, SIGHUP; then a broken file, SIGHUP.
    make_secrets(secrets, "token", "rotated", "--role=read", "--tenants=acme,globex")
    make_secrets(secrets, "revoke", "acme-writer")
    rotated = read(os.path.join(secrets, "rotated.token")).strip()
    tokens.append(rotated)
    lines = server.sighup()
    expect("re-read --auth_tokens_file" in lines[-1],
           "SIGHUP after rotating the tokens: %r" % lines, server.name)
    expect(stats(server.with_token(rotated), cls) == before["cls"][0],
           "GetModel globex/fraud with the token added before SIGHUP", server.name)
    expect_code(lambda: server.with_token(writer).GetModel(reg, timeout=RPC_TIMEOUT_S),
                grpc.StatusCode.UNAUTHENTICATED, "GetModel with the token revoked before SIGHUP",
                server.name)
    tokens_file = os.path.join(mount, "tokens")
    good = read(tokens_file)
    replace_file(tokens_file, good + "not-a-sha256 write acme\n")
    broken = server.sighup()
    expect("previous tokens stay in force" in broken[-1],
           "SIGHUP with a broken tokens file: %r" % broken, server.name)
    expect(stats(server.with_token(rotated), cls) == before["cls"][0],
           "the previous tokens after a SIGHUP with a broken file", server.name)
    replace_file(tokens_file, good)
    lines = server.sighup()
    expect("re-read --auth_tokens_file" in lines[-1], "SIGHUP: %r" % lines, server.name)
    log("podman kill --signal HUP: a new token works, the revoked one is UNAUTHENTICATED; a "
        "broken file keeps the previous tokens (\"%s\")" % broken[-1].strip())

    server.stop()
    owners = {os.stat(os.path.join(root, f)).st_uid
              for root, _, files in os.walk(data_dir) for f in files}
    expect(owners == {uid}, "files in the /data volume owned by %r, want {%d}" % (owners, uid))

    # A new container on the same data directory: the same models, bit for bit.
    again = Server("okl-container-test-%s-b" % tag, data_dir, secrets=mount, token=admin)
    after = {
        "reg": (stats(again.stub, reg), predictions(again.stub, reg, PROBES_REGRESSION)),
        "cls": (stats(again.stub, cls), predictions(again.stub, cls, PROBES_CLASSIFICATION)),
    }
    for key in ("reg", "cls"):
        expect(after[key] == before[key],
               "after the restart, %s differs:\n  before %r\n  after  %r"
               % (key, before[key], after[key]), again.name)
    more = again.stub.Observe(okl_pb2.ObserveRequest(
        ref=reg, examples=examples(regression_rows(20, start=300))), timeout=RPC_TIMEOUT_S)
    expect(more.steps == 320, "Observe after the restart: steps %d, want 320" % more.steps)
    log("%s on the same /data: both models back, GetModel and Predict equal bit for bit; "
        "Observe continues at step 320" % again.name)
    again.stop()
    for name in (server.name, again.name):
        code, out, err = podman("logs", name, check=False)
        text = out + err
        leaked = [t[:8] + "..." for t in tokens if t in text]
        expect(not leaked, "tokens in the server's log: %r" % leaked, name)
    return admin


# --- 7. --allow_unauthenticated -------------------------------------------------------------

def check_unauthenticated(uid, tag):
    server = Server("okl-container-test-%s-c" % tag, new_data_dir(uid),
                    args=["--auth_tokens_file=", "--allow_unauthenticated"])
    r = ref("local", "experiment")
    server.bare.CreateModel(okl_pb2.CreateModelRequest(ref=r, config=regression_config()),
                            timeout=RPC_TIMEOUT_S)
    observed = server.bare.Observe(okl_pb2.ObserveRequest(
        ref=r, examples=examples(regression_rows(10))), timeout=RPC_TIMEOUT_S)
    expect(observed.steps == 10, "Observe without a token: steps %d" % observed.steps)
    code, out, err = podman("healthcheck", "run", server.name, check=False)
    expect(code == 0, "HEALTHCHECK failed (exit %d): %s %s" % (code, out, err), server.name)
    log("%s with --auth_tokens_file= --allow_unauthenticated: CreateModel and Observe without a "
        "token" % server.name)
    server.stop()


# --- 8. TLS and mutual TLS ------------------------------------------------------------------

def check_tls(uid, tag, secrets, admin):
    make_secrets(secrets, "tls")
    make_secrets(secrets, "client", "test-client")
    mount = os.path.join(secrets, "okl")
    ca = read(os.path.join(mount, "tls", "ca.crt"), "rb")
    client_cert = read(os.path.join(secrets, "clients", "test-client.crt"), "rb")
    client_key = read(os.path.join(secrets, "clients", "test-client.key"), "rb")
    tls_flags = ["--tls_cert_file=/etc/okl/tls/tls.crt", "--tls_key_file=/etc/okl/tls/tls.key"]

    # TLS: the image's HEALTHCHECK replaced by the documented TLS one (compose, Kubernetes).
    server = Server("okl-container-test-%s-d" % tag, new_data_dir(uid), secrets=mount,
                    args=tls_flags, token=admin, tls=(ca, None, None), health_cmd=TLS_HEALTH)
    expect_code(lambda: server.bare.ListModels(okl_pb2.ListModelsRequest(),
                                               timeout=RPC_TIMEOUT_S),
                grpc.StatusCode.UNAUTHENTICATED, "ListModels over TLS without a token",
                server.name)
    expect(health_check(server.channel), "health over TLS without a token", server.name)
    with grpc.insecure_channel("127.0.0.1:%d" % server.grpc_port) as plain:
        stub = okl_pb2_grpc.OnlineKernelLearningStub(plain)
        expect_code(lambda: stub.ListModels(okl_pb2.ListModelsRequest(), timeout=5),
                    grpc.StatusCode.UNAVAILABLE, "a plaintext call to the TLS port")
    code, out, err = podman("healthcheck", "run", server.name, check=False)
    expect(code == 0, "the TLS health check %s failed (exit %d): %s %s"
           % (" ".join(TLS_HEALTH), code, out, err), server.name)
    log("TLS (make_secrets.sh tls): calls with the token over TLS, UNAUTHENTICATED without, "
        "plaintext refused; health check `%s` healthy" % " ".join(TLS_HEALTH))
    server.stop()

    # Mutual TLS: a client certificate from the same CA, or no connection.
    server = Server("okl-container-test-%s-e" % tag, new_data_dir(uid), secrets=mount,
                    args=tls_flags + ["--tls_client_ca_file=/etc/okl/tls/ca.crt"], token=admin,
                    tls=(ca, client_cert, client_key))
    with grpc.secure_channel("127.0.0.1:%d" % server.grpc_port,
                             grpc.ssl_channel_credentials(root_certificates=ca)) as anonymous:
        stub = okl_pb2_grpc.OnlineKernelLearningStub(grpc.intercept_channel(anonymous,
                                                                            bearer(admin)))
        expect_code(lambda: stub.ListModels(okl_pb2.ListModelsRequest(), timeout=5),
                    grpc.StatusCode.UNAVAILABLE, "mutual TLS without a client certificate")
    probe = TLS_HEALTH + ["--tls_cert=/etc/okl/tls/tls.crt", "--tls_key=/etc/okl/tls/tls.key"]
    code, out, err = podman("exec", server.name, *TLS_HEALTH, check=False)
    expect(code != 0, "okl health without a client certificate passed under mutual TLS",
           server.name)
    code, out, err = podman("exec", server.name, *probe, check=False)
    expect(code == 0, "%s: exit %d %s %s" % (" ".join(probe), code, out, err), server.name)
    code, out, err = podman("exec", "-e", "OKL_TOKEN=" + admin, server.name, "okl", "list",
                            "--server=127.0.0.1:50051", "--tls_ca=/etc/okl/tls/ca.crt",
                            "--tls_cert=/etc/okl/tls/tls.crt", "--tls_key=/etc/okl/tls/tls.key",
                            check=False)
    expect(code == 0, "okl list over mutual TLS with $OKL_TOKEN: exit %d %s %s"
           % (code, out, err), server.name)
    log("mutual TLS: no client certificate, no connection; with one: calls, `okl list` and "
        "`okl health --tls_cert --tls_key` work")
    server.stop()


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--protoc", default="/usr/bin/protoc")
    parser.add_argument("--grpc_python_plugin", default="/usr/bin/grpc_python_plugin")
    parser.add_argument("--proto_dir", required=True)
    parser.add_argument("--make_secrets", required=True,
                        help="deploy/make_secrets.sh, which makes the tokens and certificates")
    parser.add_argument("--tmp_dir", default=None,
                        help="where the host directories mounted at /data and /etc/okl are made")
    ARGS = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("container_test: run as root (podman as root, chown of the data directory)")

    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))

    started = time.monotonic()
    tag = "%d" % os.getpid()
    try:
        uid = check_image()
        log("image contract: non-root uid %d, /data volume, ports 50051 9464, tokens from %s, "
            "HEALTHCHECK okl health, STOPSIGNAL SIGTERM, no compilers, ldd clean"
            % (uid, TOKENS_PATH))
        load_stubs()
        check_secure_defaults(tag)
        secrets_parent = tempfile.mkdtemp(prefix="okl_container_test.secrets.", dir=ARGS.tmp_dir)
        tmp_dirs.append(secrets_parent)
        secrets = os.path.join(secrets_parent, "secrets")
        admin = run_server_checks(uid, tag, secrets)
        check_unauthenticated(uid, tag)
        check_tls(uid, tag, secrets, admin)
    except TestFailure as e:
        print("container_test: FAILED: %s" % e, file=sys.stderr, flush=True)
        return 1
    log("all checks passed in %.1f s" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
