#!/usr/bin/python3
"""Drives okl's container image with podman: the image's contract, then the server in it.

Run by deploy/container/container_test.sh (after build_image.sh) with Debian's
/usr/bin/python3 (python3-grpcio, python3-protobuf), as root:

  container_test.py --image=localhost/okl:latest --protoc=/usr/bin/protoc \
      --grpc_python_plugin=/usr/bin/grpc_python_plugin --proto_dir=proto

What it checks, in order (each step says what failed and shows the server's log):
  1. the image: non-root user, /data a volume, ports 50051 and 9464 exposed, the entrypoint's
     flags, a HEALTHCHECK running `okl health`, SIGTERM as stop signal; no compiler and no
     -dev package inside; every shared library of okl_server and okl resolves (ldd).
  2. a container on a bridge network with both ports published on free loopback ports and a
     host directory (owned by the image's uid) bind-mounted at /data: okl_server is PID 1;
     CreateModel, Observe (unary and stream), Predict, ListModels over gRPC; the image's
     HEALTHCHECK passes (`podman healthcheck run`); /metrics scraped over the published port
     shows the per-model series with the right values.
  3. `podman stop` (SIGTERM): okl_server drains and the container exits 0.
  4. a new container on the same /data: the same models come back, GetModel's stats equal and
     Predict answers bit-for-bit the same; the store is writable again; a second stop exits 0.
The containers and the data directory are removed on exit, also on failure or a signal.
"""

import argparse
import atexit
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
                "--data_dir=/data"} <= set(entrypoint),
           "unexpected ENTRYPOINT (exec form with okl_server and its flags): %r" % entrypoint)
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


class Server:
    """One container of the image, its ports published on free loopback ports."""

    def __init__(self, name, data_dir):
        self.name = name
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        containers.append(name)
        podman("run", "-d", "--name", name, *ULIMITS,
               "-p", "127.0.0.1:%d:50051" % self.grpc_port,
               "-p", "127.0.0.1:%d:9464" % self.metrics_port,
               "-v", "%s:/data" % data_dir, ARGS.image)
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port)
        self.stub = okl_pb2_grpc.OnlineKernelLearningStub(self.channel)
        self.wait_ready()

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


# --- 2.-4. the server in the container ------------------------------------------------------

def run_server_checks(uid):
    data_dir = tempfile.mkdtemp(prefix="okl_container_test.data.", dir=ARGS.tmp_dir)
    tmp_dirs.append(data_dir)
    os.chown(data_dir, uid, uid)
    os.chmod(data_dir, 0o750)
    tag = "%d" % os.getpid()

    server = Server("okl-container-test-%s-a" % tag, data_dir)
    top = podman("top", server.name, "pid", "user", "args")
    pid1 = [line.split() for line in top.splitlines()[1:] if line.split()[:1] == ["1"]]
    expect(pid1 and pid1[0][2] == "okl_server" and pid1[0][1] != "root",
           "okl_server is not PID 1 as a non-root user in the container:\n" + top, server.name)
    log("%s: okl_server is PID 1 (user %s), gRPC on 127.0.0.1:%d, metrics on 127.0.0.1:%d"
        % (server.name, pid1[0][1], server.grpc_port, server.metrics_port))

    stub = server.stub
    reg, cls = ref("acme", "demand"), ref("globex", "fraud")
    info = stub.CreateModel(okl_pb2.CreateModelRequest(ref=reg, config=regression_config()),
                            timeout=RPC_TIMEOUT_S)
    expect(info.stats.steps == 0, "CreateModel: a new model has %d steps" % info.stats.steps)
    stub.CreateModel(okl_pb2.CreateModelRequest(ref=cls, config=classification_config()),
                     timeout=RPC_TIMEOUT_S)
    try:
        stub.CreateModel(okl_pb2.CreateModelRequest(ref=reg, config=regression_config()),
                         timeout=RPC_TIMEOUT_S)
        raise TestFailure("a second CreateModel of acme/demand succeeded")
    except grpc.RpcError as e:
        expect(e.code() == grpc.StatusCode.ALREADY_EXISTS,
               "second CreateModel: %s, want ALREADY_EXISTS" % e.code())

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
    log("CreateModel, Observe, ObserveStream, Predict, GetModel, ListModels: ok "
        "(acme/demand: 300 steps, mean loss %.4f -> %.4f)" % (early, late))

    # The image's HEALTHCHECK, run by podman as the engine would.
    code, out, err = podman("healthcheck", "run", server.name, check=False)
    expect(code == 0, "the image's HEALTHCHECK failed (exit %d): %s %s" % (code, out, err),
           server.name)
    log("HEALTHCHECK (okl health): healthy")

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

    server.stop()
    owners = {os.stat(os.path.join(root, f)).st_uid
              for root, _, files in os.walk(data_dir) for f in files}
    expect(owners == {uid}, "files in the /data volume owned by %r, want {%d}" % (owners, uid))

    # A new container on the same data directory: the same models, bit for bit.
    again = Server("okl-container-test-%s-b" % tag, data_dir)
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


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--protoc", default="/usr/bin/protoc")
    parser.add_argument("--grpc_python_plugin", default="/usr/bin/grpc_python_plugin")
    parser.add_argument("--proto_dir", required=True)
    parser.add_argument("--tmp_dir", default=None,
                        help="where the host directory mounted at /data is made")
    ARGS = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("container_test: run as root (podman as root, chown of the data directory)")

    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))

    started = time.monotonic()
    try:
        uid = check_image()
        log("image contract: non-root uid %d, /data volume, ports 50051 9464, "
            "HEALTHCHECK okl health, STOPSIGNAL SIGTERM, no compilers, ldd clean" % uid)
        load_stubs()
        run_server_checks(uid)
    except TestFailure as e:
        print("container_test: FAILED: %s" % e, file=sys.stderr, flush=True)
        return 1
    log("all checks passed in %.1f s" % (time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
