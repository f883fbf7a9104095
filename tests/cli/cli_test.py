#!/usr/bin/python3
"""The `okl` tool end to end: the real binary against a real okl_server.

Run by ctest with Debian's /usr/bin/python3:

  cli_test.py --okl=build/client/okl --server=build/server/okl_server \
      --repo=. --data_dir=data

One okl_server (memory only, free loopback ports; tests/system/okl_system.py's harness)
serves every test; each test uses its own models. Covered: README's first model and the
walkthrough and delayed-feedback example of docs/cli.md, run verbatim (read from those
files); the errors (a server error is one line "okl: CODE: message" and exit 1, a usage error exit
2, health of a dead server exit 1 quickly); --json output; learning curves (--curve's
columns and averages, observe's losses equal replay's bit for bit; --plot's PNG/SVG when
gnuplot is installed); progress on stderr; resuming a failed observe with --skip; help;
`okl token new` (no server needed); delayed feedback (predict --remember, label).
"""

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "system"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import okl_system  # noqa: E402 (the shared server harness)

ARGS = None
COMMAND_TIMEOUT_S = 60

# docs/cli.md's walkthrough ("A walkthrough"): the first ```sh block after the line that
# names this test, read from docs/cli.md itself so that the two cannot drift apart. It runs
# verbatim from a directory laid out like the repository root (client/examples, data)
# with `okl` on PATH and OKL_SERVER pointing at the test's server.
CLI_DOC = os.path.join("docs", "cli.md")
WALKTHROUGH_MARKER = "`tests/cli/cli_test.py` runs exactly these lines"


# docs/cli.md's delayed-feedback example ("Predict now, label later"), read the same way.
DELAYED_FEEDBACK_MARKER = "`tests/cli/cli_test.py` runs exactly these lines): two impressions"


# README's first model ("A first model"), read from README.md the same way.
FIRST_MODEL_MARKER = "`tests/cli/cli_test.py` runs these lines"


def doc_sh_block(repo, doc, marker):
    """The first ```sh block after `marker` in the repository's file `doc`."""
    with open(os.path.join(repo, doc)) as f:
        text = f.read()
    at = text.find(marker)
    if at < 0:
        raise AssertionError("%s no longer says %r" % (doc, marker))
    begin = text.index("```sh\n", at) + len("```sh\n")
    return text[begin:text.index("```", begin)]

# The mg30 model of the curve tests, as flags and as the equivalent text config.
MG_FLAGS = ["--dim=7", "--kernel=gaussian", "--gamma=1", "--loss=squared", "--eta0=0.5",
            "--lambda=0.001", "--max_terms=64"]
MG_CONFIG = """\
dim: 7
kernel { gaussian { gamma: 1 } }
loss { squared {} }
learning_rate { eta0: 0.5 schedule: CONSTANT }
lambda: 0.001
budget { max_terms: 64 policy: OLDEST }
"""


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


def embedded_csv(series, lags):
    """Rows x_n = [s_n, ..., s_{n-L+1}] (zeros before the start), y = s_{n+1}, as CSV."""
    lines = []
    for n in range(len(series) - 1):
        x = [series[n - k] if n - k >= 0 else 0.0 for k in range(lags)]
        lines.append(",".join(repr(v) for v in x + [series[n + 1]]))
    return "\n".join(lines) + "\n"


def read_curve(path):
    with open(path) as f:
        lines = f.read().splitlines()
    header = lines[0].split(",")
    rows = [line.split(",") for line in lines[1:]]
    return header, [(int(r[0]), float(r[1]), float(r[2]), int(r[3])) for r in rows]


class OklCliTest(unittest.TestCase):
    server = None
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="okl_cli_test.")
        cls.server = okl_system.OklServer(ARGS.server, cls.tmp.name).start()
        cls.env = dict(os.environ)
        cls.env["OKL_SERVER"] = cls.server.address
        for name in ("OKL_TENANT", "OKL_TOKEN"):
            cls.env.pop(name, None)
        cls.mg_csv = cls.path("mg30-1000.csv")
        with open(cls.mg_csv, "w") as f:
            f.write(embedded_csv(read_series(os.path.join(ARGS.data_dir, "mg30.dat"), 1001), 7))
        cls.mg_config = cls.path("mg30.textproto")
        with open(cls.mg_config, "w") as f:
            f.write(MG_CONFIG)

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            code = cls.server.stop()
            if code != 0:
                raise AssertionError("okl_server did not exit 0 on SIGTERM (%s):\n%s"
                                     % (code, cls.server.log()))
        if cls.tmp is not None:
            cls.tmp.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp.name, name)

    def okl(self, *args, stdin_text=None, env=None, expect=None):
        """Runs okl; returns (exit code, stdout, stderr). `expect`: the exit code wanted."""
        result = subprocess.run([ARGS.okl] + list(args), input=stdin_text,
                                capture_output=True, text=True, env=env or self.env,
                                timeout=COMMAND_TIMEOUT_S)
        if expect is not None:
            self.assertEqual(result.returncode, expect,
                             "okl %s\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(args), result.stdout, result.stderr))
        return result.returncode, result.stdout, result.stderr

    def assertOneErrorLine(self, stderr, *parts):
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertTrue(stderr.startswith("okl: "), stderr)
        for part in parts:
            self.assertIn(part, stderr)

    # --- README's first model and docs/cli.md's walkthrough ----------------------------

    def repository_like(self, name):
        """A directory laid out like the repository root (client/examples, data) and an
        environment with `okl` on PATH, for the documents' shell blocks."""
        root = self.path(name + "/repo")
        os.makedirs(root)
        os.makedirs(os.path.join(root, "client"))
        os.symlink(os.path.join(ARGS.repo, "client", "examples"),
                   os.path.join(root, "client", "examples"))
        os.symlink(os.path.abspath(ARGS.data_dir), os.path.join(root, "data"))
        bin_dir = self.path(name + "/bin")
        os.makedirs(bin_dir)
        os.symlink(os.path.abspath(ARGS.okl), os.path.join(bin_dir, "okl"))
        env = dict(self.env)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        return root, env

    def run_block(self, block, cwd, env):
        """Runs a document's shell block as bash -euo pipefail; it must exit 0."""
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env,
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        self.assertEqual(result.returncode, 0,
                         "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        return result

    def test_readme_first_model_learns_and_predicts(self):
        root, env = self.repository_like("first-model")
        first = doc_sh_block(ARGS.repo, "README.md", FIRST_MODEL_MARKER)
        self.assertIn("okl observe", first)
        out = self.run_block(first, root, env).stdout
        self.assertIn("created demo/first", out)
        self.assertIn("observed 3,000 examples into demo/first", out)
        self.assertIn("steps            3000\n", out)
        # The five predictions, one a line, between observe's summary and get's.
        predictions = [float(line) for line in out.splitlines()
                       if re.fullmatch(r"-?\d+(\.\d+)?(e-?\d+)?", line)]
        self.assertEqual(len(predictions), 5, out)
        self.assertTrue(all(math.isfinite(p) for p in predictions))

    def test_docs_walkthrough_gives_the_same_predictions_after_restore(self):
        root, env = self.repository_like("walkthrough")
        walkthrough = doc_sh_block(ARGS.repo, CLI_DOC, WALKTHROUGH_MARKER)
        self.assertIn("okl observe", walkthrough)
        out = self.run_block(walkthrough, root, env).stdout
        self.assertIn("server is up", out)
        self.assertIn("created demo/a9a", out)
        self.assertIn("observed 3,000 examples into demo/a9a", out)
        self.assertIn("200 predictions written to before.txt", out)
        self.assertIn("restored demo/a9a from a9a.snapshot: 3000 steps, 1000 terms", out)
        self.assertIn("same predictions", out)
        self.assertIn("steps            3000\n", out)
        with open(os.path.join(root, "before.txt"), "rb") as f:
            before = f.read()
        with open(os.path.join(root, "after.txt"), "rb") as f:
            self.assertEqual(f.read(), before)
        predictions = [float(v) for v in before.decode().split()]
        self.assertEqual(len(predictions), 200)
        self.assertTrue(all(math.isfinite(p) for p in predictions))
        # The classifier learned something: a9a's test labels agree with the sign of most
        # predictions (it errs on ~18% online after 3000 rows; 35% would be chance-like).
        with open(os.path.join(ARGS.data_dir, "a9a_test.txt")) as f:
            labels = [float(line.split()[0]) for line, _ in zip(f, range(200))]
        wrong = sum(1 for p, y in zip(predictions, labels) if p * y <= 0)
        self.assertLess(wrong, 70, "%d of 200 test rows misclassified" % wrong)
        header, rows = read_curve(os.path.join(root, "a9a-curve.csv"))
        self.assertEqual(len(rows), 3000)
        # The summary's mistakes line agrees with the model's statistics.
        mistakes_line = [l for l in out.splitlines() if l.startswith("mistakes")]
        self.assertEqual(len(mistakes_line), 2, out)  # observe's summary and get's
        self.assertEqual(mistakes_line[0].split()[1], mistakes_line[1].split()[1])

    # --- Errors and exit codes ---------------------------------------------------------

    def test_a_server_error_is_one_line_with_the_code_name_and_exit_1(self):
        code, out, err = self.okl("get", "--tenant=nobody", "--model=nothing")
        self.assertEqual(code, 1)
        self.assertEqual(out, "")
        self.assertOneErrorLine(err, 'okl: NOT_FOUND: model "nothing" of tenant "nobody" '
                                     'does not exist')
        self.okl("create", "--tenant=errors", "--model=m", "--dim=2", expect=0)
        code, _, err = self.okl("create", "--tenant=errors", "--model=m", "--dim=2")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "okl: ALREADY_EXISTS: ")
        code, _, err = self.okl("predict", "--tenant=errors", "--model=m", "--x=1,2,3")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "INVALID_ARGUMENT", "expected 2 values")
        code, _, err = self.okl("get", "--tenant=errors", "--model=bad name")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "okl: INVALID_ARGUMENT: ")

    def test_usage_errors_exit_2(self):
        cases = [
            ["get", "--model=m", "--bogus"],               # no such flag
            ["get", "--model=m", "--dim=3"],               # another command's flag
            ["get"],                                       # --model missing
            ["get", "--model=m", "--timeout=soon"],        # a value that does not parse
            ["get", "--model=m", "extra"],                 # an argument
            ["create", "--model=m"],                       # neither --dim nor --config
            ["create", "--model=m", "--dim=2", "--kernel=linear", "--gamma=2"],
            ["create", "--model=m", "--dim=2", "--loss=hingey"],
            ["create", "--model=m", "--dim=2", "--gamma=-1"],  # ValidateConfig's
            ["observe", "--model=m"],                      # no input
            ["observe", "--model=m", "--plot=curve.jpg", "-"],
            ["predict", "--model=m"],                      # no input
            ["replay", "--nolocal", "--config=c", "--input=i", "--output=o"],
            ["token"],                                     # no subcommand
            ["token", "renew", "--role=read", "--tenants=a"],
            ["token", "new", "--tenants=a"],               # --role missing
            ["token", "new", "--role=owner", "--tenants=a"],
            ["token", "new", "--role=write"],              # no tenants
            ["token", "new", "--role=write", "--tenants=a,bad/name"],
            ["token", "new", "--role=read", "--tenants=a,*"],
            ["token", "new", "--role=admin", "--tenants=a"],
            ["token", "new", "--role=read", "--tenants=a", "--server=x"],
            ["fence"],                                     # --tenant missing
            ["fence", "--tenant=t", "--lift", "--delete_models"],
            ["move", "--tenant=t", "--from=a:1", "--to=b:1"],  # no --route_map
            ["move", "--tenant=t", "--from=a:1", "--to=a:1", "--route_map=m"],
            ["move", "--tenant=t", "--from=a:1", "--to=b:1", "--route_map=m", "--server=x"],
            ["frobnicate"],
            [],
        ]
        for args in cases:
            code, out, err = self.okl(*args)
            self.assertEqual(code, 2, "okl %s\n%s" % (" ".join(args), err))
            self.assertIn("usage: okl", err)
            self.assertEqual(out, "")

    def test_fence_refuses_the_tenants_writes_until_lifted(self):
        self.okl("create", "--tenant=fenced", "--model=m", "--dim=2", expect=0)
        row = self.path("fence-row.csv")
        with open(row, "w") as f:
            f.write("0.1,0.2,0.3\n")
        code, out, _ = self.okl("fence", "--tenant=fenced", expect=0)
        self.assertEqual(out, "fenced tenant fenced: 1 model (m)\n")
        # A write is refused with nothing applied (the tool's writer retries for --timeout).
        code, _, err = self.okl("observe", "--tenant=fenced", "--model=m", "--timeout=1s", row)
        self.assertEqual(code, 1)
        self.assertIn("UNAVAILABLE", err)
        self.assertIn("is being moved", err)
        _, out, _ = self.okl("get", "--tenant=fenced", "--model=m", "--json", expect=0)
        self.assertEqual(json.loads(out)["stats"].get("steps", 0), 0)
        _, out, _ = self.okl("fence", "--tenant=fenced", "--lift", expect=0)
        self.assertEqual(out, "lifted the fence of tenant fenced\n")
        self.okl("observe", "--tenant=fenced", "--model=m", row, expect=0)
        _, out, _ = self.okl("fence", "--tenant=fenced", "--delete_models", "--json", expect=0)
        self.assertEqual(json.loads(out), {"tenant": "fenced", "fenced": True,
                                           "models_deleted": True, "models": ["m"]})
        code, _, err = self.okl("get", "--tenant=fenced", "--model=m")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "okl: UNAVAILABLE: ", "has moved to another replica")
        self.okl("fence", "--tenant=fenced", "--lift", expect=0)

    def test_move_with_a_failed_reload_keeps_the_tenant_on_the_target_and_the_source_fenced(self):
        # The router may have switched before its reload command failed, so a rollback
        # (deleting the target's copy) could lose writes acknowledged there: okl move
        # leaves the tenant moved, the source fenced with its copy, and says what to do.
        target_dir = self.path("move-target")
        os.mkdir(target_dir)
        target = okl_system.OklServer(ARGS.server, target_dir).start()
        try:
            self.okl("create", "--tenant=mv", "--model=m", "--dim=2", expect=0)
            row = self.path("move-row.csv")
            with open(row, "w") as f:
                f.write("0.1,0.2,0.3\n0.4,0.5,-0.6\n")
            self.okl("observe", "--tenant=mv", "--model=m", row, expect=0)
            route_map = self.path("move.map")
            code, _, err = self.okl("move", "--tenant=mv", "--from=" + self.server.address,
                                    "--to=" + target.address, "--route_map=" + route_map,
                                    "--route_reload=false")
            self.assertEqual(code, 1)
            self.assertOneErrorLine(err, "okl: UNAVAILABLE: ", "reload command (false) failed",
                                    "reload the router by hand", "okl fence --delete_models "
                                    "--tenant=mv --server=" + self.server.address)
            self.assertNotIn("rolled back", err)
            with open(route_map) as f:
                self.assertEqual(f.read(), '"mv" %s;\n' % target.address)
            _, out, _ = self.okl("get", "--tenant=mv", "--model=m", "--json",
                                 "--server=" + target.address, expect=0)
            self.assertEqual(json.loads(out)["stats"]["steps"], 2)
            code, _, err = self.okl("observe", "--tenant=mv", "--model=m", "--timeout=1s", row)
            self.assertEqual(code, 1)
            self.assertIn("is being moved", err)
            _, out, _ = self.okl("fence", "--tenant=mv", "--delete_models", expect=0)
            self.assertIn("(m)", out)
        finally:
            self.okl("fence", "--tenant=mv", "--lift")
            code = target.stop()
            self.assertEqual(code, 0, target.log())

    def test_health_is_quiet_when_serving_and_fails_fast_on_a_dead_port(self):
        code, out, err = self.okl("health")
        self.assertEqual((code, out, err), (0, "", ""))
        code, out, _ = self.okl("health", "--json")
        self.assertEqual(code, 0)
        self.assertEqual(json.loads(out)["status"], "SERVING")

        with socket.socket() as s:  # a port nobody listens on (just released)
            s.bind(("127.0.0.1", 0))
            dead = "127.0.0.1:%d" % s.getsockname()[1]
        start = time.monotonic()
        code, out, err = self.okl("health", "--server=" + dead, "--timeout=3s")
        elapsed = time.monotonic() - start
        self.assertEqual(code, 1)
        self.assertEqual(out, "")
        self.assertOneErrorLine(err, "okl: UNAVAILABLE: ")
        self.assertLess(elapsed, 2.5)

    def test_tls_and_token_options_reach_the_client(self):
        # The test server has neither TLS nor authentication: a token is sent and ignored,
        # TLS fails its handshake (one line: gRPC's own log stays quiet), a missing CA file
        # is named, and a certificate without its key is a usage error.
        self.okl("health", "--token=secret", expect=0)
        env = dict(self.env)
        env["OKL_TOKEN"] = "secret"
        self.assertEqual(self.okl("health", env=env)[0], 0)
        code, _, err = self.okl("health", "--tls", "--timeout=2s")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "okl: UNAVAILABLE: ")
        code, _, err = self.okl("health", "--tls_ca=" + self.path("no-such-ca.pem"))
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "okl: NOT_FOUND: --tls_ca file: cannot open ")
        code, _, err = self.okl("health", "--tls_cert=" + self.path("cert.pem"))
        self.assertEqual(code, 2)
        self.assertIn("--tls_cert and --tls_key go together", err)

    # --- --json ------------------------------------------------------------------------

    def test_json_output_is_one_object_per_command(self):
        base = ["--tenant=json", "--model=m", "--json"]

        def run(*args):
            _, out, _ = self.okl(*(list(args) + base), expect=0)
            self.assertEqual(out.count("\n"), 1, out)
            return json.loads(out)

        created = run("create", *MG_FLAGS)
        self.assertEqual(created["config"]["dim"], 7)
        self.assertEqual(created["config"]["kernel"], {"gaussian": {"gamma": 1}})
        self.assertEqual(created["config"]["budget"]["max_terms"], 64)
        observed = run("observe", "--limit=300", self.mg_csv)
        self.assertEqual(observed["examples"], 300)
        self.assertEqual(observed["steps"], 300)
        self.assertEqual(observed["expansion_size"], 64)
        self.assertNotIn("mistakes", observed)  # a regression model
        got = run("get")
        self.assertEqual(got["stats"]["steps"], 300)
        self.assertAlmostEqual(got["stats"]["cumulative_loss"] / 300,
                               observed["average_loss"], places=12)
        _, out, _ = self.okl("list", "--tenant=json", "--json", expect=0)
        listed = json.loads(out)
        self.assertEqual([m["model"] for m in listed["models"]], ["m"])
        predicted = run("predict", "--x=0.1,0.2,0.3,0.4,0.5,0.6,0.7", "--x=3:1")
        self.assertEqual(predicted["count"], 2)
        self.assertEqual(len(predicted["predictions"]), 2)
        snapshot = self.path("json.snapshot")
        self.assertGreater(run("snapshot", "--output=" + snapshot)["bytes"], 0)
        self.assertTrue(run("delete")["deleted"])
        self.assertEqual(run("restore", "--input=" + snapshot)["stats"]["steps"], 300)
        again = run("predict", "--x=0.1,0.2,0.3,0.4,0.5,0.6,0.7", "--x=3:1")
        self.assertEqual(again["predictions"], predicted["predictions"])
        _, out, _ = self.okl("replay", "--config=" + self.mg_config, "--input=" + self.mg_csv,
                             "--output=" + self.path("json-replay.txt"), "--json", expect=0)
        self.assertEqual(json.loads(out)["examples"], 1000)

    # --- Learning curves ---------------------------------------------------------------

    def test_get_shows_merge_the_learned_margin_the_offset_and_terms_removed(self):
        base = ["--tenant=stats", "--model=m"]
        self.okl("create", *base, "--dim=7", "--kernel=gaussian", "--gamma=1",
                 "--loss=epsilon_insensitive", "--epsilon=0.1", "--nu=0.3", "--eta0=0.5",
                 "--lambda=0.001", "--offset", "--max_terms=32", "--policy=merge", expect=0)
        self.okl("observe", *base, "--limit=300", self.mg_csv, expect=0)
        _, text, _ = self.okl("get", *base, expect=0)
        _, out, _ = self.okl("get", *base, "--json", expect=0)
        got = json.loads(out)
        self.assertEqual(got["config"]["budget"]["policy"], "MERGE")
        stats = got["stats"]
        self.assertEqual(stats["expansion_size"], 32)
        self.assertGreater(stats["terms_removed"], 0)
        self.assertNotEqual(stats["epsilon"], 0.1)  # learned by the nu-trick
        self.assertNotIn("rho", stats)
        self.assertIn("offset", stats)
        self.assertIn("\nterms removed    %d\n" % stats["terms_removed"], text)
        self.assertRegex(text, r"\nepsilon +\S+ \(learned\)\n")
        self.assertRegex(text, r"\noffset +\S+\n")
        self.assertIn("policy: MERGE", text)
        # MERGE merges points, which only the gaussian kernel's form allows.
        code, out, err = self.okl("create", "--tenant=stats", "--model=laplacian", "--dim=2",
                                  "--kernel=laplacian", "--policy=merge")
        self.assertEqual((code, out), (2, ""))
        self.assertIn("MERGE", err)

    def test_create_and_get_a_multi_class_model(self):
        base = ["--tenant=classes", "--model=m"]
        self.okl("create", *base, "--dim=4", "--loss=multiclass_hinge", "--rho=0.5",
                 "--max_classes=26", "--max_terms=100", "--policy=merge", "--eta0=0.5",
                 "--lambda=0.01", expect=0)
        _, text, _ = self.okl("get", *base, expect=0)
        _, out, _ = self.okl("get", *base, "--json", expect=0)
        got = json.loads(out)
        self.assertEqual(got["config"]["max_classes"], 26)
        self.assertEqual(got["config"]["loss"]["multiclass_hinge"]["rho"], 0.5)
        self.assertEqual(got["stats"]["classes"], [])
        self.assertEqual(got["stats"]["max_classes"], 26)
        self.assertEqual(got["stats"]["mistakes"], 0)
        self.assertIn("\nclasses          0 of at most 26\n", text)
        # A multi-class loss needs --max_classes; no other loss takes it.
        code, out, err = self.okl("create", "--tenant=classes", "--model=none", "--dim=4",
                                  "--loss=softmax")
        self.assertEqual((code, out), (2, ""))
        self.assertIn("max_classes must be in [2, ", err)
        code, out, err = self.okl("create", "--tenant=classes", "--model=binary", "--dim=4",
                                  "--loss=hinge", "--max_classes=3")
        self.assertEqual((code, out), (2, ""))
        self.assertIn("--max_classes does not apply to the hinge loss", err)

    def test_observe_and_predict_named_classes(self):
        """A multi-class model learns the CSV's last column as its class, and predict
        prints each input's class (--json: the scores and a softmax model's
        probabilities too)."""
        base = ["--tenant=classes", "--model=sat"]
        with open(os.path.join(ARGS.data_dir, "satimage.csv")) as f:
            rows = [line.rstrip("\n") for line in f][:600]
        train = self.path("sat-train.csv")
        with open(train, "w") as f:
            f.write("\n".join(rows[:500]) + "\n")
        probes = self.path("sat-probes.csv")
        with open(probes, "w") as f:
            f.write("\n".join(r.rsplit(",", 1)[0] for r in rows[500:]) + "\n")
        truth = [r.rsplit(",", 1)[1] for r in rows[500:]]
        self.okl("create", *base, "--dim=36", "--loss=softmax", "--max_classes=6",
                 "--gamma=0.0001", "--eta0=0.5", "--lambda=0.0001", "--max_terms=100",
                 "--policy=merge", expect=0)
        _, out, _ = self.okl("observe", *base, "--json", train, expect=0)
        observed = json.loads(out)
        self.assertEqual(observed["examples"], 500)
        self.assertLess(observed["mistakes"], 150)  # prequential; 6 classes
        _, out, _ = self.okl("get", *base, "--json", expect=0)
        stats = json.loads(out)["stats"]
        self.assertEqual(stats["mistakes"], observed["mistakes"])
        first_seen = list(dict.fromkeys(r.rsplit(",", 1)[1] for r in rows[:500]))
        self.assertEqual(stats["classes"], first_seen)
        _, text, _ = self.okl("predict", *base, probes, expect=0)
        predicted = text.splitlines()
        self.assertEqual(len(predicted), 100)
        self.assertTrue(set(predicted) <= set(first_seen), predicted)
        self.assertGreater(sum(p == t for p, t in zip(predicted, truth)), 70)
        _, out, _ = self.okl("predict", *base, "--json", probes, expect=0)
        got = json.loads(out)
        self.assertEqual(got["predicted_classes"], predicted)
        for scores, probabilities, name, prediction in zip(
                got["class_scores"], got["probabilities"], predicted, got["predictions"]):
            self.assertEqual(len(scores), len(first_seen))
            self.assertEqual(first_seen[scores.index(max(scores))], name)
            self.assertEqual(prediction, max(scores))
            self.assertAlmostEqual(sum(probabilities), 1.0, places=12)
        # A row without its class names the column.
        code, _, err = self.okl("observe", *base, "-", stdin_text=rows[0].rsplit(",", 1)[0] + ",\n")
        self.assertEqual(code, 1)
        self.assertIn("no class in column 37", err)

    def test_observe_curve_matches_replay_bit_for_bit(self):
        self.okl("create", "--tenant=curve", "--model=mg", *MG_FLAGS, expect=0)
        curve = self.path("observe-curve.csv")
        _, out, _ = self.okl("observe", "--tenant=curve", "--model=mg", "--batch_size=100",
                             "--curve=" + curve, self.mg_csv, expect=0)
        self.assertIn("curve            " + curve, out)
        header, rows = read_curve(curve)
        self.assertEqual(header, ["step", "loss", "cumulative_average_loss", "expansion_size"])
        self.assertEqual(len(rows), 1000)
        self.assertEqual([r[0] for r in rows], list(range(1, 1001)))
        total = 0.0
        for i, (_, loss, average, _) in enumerate(rows):
            total += loss
            self.assertTrue(math.isclose(average, total / (i + 1), rel_tol=1e-12),
                            "row %d: %r vs %r" % (i + 1, average, total / (i + 1)))
        sizes = [r[3] for r in rows]
        self.assertEqual(sizes, sorted(sizes))
        self.assertEqual(sizes[-1], 64)
        _, out, _ = self.okl("get", "--tenant=curve", "--model=mg", "--json", expect=0)
        stats = json.loads(out)["stats"]
        self.assertEqual(stats["expansion_size"], 64)
        self.assertTrue(math.isclose(stats["cumulative_loss"], total, rel_tol=1e-12))

        # The same rows through the same config offline: okl and okl_server link the same
        # build of core (ctest passes both from one build tree), so every loss is the same
        # double, and the expansion sizes agree where observe knows them (the last row of
        # each acknowledged message of 100). A core compiled differently (another compiler
        # or -O level) may round differently.
        replay_curve = self.path("replay-curve.csv")
        self.okl("replay", "--local", "--config=" + self.mg_config, "--input=" + self.mg_csv,
                 "--output=" + self.path("replay-predictions.txt"),
                 "--curve=" + replay_curve, expect=0)
        header, replayed = read_curve(replay_curve)
        self.assertEqual(len(replayed), 1000)
        self.assertEqual([r[1] for r in replayed], [r[1] for r in rows])
        self.assertEqual([r[2] for r in replayed], [r[2] for r in rows])
        self.assertEqual([replayed[i][3] for i in range(99, 1000, 100)],
                         [rows[i][3] for i in range(99, 1000, 100)])
        # A curve changes nothing about replay's predictions.
        self.okl("replay", "--config=" + self.mg_config, "--input=" + self.mg_csv,
                 "--output=" + self.path("plain-predictions.txt"), expect=0)
        with open(self.path("replay-predictions.txt"), "rb") as a, \
                open(self.path("plain-predictions.txt"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    @unittest.skipIf(shutil.which("gnuplot") is None, "gnuplot is not installed (gnuplot-nox)")
    def test_plot_writes_png_and_svg(self):
        self.okl("create", "--tenant=plot", "--model=mg", *MG_FLAGS, expect=0)
        png = self.path("curve.png")
        self.okl("observe", "--tenant=plot", "--model=mg", "--plot=" + png, self.mg_csv,
                 expect=0)
        with open(png, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(len(data), 5000)
        svg = self.path("curve.svg")
        self.okl("replay", "--config=" + self.mg_config, "--input=" + self.mg_csv,
                 "--output=" + self.path("svg-predictions.txt"), "--plot=" + svg, expect=0)
        with open(svg) as f:
            self.assertIn("<svg", f.read())

    def test_plot_without_gnuplot_says_what_to_install(self):
        code, _, err = self.okl("replay", "--config=" + self.mg_config,
                                "--input=" + self.mg_csv,
                                "--output=" + self.path("nognuplot.txt"),
                                "--plot=" + self.path("nognuplot.png"),
                                "--gnuplot=/nonexistent/gnuplot")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "gnuplot-nox")

    # --- Streaming: stdin, progress, resuming ------------------------------------------

    def test_observe_from_stdin_with_progress(self):
        self.okl("create", "--tenant=stream", "--model=stdin", *MG_FLAGS, expect=0)
        with open(self.mg_csv) as f:
            text = f.read()
        _, out, err = self.okl("observe", "--tenant=stream", "--model=stdin", "--progress",
                               "-", stdin_text=text, expect=0)
        self.assertIn("observed 1,000 examples into stream/stdin", out)
        self.assertIn("average loss", out)
        self.assertIn("observe: 1,000 rows", err)
        self.assertIn("rows/s", err)
        self.assertIn("avg loss", err)
        self.assertNotIn("ETA", err)  # a pipe has no known size
        # From a file the size is known: a percentage and an ETA. Without --progress and
        # without a terminal: nothing on stderr.
        self.okl("create", "--tenant=stream", "--model=file", *MG_FLAGS, expect=0)
        _, _, err = self.okl("observe", "--tenant=stream", "--model=file", "--progress",
                             self.mg_csv, expect=0)
        self.assertIn("observe: 1,000 rows (100.0%)", err)
        self.assertIn("ETA 0:00", err)
        _, _, err = self.okl("observe", "--tenant=stream", "--model=file", self.mg_csv,
                             expect=0)
        self.assertEqual(err, "")

    def test_a_bad_row_stops_observe_and_skip_resumes_after_it(self):
        self.okl("create", "--tenant=stream", "--model=resume", *MG_FLAGS, expect=0)
        with open(self.mg_csv) as f:
            lines = f.read().splitlines()
        broken = self.path("broken.csv")
        with open(broken, "w") as f:
            f.write("\n".join(lines[:500] + ["1,2,oops,4,5,6,7,8"] + lines[500:]) + "\n")
        code, _, err = self.okl("observe", "--tenant=stream", "--model=resume", broken)
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "okl: INVALID_ARGUMENT: %s:501: bad number 'oops'"
                                % broken, "--skip=500")
        _, out, _ = self.okl("get", "--tenant=stream", "--model=resume", "--json", expect=0)
        self.assertEqual(json.loads(out)["stats"]["steps"], 500)
        # Fixed (here: the bad row left out), the rerun skips what was applied.
        self.okl("observe", "--tenant=stream", "--model=resume", "--skip=500", self.mg_csv,
                 expect=0)
        _, out, _ = self.okl("get", "--tenant=stream", "--model=resume", "--json", expect=0)
        self.assertEqual(json.loads(out)["stats"]["steps"], 1000)

    def test_predict_reads_csv_and_libsvm_and_writes_stdout(self):
        self.okl("create", "--tenant=stream", "--model=predict", *MG_FLAGS, expect=0)
        self.okl("observe", "--tenant=stream", "--model=predict", "--limit=200", self.mg_csv,
                 expect=0)
        with open(self.mg_csv) as f:
            rows = [line.split(",")[:7] for line in f.read().splitlines()[:5]]
        csv_inputs = "".join(",".join(r) + "\n" for r in rows)
        libsvm_inputs = "".join(
            "0 " + " ".join("%d:%s" % (i + 1, v) for i, v in enumerate(r)) + "\n" for r in rows)
        _, from_csv, _ = self.okl("predict", "--tenant=stream", "--model=predict", "-",
                                  stdin_text=csv_inputs, expect=0)
        _, from_libsvm, _ = self.okl("predict", "--tenant=stream", "--model=predict",
                                     "--format=libsvm", "-", stdin_text=libsvm_inputs,
                                     expect=0)
        _, from_flags, _ = self.okl("predict", "--tenant=stream", "--model=predict",
                                    *["--x=" + ",".join(r) for r in rows], expect=0)
        self.assertEqual(len(from_csv.splitlines()), 5)
        self.assertEqual(from_csv, from_libsvm)
        self.assertEqual(from_csv, from_flags)

    def test_krls_tracker_from_flags_predicts_with_variances_and_replays_bit_for_bit(self):
        base = ["--tenant=tracker", "--model=mg"]
        tracker_flags = ["--dim=7", "--kernel=gaussian", "--gamma=1", "--loss=squared",
                         "--max_basis=40", "--noise_variance=1e-4", "--forgetting=0.999"]
        self.okl("create", *base, *tracker_flags, expect=0)
        self.okl("observe", *base, "--batch_size=100", "--limit=400", self.mg_csv, expect=0)
        _, text, _ = self.okl("get", *base, expect=0)
        _, out, _ = self.okl("get", *base, "--json", expect=0)
        got = json.loads(out)
        self.assertEqual(got["config"]["krls_tracker"]["max_basis"], 40)
        self.assertNotIn("learning_rate", got["config"])
        stats = got["stats"]
        self.assertEqual(stats["dictionary_size"], 40)
        self.assertEqual(stats["bases_pruned"], stats["terms_removed"])
        self.assertGreater(stats["noise_variance"], 0)
        self.assertIn("\ndictionary size  40\n", text)
        self.assertIn("\nbases pruned     %d\n" % stats["bases_pruned"], text)

        # Each line: the prediction and its variance; --json: a "variances" array.
        with open(self.mg_csv) as f:
            rows = [line.split(",")[:7] for line in f.read().splitlines()[400:403]]
        xs = ["--x=" + ",".join(r) for r in rows]
        _, lines, _ = self.okl("predict", *base, *xs, expect=0)
        pairs = [line.split(" ") for line in lines.splitlines()]
        self.assertEqual([len(p) for p in pairs], [2, 2, 2])
        self.assertTrue(all(float(p[1]) > 0 for p in pairs), lines)
        _, out, _ = self.okl("predict", *base, *xs, "--json", expect=0)
        got = json.loads(out)
        self.assertEqual([repr(v) for v in got["predictions"]],
                         [repr(float(p[0])) for p in pairs])
        self.assertEqual(len(got["variances"]), 3)

        # The same 400 rows offline give the same losses, bit for bit.
        config = self.path("tracker.textproto")
        with open(config, "w") as f:
            f.write("dim: 7 kernel { gaussian { gamma: 1 } } loss { squared {} }\n"
                    "krls_tracker { max_basis: 40 noise_variance: 1e-4 forgetting: 0.999 }\n")
        _, out, _ = self.okl("get", *base, "--json", expect=0)
        served = json.loads(out)["stats"]["cumulative_loss"]
        first_rows = self.path("mg30-400.csv")
        with open(self.mg_csv) as f, open(first_rows, "w") as out:
            out.write("".join(f.readlines()[:400]))
        _, out, _ = self.okl("replay", "--config=" + config, "--input=" + first_rows,
                             "--json", "--output=" + self.path("t.txt"), expect=0)
        self.assertEqual(json.loads(out)["cumulative_loss"], served)

        # The tracker's flags without --max_basis are a usage error.
        code, out, err = self.okl("create", "--tenant=tracker", "--model=bad", "--dim=2",
                                  "--noise_variance=0.1")
        self.assertEqual((code, out), (2, ""))
        self.assertIn("--max_basis", err)

    # --- Bearer tokens ------------------------------------------------------------------

    def test_token_new_prints_a_token_and_the_line_with_its_hash(self):
        env = dict(self.env)
        env["OKL_SERVER"] = "127.0.0.1:1"  # no server is needed
        _, out, err = self.okl("token", "new", "--role=write", "--tenants=b,a", env=env,
                               expect=0)
        self.assertEqual(err, "")
        lines = out.split("\n")
        self.assertEqual(len(lines), 3, out)  # two lines, each ending in a newline
        token, line = lines[0], lines[1]
        self.assertRegex(token, r"^okl_[A-Za-z0-9_-]{43}$")
        digest, role, tenants = line.split(" ")
        self.assertEqual(digest, hashlib.sha256(token.encode()).hexdigest())
        self.assertEqual((role, tenants), ("write", "a,b"))
        self.assertNotIn(token, line)

        _, again, _ = self.okl("token", "new", "--role=write", "--tenants=b,a", expect=0)
        self.assertNotEqual(again.split("\n")[0], token)

        _, out, _ = self.okl("token", "new", "--role=read", "--tenants=*", expect=0)
        self.assertTrue(out.split("\n")[1].endswith(" read *"), out)

        _, out, _ = self.okl("token", "new", "--role=admin", "--json", expect=0)
        self.assertEqual(out.count("\n"), 1, out)
        made = json.loads(out)
        self.assertEqual(sorted(made), ["line", "role", "tenants", "token"])
        self.assertEqual((made["role"], made["tenants"]), ("admin", ["*"]))
        self.assertEqual(made["line"],
                         hashlib.sha256(made["token"].encode()).hexdigest() + " admin *")

    # --- Delayed feedback: predict --remember, label -------------------------------------

    def test_remembered_predictions_take_their_labels_once_in_any_order(self):
        base = ["--tenant=delay", "--model=clicks"]
        self.okl("create", *base, *MG_FLAGS, expect=0)
        self.okl("observe", *base, "--limit=100", self.mg_csv, expect=0)
        with open(self.mg_csv) as f:
            rows = [line.split(",") for line in f.read().splitlines()[100:103]]
        inputs = "".join(",".join(r[:7]) + "\n" for r in rows)
        _, plain, _ = self.okl("predict", *base, "-", stdin_text=inputs, expect=0)
        _, out, _ = self.okl("predict", *base, "--remember", "--event_ids=a,b,c",
                             "--wait_seconds=600", "-", stdin_text=inputs, expect=0)
        # "event_id,prediction", the predictions those of a plain predict.
        lines = [line.split(",") for line in out.splitlines()]
        self.assertEqual([l[0] for l in lines], ["a", "b", "c"])
        self.assertEqual([l[1] for l in lines], plain.split())
        _, out, _ = self.okl("predict", *base, "--remember", "--x=" + ",".join(rows[0][:7]),
                             expect=0)
        server_id, prediction = out.strip().split(",")
        self.assertRegex(server_id, "^[0-9a-f]{33,48}$")
        self.assertEqual(prediction, plain.split()[0])

        labels = ("# clicks, late and out of order\n"
                  "c,%s\n\nb,%s\nc,5\nnobody,1\n%s,0.25\n" % (rows[2][7], rows[1][7], server_id))
        _, out, err = self.okl("label", *base, "-", stdin_text=labels, expect=0)
        self.assertEqual(out.splitlines(), ["c,applied", "b,applied", "c,duplicate",
                                            "nobody,unknown", server_id + ",applied"])
        self.assertEqual(err, "sent 5 labels to delay/clicks: 3 applied, 1 duplicate, "
                              "1 unknown; model 103 steps\n")
        _, out, _ = self.okl("get", *base, "--json", expect=0)
        self.assertEqual(json.loads(out)["stats"]["steps"], 103)
        # The same labels again, in batches of two: nothing applies twice.
        _, out, _ = self.okl("label", *base, "--batch_size=2", "--json", "-",
                             stdin_text=labels, expect=0)
        result = json.loads(out)
        self.assertEqual(result["outcomes"], ["duplicate", "duplicate", "duplicate", "unknown",
                                              "duplicate"])
        self.assertEqual(result["event_ids"], ["c", "b", "c", "nobody", server_id])
        self.assertEqual((result["applied"], result["duplicate"], result["unknown"],
                          result["steps"]), (0, 4, 1, 103))
        # okl get shows the counts: a still pending; 3 applied; 1 + 4 duplicates.
        _, out, _ = self.okl("get", *base, "--json", expect=0)
        events = json.loads(out)["events"]
        self.assertEqual((events["pending"], events["applied"], events["expired"],
                          events["duplicates"], events["served_labels"]), (1, 3, 0, 5, 3))
        self.assertGreater(events["served_loss"], 0)
        _, out, _ = self.okl("get", *base, expect=0)
        self.assertIn("events pending   1\nlabels applied   3 (served loss ", out)
        self.assertIn("labels duplicate 5\n", out)
        self.assertLess(out.index("labels duplicate"), out.index("config\n"))
        # A model that never remembered an event shows no such lines.
        self.okl("create", "--tenant=delay", "--model=plain", "--dim=2", expect=0)
        _, out, _ = self.okl("get", "--tenant=delay", "--model=plain", expect=0)
        self.assertNotIn("events pending", out)
        # okl list shows each model's pending events, in its last column.
        _, out, _ = self.okl("list", "--tenant=delay", expect=0)
        header, *listed = [line.split() for line in out.splitlines()]
        self.assertEqual(header[-1], "PENDING")
        pending = {row[1]: row[-1] for row in listed}  # (other tests' models too)
        self.assertEqual((pending["clicks"], pending["plain"]), ("1", "0"))
        _, out, _ = self.okl("list", "--tenant=delay", "--json", expect=0)
        pending = {m["model"]: m["events"]["pending"] for m in json.loads(out)["models"]}
        self.assertEqual((pending["clicks"], pending["plain"]), (1, 0))

    def test_docs_delayed_feedback_example_labels_both_impressions(self):
        bin_dir = self.path("delayed/bin")
        os.makedirs(bin_dir)
        os.symlink(os.path.abspath(ARGS.okl), os.path.join(bin_dir, "okl"))
        env = dict(self.env)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env["OKL_TENANT"] = "cli-doc-delayed"
        example = doc_sh_block(ARGS.repo, CLI_DOC, DELAYED_FEEDBACK_MARKER)
        self.assertIn("okl label", example)
        result = self.run_block(example, self.path("delayed"), env)
        lines = result.stdout.splitlines()
        remembered = [l for l in lines if l.startswith("imp-")][:2]
        self.assertEqual([l.split(",")[0] for l in remembered], ["imp-1", "imp-2"])
        self.assertEqual(lines[-2:], ["imp-2,applied", "imp-1,applied"])
        self.assertIn("2 applied, 0 duplicate, 0 unknown; model 2 steps", result.stderr)

    def test_an_event_whose_wait_ends_learns_its_default_label(self):
        base = ["--tenant=delay", "--model=defaults"]
        self.okl("create", *base, "--dim=2", "--loss=squared", expect=0)
        _, out, _ = self.okl("predict", *base, "--remember", "--event_ids=late",
                             "--wait_seconds=0.2", "--default_label=0.5", "--x=0.1,0.2",
                             expect=0)
        self.assertTrue(out.startswith("late,"), out)
        give_up = time.monotonic() + 10
        steps = 0
        while steps == 0 and time.monotonic() < give_up:
            time.sleep(0.1)
            _, got, _ = self.okl("get", *base, "--json", expect=0)
            steps = json.loads(got)["stats"]["steps"]
        self.assertEqual(steps, 1)  # the default label, learned by the server's sweep
        _, out, _ = self.okl("label", *base, "-", stdin_text="late,1\n", expect=0)
        self.assertEqual(out, "late,unknown\n")

    def test_label_and_remember_errors(self):
        base = ["--tenant=delay", "--model=errors"]
        self.okl("create", *base, "--dim=2", "--loss=squared", expect=0)
        self.okl("predict", *base, "--remember", "--event_ids=ok", "--x=1,2", expect=0)
        for bad, what in [("ok 1\n", "<stdin>:1: expected event_id,y, got 'ok 1' (no comma)"),
                          ("ok,1\nok,inf\n", "<stdin>:2: non-finite number 'inf' as the label"),
                          ("ok,x\n", "<stdin>:1: bad number 'x' as the label"),
                          (",1\n", "<stdin>:1: the event id before the comma is empty")]:
            code, out, err = self.okl("label", *base, "-", stdin_text=bad)
            self.assertEqual(code, 1, err)
            self.assertEqual(out, "")
            self.assertOneErrorLine(err, "okl: INVALID_ARGUMENT: " + what)
        # A bad line stops label before its batch: "ok" still takes its first label.
        _, out, _ = self.okl("label", *base, "-", stdin_text="ok,3\n", expect=0)
        self.assertEqual(out, "ok,applied\n")
        # After a batch was sent, the message says so.
        code, out, err = self.okl("label", *base, "--batch_size=1", "-",
                                  stdin_text="ok,3\nbroken\n")
        self.assertEqual(code, 1)
        self.assertEqual(out, "ok,duplicate\n")
        self.assertOneErrorLine(err, "<stdin>:2: ", "1 labels were sent before")
        # A y the loss refuses is the server's INVALID_ARGUMENT (hinge takes -1 and +1).
        self.okl("create", "--tenant=delay", "--model=hinge", "--dim=2", "--loss=hinge",
                 expect=0)
        self.okl("predict", "--tenant=delay", "--model=hinge", "--remember",
                 "--event_ids=h", "--x=1,2", expect=0)
        code, _, err = self.okl("label", "--tenant=delay", "--model=hinge", "-",
                                stdin_text="h,0.5\n")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "okl: INVALID_ARGUMENT: ")
        # Ids that do not match the inputs: nothing is predicted, nothing remembered.
        code, out, err = self.okl("predict", *base, "--remember", "--event_ids=x1,x2",
                                  "--x=1,2", "--x=3,4", "--x=5,6")
        self.assertEqual(code, 1)
        self.assertEqual(out, "")
        self.assertOneErrorLine(err, "--event_ids gives 2 ids for 3 or more inputs")
        code, out, err = self.okl("predict", *base, "--remember", "--event_ids=x1,x2,x3",
                                  "--x=1,2", "--x=3,4")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "--event_ids gives 3 ids for 2 inputs")
        _, out, _ = self.okl("label", *base, "-", stdin_text="x1,1\n", expect=0)
        self.assertEqual(out, "x1,unknown\n")
        # An id used before: the server's ALREADY_EXISTS.
        code, _, err = self.okl("predict", *base, "--remember", "--event_ids=ok", "--x=1,2")
        self.assertEqual(code, 1)
        self.assertOneErrorLine(err, "okl: ALREADY_EXISTS: ")
        # Usage errors: exit 2.
        for args in (["predict", *base, "--event_ids=a", "--x=1,2"],
                     ["predict", *base, "--wait_seconds=5", "--x=1,2"],
                     ["predict", *base, "--remember", "--wait_seconds=-1", "--x=1,2"],
                     ["predict", *base, "--remember", "--default_label=nan", "--x=1,2"],
                     ["label", *base],
                     ["label", *base, "--batch_size=0", "-"],
                     ["label", *base, "--x=1,2", "-"]):
            code, out, err = self.okl(*args)
            self.assertEqual(code, 2, "okl %s\n%s" % (" ".join(args), err))
            self.assertIn("usage: okl", err)

    # --- Help -------------------------------------------------------------------------

    def test_help(self):
        _, out, _ = self.okl("help", expect=0)
        for command in ("create", "get", "list", "delete", "observe", "predict", "label",
                        "snapshot", "restore", "health", "replay", "token"):
            self.assertIn("  " + command + " ", out)
        _, help_observe, _ = self.okl("help", "observe", expect=0)
        _, dash_help, _ = self.okl("observe", "--help", expect=0)
        self.assertEqual(help_observe, dash_help)
        self.assertIn("usage: okl observe", help_observe)
        self.assertIn("--curve", help_observe)
        self.assertIn("--server", help_observe)
        self.assertNotIn("--dim", help_observe)
        _, help_predict, _ = self.okl("help", "predict", expect=0)
        for flag in ("--remember", "--event_ids", "--wait_seconds", "--default_label"):
            self.assertIn(flag, help_predict)
        self.okl("help", "nothing", expect=2)
        _, out, _ = self.okl("--version", expect=0)  # the container build runs it
        self.assertTrue(out.startswith("okl "), out)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--okl", required=True, help="the okl binary")
    parser.add_argument("--server", required=True, help="the okl_server binary")
    parser.add_argument("--repo", required=True, help="the repository root")
    parser.add_argument("--data_dir", required=True, help="the repository's data/")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
