#!/usr/bin/python3
"""deploy/ checked against the tools and against a live okl_server's /metrics.

Run by ctest with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf, python3-yaml):

  deploy_files_test.py --server=build/server/okl_server --protoc=/usr/bin/protoc \
      --grpc_python_plugin=/usr/bin/grpc_python_plugin --proto_dir=proto \
      --promtool=/usr/bin/promtool --deploy_dir=deploy

Checks:
  - `promtool check config deploy/prometheus/prometheus.yml` passes (its rule file
    included), it scrapes job "okl" at okl:9464 and loads alerts.yml, and `promtool test
    rules deploy/prometheus/alerts_test.yml` passes;
  - the Grafana provisioning files parse and say what the deployment relies on
    (datasource uid `prometheus` at http://prometheus:9090; a file provider);
  - deploy/grafana/dashboards/okl.json parses, has uid "okl", the ${datasource} / tenant /
    model variables, every panel has a query and uses ${datasource}, and every query
    parses as PromQL (`promtool check rules`, Grafana variables substituted);
  - every metric name the dashboard's queries and variables, and the alerts, select is
    exported by a live okl_server (with a store; a regressor and a classifier with regret
    windows and budgets, a little traffic, one failing call, the regret computed) — a
    failure names each unknown one.
Exits non-zero on any failure.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import okl_system  # noqa: E402

ARGS = None
RPC_TIMEOUT_S = 20.0
REGRET_TIMEOUT_S = 20.0


def deploy_path(*parts):
    return os.path.join(ARGS.deploy_dir, *parts)


def load_dashboard():
    with open(deploy_path("grafana", "dashboards", "okl.json")) as f:
        return json.load(f)


class DeployFilesTest(unittest.TestCase):

    def assert_promtool_passes(self, *args):
        """Runs `promtool ARGS...` (the last a file under deploy/) and expects exit 0."""
        command = [ARGS.promtool, *args[:-1], deploy_path(*args[-1].split("/"))]
        result = subprocess.run(command, capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, "%s:\n%s%s"
                         % (" ".join(command), result.stdout, result.stderr))

    def test_prometheus_config_passes_promtool(self):
        path = deploy_path("prometheus", "prometheus.yml")
        self.assert_promtool_passes("check", "config", "prometheus/prometheus.yml")
        import yaml  # python3-yaml
        with open(path) as f:
            config = yaml.safe_load(f)
        jobs = {job["job_name"]: job for job in config["scrape_configs"]}
        self.assertIn("okl", jobs, "%s has no job okl" % path)
        targets = [t for sc in jobs["okl"].get("static_configs", [])
                   for t in sc.get("targets", [])]
        self.assertIn("okl:9464", targets)
        self.assertEqual(jobs["okl"].get("scrape_interval",
                                         config.get("global", {}).get("scrape_interval")),
                         "15s")
        self.assertIn("alerts.yml", config.get("rule_files", []))

    def test_alerts_pass_their_unit_tests(self):
        self.assert_promtool_passes("test", "rules", "prometheus/alerts_test.yml")

    def test_grafana_provisioning_parses(self):
        import yaml  # python3-yaml
        with open(deploy_path("grafana", "provisioning", "datasources", "prometheus.yml")) as f:
            datasources = yaml.safe_load(f)
        self.assertEqual(datasources.get("apiVersion"), 1)
        [prometheus] = [d for d in datasources["datasources"] if d["type"] == "prometheus"]
        self.assertEqual(prometheus["uid"], "prometheus")
        self.assertEqual(prometheus["url"], "http://prometheus:9090")

        with open(deploy_path("grafana", "provisioning", "dashboards", "okl.yml")) as f:
            dashboards = yaml.safe_load(f)
        self.assertEqual(dashboards.get("apiVersion"), 1)
        [provider] = dashboards["providers"]
        self.assertEqual(provider["type"], "file")
        self.assertTrue(provider["options"]["path"].startswith("/"),
                        "the provider's path must be absolute inside the Grafana container")

    def test_dashboard_is_well_formed(self):
        dashboard = load_dashboard()
        self.assertEqual(dashboard.get("uid"), "okl")
        self.assertGreaterEqual(dashboard.get("schemaVersion", 0), 37)
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        self.assertEqual(okl_system.variable_metric_names(dashboard),
                         {"tenant": "okl_model_expansion_size",
                          "model": "okl_model_expansion_size"})
        for name in ("tenant", "model"):
            self.assertEqual(variables[name]["datasource"]["uid"], "${datasource}")

        ids = set()
        queries = 0
        for panel in okl_system.dashboard_panels(dashboard):
            title = panel.get("title")
            self.assertNotIn(panel.get("id"), ids, "panel %r: duplicate id" % title)
            ids.add(panel.get("id"))
            grid = panel.get("gridPos", {})
            self.assertTrue(all(k in grid for k in ("h", "w", "x", "y")),
                            "panel %r: gridPos %r" % (title, grid))
            self.assertLessEqual(grid["x"] + grid["w"], 24, "panel %r is too wide" % title)
            if panel.get("type") == "row":
                continue
            self.assertEqual(panel.get("datasource", {}).get("uid"), "${datasource}",
                             "panel %r must use the ${datasource} variable" % title)
            targets = panel.get("targets", [])
            self.assertTrue(targets, "panel %r has no query" % title)
            for target in targets:
                self.assertTrue(target.get("expr", "").strip(),
                                "panel %r query %s is empty" % (title, target.get("refId")))
                queries += 1
        self.assertGreaterEqual(queries, 10)

    def test_dashboard_queries_parse_as_promql(self):
        """promtool parses each query (as a recording rule's expression)."""
        dashboard = load_dashboard()
        rules = [{"record": "okl_dashboard:query_%d" % i,
                  "expr": okl_system.grafana_to_promql(expr)}
                 for i, (_, expr) in enumerate(okl_system.dashboard_expressions(dashboard))]
        with tempfile.TemporaryDirectory(prefix="okl_deploy_files_test.") as tmp:
            path = os.path.join(tmp, "dashboard_rules.yml")
            with open(path, "w") as f:
                json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, indent=1)
            result = subprocess.run([ARGS.promtool, "check", "rules", path],
                                    capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, "a dashboard query is not valid PromQL:\n%s%s"
                         % (result.stdout, result.stderr))

    def test_metric_name_extraction(self):
        self.assertEqual(okl_system.promql_metric_names(
            'sum by (service, method, code) (rate(okl_rpc_requests_total{code!="OK"}[5m]))'
            ' / ignoring (code) group_left sum by (service, method) '
            '(rate(okl_rpc_requests_total[5m]))'), {"okl_rpc_requests_total"})
        self.assertEqual(okl_system.promql_metric_names(
            'histogram_quantile(0.99, sum by (method, le) '
            '(rate(okl_rpc_duration_seconds_bucket{tenant=~"$tenant"}[$__rate_interval])))'),
            {"okl_rpc_duration_seconds_bucket"})
        self.assertEqual(okl_system.promql_metric_names(
            "sum(process_open_fds and on (job, instance) okl_build_info) * 1e3"),
            {"process_open_fds", "okl_build_info"})


class DashboardMetricsExportedTest(unittest.TestCase):
    """Every metric the dashboard selects is in a live okl_server's /metrics."""

    @classmethod
    def setUpClass(cls):
        tmp = okl_system.temp_dir_with_stubs(cls, "okl_deploy_files_test.", ARGS)
        # With a store: the alerts select its series.
        cls.server = okl_system.OklServer(
            ARGS.server, tmp, ["--regret_every_steps=1", "--data_dir=" + os.path.join(tmp, "data")])
        cls.addClassCleanup(cls.server.stop)
        cls.server.start()  # before grpc is imported (see okl_system)

        import grpc
        from okl.v1 import okl_pb2 as pb, okl_pb2_grpc as pb_grpc
        channel = grpc.insecure_channel(cls.server.address)
        cls.addClassCleanup(channel.close)
        grpc.channel_ready_future(channel).result(timeout=RPC_TIMEOUT_S)
        stub = pb_grpc.OnlineKernelLearningStub(channel)

        # Both models have everything optional: a regret window, a budget that truncates
        # (so a truncation error bound), and the classifier a mistake count.
        losses = {"regressor": pb.LossConfig(squared=pb.LossConfig.Squared()),
                  "classifier": pb.LossConfig(hinge=pb.LossConfig.Hinge(rho=1.0))}
        for model, loss in losses.items():
            ref = pb.ModelRef(tenant="deploy", model=model)
            stub.CreateModel(pb.CreateModelRequest(ref=ref, config=pb.ModelConfig(
                dim=2, kernel=pb.KernelConfig(gaussian=pb.KernelConfig.Gaussian(gamma=1.0)),
                loss=loss, learning_rate=pb.LearningRate(eta0=0.3),
                budget=pb.Budget(max_terms=10, policy=pb.Budget.OLDEST), regret_window=30,
                **{"lambda": 0.01})), timeout=RPC_TIMEOUT_S)
            examples = [pb.Example(x=pb.Vector(values=[0.05 * i, 1.0 - 0.03 * i]),
                                   y=1.0 if i % 3 else -1.0) for i in range(40)]
            stub.Observe(pb.ObserveRequest(ref=ref, examples=examples), timeout=RPC_TIMEOUT_S)
            stub.Predict(pb.PredictRequest(ref=ref, inputs=[pb.Vector(values=[0.1, 0.2])]),
                         timeout=RPC_TIMEOUT_S)
        stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT_S)
        try:
            stub.GetModel(pb.ModelRef(tenant="deploy", model="absent"), timeout=RPC_TIMEOUT_S)
        except grpc.RpcError:
            pass

        # The regret series appear once the background computation has run.
        deadline = time.monotonic() + REGRET_TIMEOUT_S
        while True:
            cls.scrape = cls.server.scrape()
            samples, cls.types = okl_system.parse_exposition(cls.scrape)
            have = {(n, l.get("model")) for n, l, _ in samples}
            if all(("okl_model_regret", m) in have for m in losses):
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    "no okl_model_regret for both models after %.0f s "
                    "(--regret_every_steps=1); /metrics:\n%s"
                    % (REGRET_TIMEOUT_S, cls.scrape[:6000]))
            time.sleep(0.2)
        cls.exported = {n for n, _, _ in samples}

    def test_every_dashboard_metric_is_exported(self):
        dashboard = load_dashboard()
        referenced = {}  # metric name -> where
        for where, expr in okl_system.dashboard_expressions(dashboard):
            names = okl_system.promql_metric_names(okl_system.grafana_to_promql(expr))
            self.assertTrue(names, "%s selects no metric: %s" % (where, expr))
            for name in names:
                referenced.setdefault(name, where)
        for variable, name in okl_system.variable_metric_names(dashboard).items():
            referenced.setdefault(name, "variable %s" % variable)

        unknown = []
        for name, where in sorted(referenced.items()):
            if name in self.exported:
                continue
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            hint = (" (%s is a %s: select %s_bucket/_sum/_count)"
                    % (name, self.types[name], name) if self.types.get(name) == "histogram"
                    else "")
            if base != name and self.types.get(base) in ("histogram", "summary"):
                hint = " (%s is a %s but has no %s series)" % (base, self.types[base], name)
            unknown.append("%s, in %s%s" % (name, where, hint))
        self.assertFalse(unknown, "the dashboard selects metrics okl_server does not export:\n"
                         "  %s\nexported: %s" % ("\n  ".join(unknown),
                                                 " ".join(sorted(self.exported))))

    def test_every_alert_metric_is_exported(self):
        import yaml  # python3-yaml
        with open(deploy_path("prometheus", "alerts.yml")) as f:
            groups = yaml.safe_load(f)["groups"]
        unknown = []
        for group in groups:
            for rule in group["rules"]:
                names = okl_system.promql_metric_names(rule["expr"])
                self.assertTrue(names, "alert %s selects no metric" % rule["alert"])
                unknown += ["%s, in alert %s" % (name, rule["alert"])
                            for name in sorted(names) if name not in self.exported]
        self.assertFalse(unknown, "the alerts select metrics okl_server does not export:\n  %s"
                         % "\n  ".join(unknown))

    def test_exposition_passes_promtool(self):
        """The live exposition parses for Prometheus (format errors only; lint is off)."""
        result = subprocess.run([ARGS.promtool, "check", "metrics"], input=self.scrape,
                                capture_output=True, text=True)
        problems = [line for line in (result.stdout + result.stderr).splitlines()
                    if "error while linting" in line or "text format parsing error" in line]
        self.assertFalse(problems, "promtool check metrics:\n%s%s"
                         % (result.stdout, result.stderr))


if __name__ == "__main__":
    okl_system.main(sys.modules[__name__])
