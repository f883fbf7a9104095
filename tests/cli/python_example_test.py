#!/usr/bin/python3
"""client/python/okl_example.py against a real okl_server.

Run by ctest with Debian's /usr/bin/python3:

  python_example_test.py --example=client/python/okl_example.py \
      --server=build/server/okl_server --okl=build/client/okl --protoc=/usr/bin/protoc \
      --grpc_python_plugin=/usr/bin/grpc_python_plugin --proto_dir=proto \
      --data_dir=data

The example generates its stubs itself (into a temporary directory), streams the
Mackey-Glass series (embedded on the fly) and a CSV file, and prints predictions; the
test checks them against `okl predict` on the same model and inputs, exactly, and that
the model learned (its last tenth's mean loss is under its first tenth's).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "system"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import okl_system  # noqa: E402 (the shared server harness)

ARGS = None
TIMEOUT_S = 60
LAGS = 7


class PythonExampleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="okl_python_example_test.")
        cls.server = okl_system.OklServer(ARGS.server, cls.tmp.name).start()

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        cls.tmp.cleanup()
        if code != 0:
            raise AssertionError("okl_server did not exit 0 on SIGTERM (%s)" % code)

    def run_example(self, *args):
        result = subprocess.run(
            [sys.executable, ARGS.example, "--server=" + self.server.address,
             "--protoc=" + ARGS.protoc, "--grpc_python_plugin=" + ARGS.grpc_python_plugin,
             "--proto_dir=" + ARGS.proto_dir] + list(args),
            capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(result.returncode, 0,
                         "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        return result.stdout

    def predictions(self, out):
        """The example's CSV tail: [(row, target, prediction)]."""
        lines = out.splitlines()
        start = lines.index("row,target,prediction") + 1
        return [(int(r), float(y), float(p))
                for r, y, p in (line.split(",") for line in lines[start:])]

    def okl_predict(self, model, inputs):
        args = [ARGS.okl, "predict", "--server=" + self.server.address, "--tenant=python",
                "--model=" + model] + ["--x=" + ",".join(repr(v) for v in x) for x in inputs]
        result = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(result.returncode, 0, result.stderr)
        return [float(v) for v in result.stdout.split()]

    def embedded_rows(self):
        with open(os.path.join(ARGS.data_dir, "mg30.dat")) as f:
            series = [float(line) for line in f if line.strip()]
        return [([series[n - k] if n - k >= 0 else 0.0 for k in range(LAGS)], series[n + 1])
                for n in range(len(series) - 1)]

    def test_streams_a_series_and_its_predictions_match_okl_predict(self):
        out = self.run_example("--model=mg30", "--embedding=%d" % LAGS, "--predict=5",
                               os.path.join(ARGS.data_dir, "mg30.dat"))
        self.assertIn("created python/mg30: dim 7", out)
        summary = [line for line in out.splitlines() if line.startswith("streamed ")]
        self.assertEqual(len(summary), 1, out)
        self.assertIn("streamed 4999 examples: 4999 steps, 512 terms", summary[0])
        first = float(summary[0].split("first tenth ")[1].split(",")[0])
        last = float(summary[0].split("last tenth ")[1].rstrip(")"))
        self.assertLess(last, first)

        rows = self.embedded_rows()
        printed = self.predictions(out)
        self.assertEqual([r for r, _, _ in printed], list(range(4995, 5000)))
        self.assertEqual([y for _, y, _ in printed], [y for _, y in rows[-5:]])
        # The same model, the same inputs, through the C++ client: the same doubles.
        self.assertEqual([p for _, _, p in printed],
                         self.okl_predict("mg30", [x for x, _ in rows[-5:]]))
        for _, y, p in printed:
            self.assertLess(abs(p - y), 0.2)

    def test_streams_a_csv_file(self):
        csv = os.path.join(self.tmp.name, "rows.csv")
        rows = self.embedded_rows()[:600]
        with open(csv, "w") as f:
            f.write("# x1..x7,y\n")
            for x, y in rows:
                f.write(",".join(repr(v) for v in x + [y]) + "\n")
        out = self.run_example("--model=csv", "--max_terms=100", "--batch=64", "--predict=3",
                               "--delete", csv)
        self.assertIn("streamed 600 examples: 600 steps, 100 terms", out)
        self.assertEqual(len(self.predictions(out)), 3)
        # --delete removed it.
        result = subprocess.run([ARGS.okl, "get", "--server=" + self.server.address,
                                 "--tenant=python", "--model=csv"],
                                capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(result.returncode, 1)
        self.assertIn("NOT_FOUND", result.stderr)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--okl", required=True)
    parser.add_argument("--protoc", default="/usr/bin/protoc")
    parser.add_argument("--grpc_python_plugin", default="/usr/bin/grpc_python_plugin")
    parser.add_argument("--proto_dir", required=True)
    parser.add_argument("--data_dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
