#!/usr/bin/python3
"""A Python gRPC client against a real okl_server.

Run by ctest with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf):

  python_client_test.py --server=build/server/okl_server --protoc=/usr/bin/protoc \
      --grpc_python_plugin=/usr/bin/grpc_python_plugin --proto_dir=proto \
      --data_dir=data

The stubs are generated at test time into a temporary directory (never into the tree).
The server runs on a free loopback port (--listen=127.0.0.1:0 --port_file). The test
streams a prefix of the Mackey-Glass series, time-embedded with 7 lags, and checks the
server's prequential predictions against a pure-Python NORMA of the same config, to a
relative 1e-9: the two sum the same terms in different orders and the server folds the
shrinkage into one scale factor, so they agree to rounding, about 1e-14, not bit for
bit. Exits non-zero on any failure, so ctest marks the test failed.
"""

import argparse
import collections
import ctypes
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None

# The model: client/examples/mg30.textproto with a small budget, so that OLDEST removes
# terms for most of the stream.
DIM = 7
GAMMA = 1.0
ETA = 0.5
LAMBDA = 0.001
BUDGET = 32
EXAMPLES = 800
BATCH = 50
STARTUP_TIMEOUT_S = 20.0
RPC_TIMEOUT_S = 30.0


def die_with_parent():
    """In the forked child: SIGKILL it if this test dies (say, killed by ctest's timeout)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def read_series(path, count):
    values = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                values.append(float(line))
                if len(values) == count:
                    break
    return values


def embed(series, lags):
    """Row n is [s_n, s_{n-1}, ..., s_{n-L+1}] (zeros before s_0), target s_{n+1}."""
    rows = []
    for n in range(len(series) - 1):
        x = [series[n - k] if n - k >= 0 else 0.0 for k in range(lags)]
        rows.append((x, series[n + 1]))
    return rows


class PythonNorma:
    """NORMA with a gaussian kernel, squared loss, constant rate and an OLDEST budget.

    f(x) = sum_i alpha_i exp(-gamma |x - x_i|^2). On (x, y): p = f(x); every alpha
    shrinks by (1 - eta lambda); the term x joins with alpha = -eta (p - y) if nonzero;
    then the oldest terms go while there are more than `budget`.
    """

    def __init__(self, gamma, eta, lam, budget):
        self.gamma = gamma
        self.eta = eta
        self.lam = lam
        self.budget = budget
        self.terms = collections.deque()  # [x, alpha], oldest first

    def predict(self, x):
        total = 0.0
        for xi, alpha in self.terms:
            d = sum((a - b) * (a - b) for a, b in zip(x, xi))
            total += alpha * math.exp(-self.gamma * d)
        return total

    def observe(self, x, y):
        p = self.predict(x)
        g = p - y
        shrink = 1.0 - self.eta * self.lam
        for term in self.terms:
            term[1] *= shrink
        if g != 0.0:
            self.terms.append([list(x), -self.eta * g])
            while len(self.terms) > self.budget:
                self.terms.popleft()
        return p, 0.5 * g * g


class ServerPythonClientTest(unittest.TestCase):
    server = None
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="okl_python_client_test.")
        generated = os.path.join(cls.tmp.name, "generated")
        os.mkdir(generated)
        subprocess.run(
            [
                ARGS.protoc,
                "--python_out=" + generated,
                "--grpc_python_out=" + generated,
                "--plugin=protoc-gen-grpc_python=" + ARGS.grpc_python_plugin,
                "-I" + ARGS.proto_dir,
                "okl/v1/okl.proto",
            ],
            check=True,
        )

        port_file = os.path.join(cls.tmp.name, "port")
        data_dir = os.path.join(cls.tmp.name, "data")
        os.mkdir(data_dir)
        cls.log_path = os.path.join(cls.tmp.name, "server.log")
        with open(cls.log_path, "wb") as log:
            cls.server = subprocess.Popen(
                [
                    ARGS.server,
                    "--listen=127.0.0.1:0",
                    "--port_file=" + port_file,
                    "--data_dir=" + data_dir,
                    "--metrics_address=127.0.0.1:0",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        port = None
        while port is None:
            if cls.server.poll() is not None:
                raise RuntimeError("okl_server exited with %d before writing its port:\n%s"
                                   % (cls.server.returncode, cls.server_log()))
            if os.path.exists(port_file):
                with open(port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    port = int(text)
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("okl_server wrote no port file in %ss:\n%s"
                                   % (STARTUP_TIMEOUT_S, cls.server_log()))
            time.sleep(0.01)
        # Only now: preexec_fn above is safe only while this process has one thread.
        sys.path.insert(0, generated)
        global grpc, okl_pb2, okl_pb2_grpc
        import grpc  # noqa: F401 (Debian's python3-grpcio)
        from okl.v1 import okl_pb2, okl_pb2_grpc  # noqa: F401

        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        grpc.channel_ready_future(cls.channel).result(timeout=STARTUP_TIMEOUT_S)
        cls.stub = okl_pb2_grpc.OnlineKernelLearningStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            if getattr(cls, "channel", None) is not None:
                cls.channel.close()
            exit_code = None
            if cls.server.poll() is None:
                cls.server.send_signal(signal.SIGTERM)
                try:
                    exit_code = cls.server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    cls.server.kill()
                    cls.server.wait()
            log = cls.server_log()
            cls.server = None
            if exit_code != 0:
                raise RuntimeError("okl_server did not exit 0 on SIGTERM (%s):\n%s"
                                   % (exit_code, log))
        if cls.tmp is not None:
            cls.tmp.cleanup()

    @classmethod
    def server_log(cls):
        try:
            with open(cls.log_path, errors="replace") as f:
                return f.read()[-4096:]
        except OSError:
            return "(no log)"

    # --- helpers ---

    def ref(self, model):
        return okl_pb2.ModelRef(tenant="python", model=model)

    def config(self):
        return okl_pb2.ModelConfig(
            dim=DIM,
            kernel=okl_pb2.KernelConfig(gaussian=okl_pb2.KernelConfig.Gaussian(gamma=GAMMA)),
            loss=okl_pb2.LossConfig(squared=okl_pb2.LossConfig.Squared()),
            learning_rate=okl_pb2.LearningRate(eta0=ETA,
                                               schedule=okl_pb2.LearningRate.CONSTANT),
            budget=okl_pb2.Budget(max_terms=BUDGET, policy=okl_pb2.Budget.OLDEST),
            **{"lambda": LAMBDA},  # a Python keyword
        )

    def rows(self):
        series = read_series(os.path.join(ARGS.data_dir, "mg30.dat"), EXAMPLES + 1)
        self.assertEqual(len(series), EXAMPLES + 1)
        return embed(series, DIM)

    def create(self, model):
        return self.stub.CreateModel(
            okl_pb2.CreateModelRequest(ref=self.ref(model), config=self.config()),
            timeout=RPC_TIMEOUT_S)

    def observe_stream(self, model, rows):
        def requests():
            for start in range(0, len(rows), BATCH):
                request = okl_pb2.ObserveRequest(examples=[
                    okl_pb2.Example(x=okl_pb2.Vector(values=x), y=y)
                    for x, y in rows[start:start + BATCH]
                ])
                if start == 0:
                    request.ref.CopyFrom(self.ref(model))
                yield request

        return self.stub.ObserveStream(requests(), timeout=RPC_TIMEOUT_S)

    def predict(self, model, inputs):
        return list(self.stub.Predict(
            okl_pb2.PredictRequest(ref=self.ref(model),
                                   inputs=[okl_pb2.Vector(values=x) for x in inputs]),
            timeout=RPC_TIMEOUT_S).predictions)

    def assertClose(self, got, want, what):
        self.assertTrue(math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12),
                        "%s: server %.17g, Python %.17g" % (what, got, want))

    # --- tests ---

    def test_mackey_glass_predictions_match_a_pure_python_norma_and_the_error_falls(self):
        info = self.create("mg30")
        self.assertEqual(info.ref.model, "mg30")
        self.assertEqual(info.stats.steps, 0)
        rows = self.rows()
        response = self.observe_stream("mg30", rows)
        self.assertEqual(len(response.predictions), EXAMPLES)
        self.assertEqual(len(response.losses), EXAMPLES)
        self.assertEqual(response.steps, EXAMPLES)
        self.assertEqual(response.expansion_size, BUDGET)

        reference = PythonNorma(GAMMA, ETA, LAMBDA, BUDGET)
        for t, (x, y) in enumerate(rows):
            p, loss = reference.observe(x, y)
            self.assertClose(response.predictions[t], p, "prediction %d" % t)
            self.assertClose(response.losses[t], loss, "loss %d" % t)

        # Learning: the mean loss of the last 100 examples is under half the first
        # 100's (0.39 of it with this config; with 32 terms it levels off near 0.02).
        first = sum(response.losses[:100]) / 100
        last = sum(response.losses[-100:]) / 100
        self.assertLess(last, 0.5 * first, "mean loss %g at the start, %g at the end"
                        % (first, last))

        probes = [x for x, _ in rows[::37]]
        for got, x in zip(self.predict("mg30", probes), probes):
            self.assertClose(got, reference.predict(x), "Predict")

        info = self.stub.GetModel(self.ref("mg30"), timeout=RPC_TIMEOUT_S)
        self.assertEqual(info.stats.steps, EXAMPLES)
        self.assertEqual(info.stats.expansion_size, BUDGET)
        self.assertClose(info.stats.cumulative_loss, sum(response.losses), "cumulative_loss")

    def test_snapshot_restored_under_another_name_predicts_identically(self):
        self.create("snap")
        rows = self.rows()
        self.observe_stream("snap", rows[:300])
        data = b"".join(chunk.data for chunk in
                        self.stub.Snapshot(self.ref("snap"), timeout=RPC_TIMEOUT_S))

        def chunks():
            for start in range(0, len(data), 1000):
                chunk = okl_pb2.RestoreChunk(data=data[start:start + 1000])
                if start == 0:
                    chunk.ref.CopyFrom(self.ref("snap-copy"))
                yield chunk

        info = self.stub.Restore(chunks(), timeout=RPC_TIMEOUT_S)
        self.assertEqual(info.ref.model, "snap-copy")
        self.assertEqual(info.stats.steps, 300)
        a = self.observe_stream("snap", rows[300:])
        b = self.observe_stream("snap-copy", rows[300:])
        self.assertEqual(list(a.predictions), list(b.predictions))  # exactly

    def test_errors_carry_the_contract_status_codes(self):
        def code_of(call, *args):
            with self.assertRaises(grpc.RpcError) as caught:
                call(*args, timeout=RPC_TIMEOUT_S)
            return caught.exception.code()

        self.assertEqual(code_of(self.stub.GetModel, self.ref("absent")),
                         grpc.StatusCode.NOT_FOUND)
        self.create("errors")
        self.assertEqual(
            code_of(self.stub.CreateModel,
                    okl_pb2.CreateModelRequest(ref=self.ref("errors"), config=self.config())),
            grpc.StatusCode.ALREADY_EXISTS)
        self.assertEqual(
            code_of(self.stub.Predict,
                    okl_pb2.PredictRequest(ref=self.ref("errors"),
                                           inputs=[okl_pb2.Vector(values=[1.0, 2.0])])),
            grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(
            code_of(self.stub.Observe,
                    okl_pb2.ObserveRequest(ref=self.ref("errors"), examples=[
                        okl_pb2.Example(x=okl_pb2.Vector(values=[float("nan")] * DIM), y=1.0)
                    ])),
            grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(
            code_of(self.stub.GetModel, okl_pb2.ModelRef(tenant="python", model="bad name")),
            grpc.StatusCode.INVALID_ARGUMENT)
        info = self.stub.GetModel(self.ref("errors"), timeout=RPC_TIMEOUT_S)
        self.assertEqual(info.stats.steps, 0)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="the okl_server binary")
    parser.add_argument("--protoc", default="/usr/bin/protoc")
    parser.add_argument("--grpc_python_plugin", default="/usr/bin/grpc_python_plugin")
    parser.add_argument("--proto_dir", required=True, help="holds okl/v1/okl.proto")
    parser.add_argument("--data_dir", required=True, help="holds mg30.dat")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
