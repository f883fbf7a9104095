"""Shared harness of the system tests (run by Debian's /usr/bin/python3).

- generate_stubs(): the okl.v1 Python stubs, made at test time with protoc and
  grpc_python_plugin into a temporary directory (never into the tree);
- OklServer: okl_server on free loopback ports (--listen=127.0.0.1:0 --port_file,
  --metrics_address=127.0.0.1:0 --metrics_port_file), stopped with SIGTERM;
- PrometheusServer: Debian's prometheus on a free loopback port, scraping one target,
  with its HTTP API (/api/v1/query);
- parse_exposition() and promql_metric_names(): the metric names of a /metrics text and
  of a PromQL expression, for comparing the dashboard with what the server exports.

Child processes get SIGKILL if this test process dies (prctl PR_SET_PDEATHSIG), so a
ctest timeout leaves nothing running; that is set only while this process has a single
thread (preexec_fn is unsafe with threads), i.e. before grpc is imported and used.
"""

import argparse
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

STARTUP_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
HTTP_TIMEOUT_S = 5.0


def _die_with_parent():
    """In the forked child: SIGKILL it if the test process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def _popen(argv, log_path):
    preexec = _die_with_parent if threading.active_count() == 1 else None
    with open(log_path, "wb") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=preexec)


def _tail(path, limit=6000):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return "(no log at %s)" % path
    return text[-limit:] if text else "(empty log)"


def _stop(process, timeout=STOP_TIMEOUT_S):
    """SIGTERM, wait; SIGKILL on timeout. Returns the exit code (None if it was killed)."""
    if process is None:
        return None
    if process.poll() is not None:
        return process.returncode
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None


def free_port():
    """A loopback TCP port free right now (another process may take it before we do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=HTTP_TIMEOUT_S):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode("utf-8", errors="replace")


def generate_stubs(protoc, grpc_python_plugin, proto_dir, out_dir):
    """Writes okl/v1/okl_pb2.py and okl_pb2_grpc.py under out_dir (then sys.path it)."""
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([protoc, "--python_out=" + out_dir, "--grpc_python_out=" + out_dir,
                    "--plugin=protoc-gen-grpc_python=" + grpc_python_plugin,
                    "-I" + proto_dir, "okl/v1/okl.proto"], check=True)
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)


def temp_dir_with_stubs(test_class, prefix, args):
    """A temporary directory for a test class, removed after its tests, with the okl.v1
    stubs generated in it (importable from then on); returns its path."""
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    test_class.addClassCleanup(tmp.cleanup)
    generate_stubs(args.protoc, args.grpc_python_plugin, args.proto_dir,
                   os.path.join(tmp.name, "generated"))
    return tmp.name


def _read_port_file(path):
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    if not text.endswith("\n"):
        return None
    return int(text)


class OklServer:
    """okl_server with its gRPC and metrics ports on loopback, memory only (--data_dir=)."""

    def __init__(self, binary, work_dir, extra_flags=()):
        self.binary = binary
        self.work_dir = work_dir
        self.log_path = os.path.join(work_dir, "okl_server.log")
        self.port_file = os.path.join(work_dir, "okl_server.port")
        self.metrics_port_file = os.path.join(work_dir, "okl_server.metrics_port")
        self.argv = [binary, "--listen=127.0.0.1:0", "--port_file=" + self.port_file,
                     "--data_dir=", "--metrics_address=127.0.0.1:0",
                     "--metrics_port_file=" + self.metrics_port_file] + list(extra_flags)
        self.process = None
        self.port = None
        self.metrics_port = None

    def start(self):
        self.process = _popen(self.argv, self.log_path)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while self.port is None or self.metrics_port is None:
            if self.process.poll() is not None:
                raise AssertionError(
                    "okl_server exited with %d before writing its ports.\ncommand: %s\n"
                    "log:\n%s" % (self.process.returncode, " ".join(self.argv), self.log()))
            if self.port is None:
                self.port = _read_port_file(self.port_file)
            if self.metrics_port is None:
                self.metrics_port = _read_port_file(self.metrics_port_file)
            if time.monotonic() > deadline:
                raise AssertionError(
                    "okl_server wrote no %s in %.0f s.\ncommand: %s\nlog:\n%s"
                    % ("--port_file" if self.port is None else "--metrics_port_file",
                       STARTUP_TIMEOUT_S, " ".join(self.argv), self.log()))
            time.sleep(0.02)
        return self

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    @property
    def metrics_target(self):
        return "127.0.0.1:%d" % self.metrics_port

    def scrape(self):
        """The /metrics text (fails the test naming the URL if it cannot be read)."""
        url = "http://%s/metrics" % self.metrics_target
        try:
            status, body = http_get(url)
        except (OSError, urllib.error.URLError) as e:
            raise AssertionError("cannot scrape %s: %s\nserver log:\n%s"
                                 % (url, e, self.log()))
        if status != 200:
            raise AssertionError("%s answered HTTP %d" % (url, status))
        return body

    def log(self):
        return _tail(self.log_path)

    def stop(self):
        """Stops the server (SIGTERM); returns its exit code, None if it had to be killed."""
        code = _stop(self.process)
        self.process = None
        return code


class PrometheusServer:
    """Debian's prometheus on loopback, scraping `target` every second as job "okl"."""

    def __init__(self, binary, work_dir, target, scrape_interval="1s"):
        self.binary = binary
        self.work_dir = work_dir
        self.target = target
        self.config_path = os.path.join(work_dir, "prometheus.yml")
        self.storage = os.path.join(work_dir, "prometheus-data")
        self.log_path = os.path.join(work_dir, "prometheus.log")
        with open(self.config_path, "w") as f:
            f.write("global:\n"
                    "  scrape_interval: %s\n"
                    "  scrape_timeout: %s\n"
                    "  evaluation_interval: %s\n"
                    "scrape_configs:\n"
                    "  - job_name: okl\n"
                    "    static_configs:\n"
                    "      - targets: ['%s']\n"
                    % (scrape_interval, scrape_interval, scrape_interval, target))
        self.process = None
        self.port = None

    def start(self, attempts=3):
        last_error = None
        for _ in range(attempts):
            self.port = free_port()
            argv = [self.binary, "--config.file=" + self.config_path,
                    "--storage.tsdb.path=" + self.storage,
                    "--web.listen-address=127.0.0.1:%d" % self.port,
                    "--log.level=info"]
            self.process = _popen(argv, self.log_path)
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    last_error = ("prometheus exited with %d.\ncommand: %s\nlog:\n%s"
                                  % (self.process.returncode, " ".join(argv), self.log()))
                    break  # perhaps the port was taken meanwhile: try another one
                try:
                    status, _ = http_get(self.url("/-/ready"), timeout=1.0)
                    if status == 200:
                        return self
                except (OSError, urllib.error.URLError):
                    pass
                time.sleep(0.1)
            else:
                _stop(self.process)
                raise AssertionError("prometheus was not ready in %.0f s.\nlog:\n%s"
                                     % (STARTUP_TIMEOUT_S, self.log()))
        raise AssertionError(last_error)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def query(self, expr):
        """Instant query at now: a list of (labels dict, float value). Fails on API errors."""
        url = self.url("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        try:
            with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
                body = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            raise AssertionError("Prometheus rejected the query %r: HTTP %d %s"
                                 % (expr, e.code, e.read().decode("utf-8", "replace")))
        if body.get("status") != "success":
            raise AssertionError("Prometheus query %r failed: %s" % (expr, body))
        data = body["data"]
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        if data["resultType"] != "vector":
            raise AssertionError("query %r gave a %s, not a vector"
                                 % (expr, data["resultType"]))
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def log(self):
        return _tail(self.log_path)

    def stop(self):
        code = _stop(self.process)
        self.process = None
        return code


# --- the text exposition ---

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    """Prometheus text format -> (samples, types): samples a list of (name, labels, value),
    types {family name: "counter" | "gauge" | "histogram" | ...}."""
    samples = []
    types = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise AssertionError("unparsable exposition line: %r" % line)
        labels = {}
        if m.group(2):
            for name, value in _LABEL.findall(m.group(2)):
                labels[name] = value.replace('\\"', '"').replace("\\n", "\n").replace(
                    "\\\\", "\\")
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples, types


def find_samples(samples, name, **labels):
    return [(l, v) for n, l, v in samples
            if n == name and all(l.get(k) == want for k, want in labels.items())]


# --- PromQL ---

_PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan", "atan2", "start", "end",
}
_PROMQL_TOKEN = re.compile(
    r"(?P<var>\$\{?\w+\}?)"
    r"|(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[smhdwy]*)"
    r"|(?P<id>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"|(?P<other>\S)")


def promql_metric_names(expr):
    """The metric names an expression selects: identifiers that are not functions,
    aggregations, keywords, label names (in {...}, by/without/on/ignoring/group_x lists),
    durations ([...]), strings or Grafana variables."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\[\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)",
                  r" \1 ", text)
    names = set()
    tokens = list(_PROMQL_TOKEN.finditer(text))
    for i, token in enumerate(tokens):
        name = token.group("id")
        if name is None or name.lower() in _PROMQL_KEYWORDS:
            continue
        following = tokens[i + 1].group(0) if i + 1 < len(tokens) else ""
        if following == "(" or following.lower() in ("by", "without"):
            continue  # a function or an aggregation (`sum by (x) (...)`)
        names.add(name)
    return names


def grafana_to_promql(expr):
    """Substitutes the dashboard's Grafana variables so that Prometheus can evaluate it."""
    for var, value in (("$__rate_interval", "1m"), ("${__rate_interval}", "1m"),
                       ("$__interval", "15s"), ("${__interval}", "15s"),
                       ("$__range", "1h"), ("${__range}", "1h"),
                       ("${tenant}", ".*"), ("$tenant", ".*"),
                       ("${model}", ".*"), ("$model", ".*")):
        expr = expr.replace(var, value)
    return expr


def dashboard_panels(dashboard):
    """Every panel of a Grafana dashboard, the ones nested in collapsed rows included."""
    out = []
    for panel in dashboard.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def dashboard_expressions(dashboard):
    """(where, expr) for every panel query and every query variable of the dashboard."""
    out = []
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []):
            out.append(("panel %r query %s" % (panel.get("title"), target.get("refId")),
                        target.get("expr", "")))
    return out


def variable_metric_names(dashboard):
    """{variable name: metric name} for the label_values(metric, label) variables."""
    out = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        m = re.match(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", query or "")
        if m is None:
            raise AssertionError("variable %r: not a label_values(metric, label) query: %r"
                                 % (variable.get("name"), query))
        out[variable["name"]] = m.group(1)
    return out


def parse_args(doc):
    """The command line the system tests take (CMake passes every path); returns
    (args, the rest for unittest)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--server", required=True, help="the okl_server binary")
    parser.add_argument("--protoc", default="/usr/bin/protoc")
    parser.add_argument("--grpc_python_plugin", default="/usr/bin/grpc_python_plugin")
    parser.add_argument("--proto_dir", required=True, help="holds okl/v1/okl.proto")
    parser.add_argument("--prometheus", default="/usr/bin/prometheus")
    parser.add_argument("--promtool", default="/usr/bin/promtool")
    parser.add_argument("--deploy_dir", required=True, help="the repository's deploy/")
    parser.add_argument("--nginx", default="/usr/sbin/nginx", help="the router (cluster test)")
    parser.add_argument("--cli", default="", help="the okl tool (cluster test's moves)")
    return parser.parse_known_args()


def main(module):
    """A system test's main: parses the command line (its help is the module's
    docstring) into module.ARGS and runs the module's tests."""
    module.ARGS, rest = parse_args(module.__doc__)
    unittest.main(module=module, argv=[sys.argv[0]] + rest, verbosity=2)
