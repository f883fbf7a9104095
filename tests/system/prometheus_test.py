#!/usr/bin/python3
"""okl_server scraped by a real Prometheus: what Prometheus stores is what GetModel says.

Run by ctest with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf):

  prometheus_test.py --server=build/server/okl_server --protoc=/usr/bin/protoc \
      --grpc_python_plugin=/usr/bin/grpc_python_plugin --proto_dir=proto \
      --prometheus=/usr/bin/prometheus --promtool=/usr/bin/promtool --deploy_dir=deploy

Starts okl_server (memory only, gRPC and metrics on free loopback ports, the regret
recomputed after every batch) and Debian's prometheus scraping it every second, with its
TSDB in a temporary directory. Creates a squared-loss regressor with a regret window and a
hinge classifier, drives Observe batches, Predicts and failing calls, waits until the
background regret is computed for the final step (GetModel's stats.regret stable and the
server's okl_model_regret_staleness_steps 0), and then asks Prometheus's HTTP API, retrying
until its latest samples reflect the final state (30 s at most):
  - per model: okl_model_expansion_size, okl_model_steps_total (exact),
    okl_model_regret, okl_model_loss_total (relative 1e-9), okl_model_mistakes_total,
    against GetModel's stats; no regret series for the model without a window;
  - per RPC: okl_rpc_requests_total by method and code (OK and the errors) and
    okl_rpc_duration_seconds_count by method, against the calls this test made;
  - the aggregates okl_models, okl_examples_observed_total, okl_predictions_total;
  - every query of deploy/grafana/dashboards/okl.json evaluates to data in Prometheus.
Everything started is stopped at the end, on failure too. Exits non-zero on any failure.
"""

import collections
import json
import math
import os
import random
import sys
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import okl_system  # noqa: E402

ARGS = None
TENANT = "system"
DIM = 2
BATCH = 40
REG_BATCHES = 6        # the regressor sees 240 examples: its window of 100 is full
CLS_BATCHES = 4        # the classifier 160
REGRET_WINDOW = 100
RPC_TIMEOUT_S = 20.0
SETTLE_TIMEOUT_S = 20.0    # for the background regret to reach the final step
REFLECT_TIMEOUT_S = 30.0   # for Prometheus's latest samples to show the final state
SERVICE = "okl.v1.OnlineKernelLearning"


class PrometheusScrapesOklServerTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = okl_system.temp_dir_with_stubs(cls, "okl_prometheus_test.", ARGS)

        # Both processes start before grpc is imported (see okl_system).
        cls.server = okl_system.OklServer(
            ARGS.server, cls.tmp, ["--regret_every_steps=1", "--regret_threads=1"])
        cls.addClassCleanup(cls.stop_server)
        cls.server.start()
        cls.prometheus = okl_system.PrometheusServer(ARGS.prometheus, cls.tmp,
                                                     cls.server.metrics_target)
        cls.addClassCleanup(cls.prometheus.stop)
        cls.prometheus.start()

        global grpc, pb, pb_grpc
        import grpc  # Debian's python3-grpcio
        from okl.v1 import okl_pb2 as pb, okl_pb2_grpc as pb_grpc

        cls.channel = grpc.insecure_channel(cls.server.address)
        cls.addClassCleanup(cls.channel.close)
        grpc.channel_ready_future(cls.channel).result(timeout=RPC_TIMEOUT_S)
        cls.stub = pb_grpc.OnlineKernelLearningStub(cls.channel)
        # (method, code name) -> calls made; the server must count exactly these.
        cls.calls = collections.Counter()
        cls.examples_observed = 0
        cls.inputs_predicted = 0

        cls.drive_traffic()
        cls.final = cls.settle()

    @classmethod
    def stop_server(cls):
        if cls.server.process is None or cls.server.port is None:
            cls.server.stop()
            return  # it never started: start() has said why
        if cls.server.process.poll() is not None:
            code = cls.server.stop()
            raise AssertionError("okl_server exited (%s) before the end of the test; log:\n%s"
                                 % (code, cls.server.log()))
        code = cls.server.stop()
        if code != 0:
            raise AssertionError("okl_server did not exit 0 on SIGTERM (%s); log:\n%s"
                                 % (code, cls.server.log()))

    # --- traffic ---

    @classmethod
    def call(cls, method, request):
        """A unary call counted by (method, status code); returns (response, code name)."""
        try:
            response = getattr(cls.stub, method)(request, timeout=RPC_TIMEOUT_S)
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            response, code = e, e.code()
        cls.calls[(method, code.name)] += 1
        return response, code.name

    @classmethod
    def expect_ok(cls, method, request):
        response, code = cls.call(method, request)
        if code != "OK":
            raise AssertionError("%s failed with %s (%s); server log:\n%s"
                                 % (method, code, response.details(), cls.server.log()))
        return response

    @classmethod
    def ref(cls, model):
        return pb.ModelRef(tenant=TENANT, model=model)

    @classmethod
    def drive_traffic(cls):
        rng = random.Random(20240611)
        reg = pb.ModelConfig(
            dim=DIM, kernel=pb.KernelConfig(gaussian=pb.KernelConfig.Gaussian(gamma=2.0)),
            loss=pb.LossConfig(squared=pb.LossConfig.Squared()),
            learning_rate=pb.LearningRate(eta0=0.5),
            budget=pb.Budget(max_terms=64), regret_window=REGRET_WINDOW,
            **{"lambda": 0.01})
        cls_config = pb.ModelConfig(
            dim=DIM, kernel=pb.KernelConfig(gaussian=pb.KernelConfig.Gaussian(gamma=1.0)),
            loss=pb.LossConfig(hinge=pb.LossConfig.Hinge(rho=1.0)),
            learning_rate=pb.LearningRate(eta0=0.2), budget=pb.Budget(max_terms=1000),
            **{"lambda": 0.01})
        cls.expect_ok("CreateModel", pb.CreateModelRequest(ref=cls.ref("reg"), config=reg))
        cls.expect_ok("CreateModel",
                      pb.CreateModelRequest(ref=cls.ref("cls"), config=cls_config))

        def point():
            return [rng.uniform(-1.5, 1.5) for _ in range(DIM)]

        for b in range(max(REG_BATCHES, CLS_BATCHES)):
            if b < REG_BATCHES:
                xs = [point() for _ in range(BATCH)]
                cls.expect_ok("Observe", pb.ObserveRequest(ref=cls.ref("reg"), examples=[
                    pb.Example(x=pb.Vector(values=x), y=math.sin(2 * x[0]) * math.cos(x[1]))
                    for x in xs]))
                cls.examples_observed += BATCH
            if b < CLS_BATCHES:
                xs = [point() for _ in range(BATCH)]
                cls.expect_ok("Observe", pb.ObserveRequest(ref=cls.ref("cls"), examples=[
                    pb.Example(x=pb.Vector(values=x),
                               y=1.0 if x[0] * x[0] + x[1] * x[1] < 1.0 else -1.0)
                    for x in xs]))
                cls.examples_observed += BATCH
        for model, n in (("reg", 5), ("cls", 3), ("reg", 1)):
            cls.expect_ok("Predict", pb.PredictRequest(
                ref=cls.ref(model), inputs=[pb.Vector(values=point()) for _ in range(n)]))
            cls.inputs_predicted += n
        cls.expect_ok("ListModels", pb.ListModelsRequest(tenant=TENANT))

        # Calls that fail, each with the status code it must be counted under.
        failures = [
            ("GetModel", cls.ref("absent"), "NOT_FOUND"),
            ("Predict", pb.PredictRequest(ref=cls.ref("reg"),
                                          inputs=[pb.Vector(values=[1.0, 2.0, 3.0])]),
             "INVALID_ARGUMENT"),
            ("Observe", pb.ObserveRequest(ref=cls.ref("absent"), examples=[
                pb.Example(x=pb.Vector(values=[0.0, 0.0]), y=1.0)]), "NOT_FOUND"),
            ("CreateModel", pb.CreateModelRequest(ref=cls.ref("reg"), config=reg),
             "ALREADY_EXISTS"),
        ]
        for method, request, want in failures:
            response, code = cls.call(method, request)
            if code != want:
                raise AssertionError("%s was expected to fail with %s, got %s (%s)"
                                     % (method, want, code, response if code == "OK"
                                        else response.details()))

    @classmethod
    def settle(cls):
        """Waits for the regret of the final step; returns {model: ModelStats}.

        Settled: the server's own /metrics shows okl_model_regret_staleness_steps 0 for
        "reg" and two consecutive GetModels (0.3 s apart) agree on every stat."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        previous = None
        state = "nothing read yet"
        while time.monotonic() < deadline:
            samples, _ = okl_system.parse_exposition(cls.server.scrape())
            stale = okl_system.find_samples(samples, "okl_model_regret_staleness_steps",
                                            tenant=TENANT, model="reg")
            current = {m: cls.expect_ok("GetModel", cls.ref(m)).stats for m in ("reg", "cls")}
            state = "staleness %s, GetModel reg %s" % (
                [v for _, v in stale] or "absent", str(current["reg"]).replace("\n", " "))
            if stale and stale[0][1] == 0 and previous == current:
                return current
            previous = current
            time.sleep(0.3)
        raise AssertionError(
            "the regret of model reg did not settle on the final step in %.0f s "
            "(--regret_every_steps=1): %s\nserver log:\n%s"
            % (SETTLE_TIMEOUT_S, state, cls.server.log()))

    # --- checks ---

    def eventually(self, check, what):
        """Retries `check` (which returns a list of mismatches) until it returns none."""
        deadline = time.monotonic() + REFLECT_TIMEOUT_S
        while True:
            mismatches = check()
            if not mismatches:
                return
            if time.monotonic() > deadline:
                targets = "(unavailable)"
                try:
                    targets = okl_system.http_get(
                        self.prometheus.url("/api/v1/targets"))[1][:2000]
                except Exception as e:  # noqa: BLE001 (diagnostics only)
                    targets = str(e)
                self.fail("after %.0f s Prometheus still disagrees on %s:\n  %s\n"
                          "Prometheus targets: %s\nPrometheus log:\n%s"
                          % (REFLECT_TIMEOUT_S, what, "\n  ".join(mismatches), targets,
                             self.prometheus.log()))
            time.sleep(0.5)

    def by_model(self, name):
        return {labels.get("model"): value for labels, value in
                self.prometheus.query('%s{tenant="%s"}' % (name, TENANT))}

    @staticmethod
    def compare(what, got, want, rel=0.0):
        """'' when got (None: absent) equals want (None: must be absent), else why not."""
        if want is None:
            return "" if got is None else "%s: present (%r), expected absent" % (what, got)
        if got is None:
            return "%s: absent, expected %r" % (what, want)
        if rel == 0.0:
            return "" if got == want else "%s: Prometheus %r, expected %r" % (what, got, want)
        if math.isclose(got, want, rel_tol=rel, abs_tol=1e-300):
            return ""
        return "%s: Prometheus %.17g, expected %.17g (relative %.3g > %g)" % (
            what, got, want, abs(got - want) / max(abs(want), 1e-300), rel)

    def test_per_model_series_match_get_model(self):
        final = self.final
        self.assertGreater(final["reg"].steps, REGRET_WINDOW)
        self.assertNotEqual(final["reg"].regret, 0.0, "GetModel reports no regret for reg")

        def check():
            size = self.by_model("okl_model_expansion_size")
            steps = self.by_model("okl_model_steps_total")
            regret = self.by_model("okl_model_regret")
            loss = self.by_model("okl_model_loss_total")
            mistakes = self.by_model("okl_model_mistakes_total")
            per_example = self.by_model("okl_model_regret_per_example")
            staleness = self.by_model("okl_model_regret_staleness_steps")
            window = self.by_model("okl_model_regret_window_size")
            up = self.prometheus.query('up{job="okl"}')
            out = [
                "" if [v for _, v in up] == [1.0] else "up{job=\"okl\"}: %r" % up,
                self.compare("okl_model_regret{model=\"cls\"} (no regret_window)",
                             regret.get("cls"), None),
                self.compare("okl_model_mistakes_total{model=\"cls\"}", mistakes.get("cls"),
                             float(final["cls"].mistakes)),
                self.compare("okl_model_mistakes_total{model=\"reg\"} (squared loss)",
                             mistakes.get("reg"), None),
                self.compare("okl_model_regret{model=\"reg\"}", regret.get("reg"),
                             final["reg"].regret, rel=1e-9),
                self.compare("okl_model_regret_per_example{model=\"reg\"}",
                             per_example.get("reg"), final["reg"].regret / REGRET_WINDOW,
                             rel=1e-9),
                self.compare("okl_model_regret_staleness_steps{model=\"reg\"}",
                             staleness.get("reg"), 0.0),
                self.compare("okl_model_regret_window_size{model=\"reg\"}",
                             window.get("reg"), float(REGRET_WINDOW)),
            ]
            for m in ("reg", "cls"):
                out += [
                    self.compare("okl_model_expansion_size{model=\"%s\"}" % m, size.get(m),
                                 float(final[m].expansion_size)),
                    self.compare("okl_model_steps_total{model=\"%s\"}" % m, steps.get(m),
                                 float(final[m].steps)),
                    self.compare("okl_model_loss_total{model=\"%s\"}" % m, loss.get(m),
                                 final[m].cumulative_loss, rel=1e-9),
                ]
            extra = set(size) - {"reg", "cls"}
            if extra:
                out.append("okl_model_expansion_size for unknown models %s" % sorted(extra))
            return [line for line in out if line]

        self.eventually(check, "the per-model series")

    def test_rpc_series_match_the_calls_made(self):
        want_requests = dict(self.calls)
        want_count = collections.Counter()
        for (method, _), n in self.calls.items():
            want_count[method] += n
        self.assertIn(("Predict", "INVALID_ARGUMENT"), want_requests)
        self.assertIn(("GetModel", "NOT_FOUND"), want_requests)

        def check():
            out = []
            got_requests = {}
            for labels, value in self.prometheus.query(
                    'okl_rpc_requests_total{service="%s"}' % SERVICE):
                got_requests[(labels.get("method"), labels.get("code"))] = value
            for key in sorted(set(want_requests) | set(got_requests)):
                got, want = got_requests.get(key, 0.0), float(want_requests.get(key, 0))
                if got != want:
                    out.append('okl_rpc_requests_total{method="%s", code="%s"}: '
                               'Prometheus %r, calls made %r' % (key[0], key[1], got, want))
            got_count = {labels.get("method"): value for labels, value in
                         self.prometheus.query(
                             'okl_rpc_duration_seconds_count{service="%s"}' % SERVICE)}
            for method in ("Observe", "Predict", "CreateModel", "GetModel", "ListModels"):
                got, want = got_count.get(method), float(want_count[method])
                if got != want:
                    out.append('okl_rpc_duration_seconds_count{method="%s"}: Prometheus %r, '
                               'calls made %r' % (method, got, want))
            inf = {labels.get("method"): value for labels, value in self.prometheus.query(
                'okl_rpc_duration_seconds_bucket{service="%s", le="+Inf"}' % SERVICE)}
            for method in ("Observe", "Predict"):
                if inf.get(method) != float(want_count[method]):
                    out.append('okl_rpc_duration_seconds_bucket{method="%s", le="+Inf"}: '
                               'Prometheus %r, calls made %r'
                               % (method, inf.get(method), want_count[method]))
            return out

        self.eventually(check, "the RPC series")

    def test_aggregates_match_the_traffic(self):
        def scalar(name):
            values = [v for _, v in self.prometheus.query(name)]
            return values[0] if len(values) == 1 else (values or None)

        def check():
            return [line for line in (
                self.compare("okl_models", scalar("okl_models"), 2.0),
                self.compare("okl_examples_observed_total",
                             scalar("okl_examples_observed_total"),
                             float(self.examples_observed)),
                self.compare("okl_predictions_total", scalar("okl_predictions_total"),
                             float(self.inputs_predicted)),
                self.compare("okl_metrics_models_omitted", scalar("okl_metrics_models_omitted"),
                             0.0),
            ) if line]

        self.eventually(check, "the aggregate series")

    def test_every_dashboard_query_returns_data(self):
        path = os.path.join(ARGS.deploy_dir, "grafana", "dashboards", "okl.json")
        with open(path) as f:
            dashboard = json.load(f)
        expressions = okl_system.dashboard_expressions(dashboard)
        self.assertTrue(expressions, "%s has no queries" % path)

        def check():
            out = []
            for where, expr in expressions:
                promql = okl_system.grafana_to_promql(expr)
                if not self.prometheus.query(promql):
                    out.append("%s returns no data: %s" % (where, promql))
            for variable, metric in okl_system.variable_metric_names(dashboard).items():
                if not self.prometheus.query(metric):
                    out.append("variable %s: %s has no series" % (variable, metric))
            return out

        self.eventually(check, "the dashboard's queries")


if __name__ == "__main__":
    okl_system.main(sys.modules[__name__])
