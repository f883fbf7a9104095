#!/usr/bin/python3
"""The okl package's cost over raw generated stubs, and its observe() rate.

Measured side by side in one run, against one okl_server (started here, memory only, on
a free loopback port, unless --address names a running one):

  1. a 64-example Observe: the package's model.observe(X, y) of a numpy array, against
     the generated stub's Observe with the request built from the same array as
     client/python/okl_example.py builds it (pb.Example(x=pb.Vector(values=row), y=label));
  2. a one-input Predict: model.predict(x) against the stub's Predict;
  3. a 100,000-example model.observe(X, y) from a numpy array into one model.

Calls 1 and 2 alternate package and raw call by call, so that both see the same machine;
each figure is the median time of one call. The targets (docs/python.md,
"Performance"): at most 10% over raw for 1 and 2, at least 200,000 examples/s for 3.

  /usr/bin/python3 client/python/bench/okl_python_bench.py \
      --server=build/release/server/okl_server            # the okl package importable

The package must be importable: installed (pip install ./client/python), or
--site=DIR naming where pip --target put it.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..", "..")

DIM = 8
CONFIG = ("dim: %d kernel { gaussian { gamma: 0.1 } } loss { squared {} } "
          "learning_rate { eta0: 0.2 } lambda: 0.001 budget { max_terms: 64 }" % DIM)


def side_by_side(package, raw, calls):
    """The median seconds of one call of each, timed call by call and alternating (the
    package first in even turns, raw stubs first in odd ones), so that both see the same
    machine: on a shared 2-core machine the load shifts within seconds."""
    package_times, raw_times = [], []
    clock = time.perf_counter
    for turn in range(calls):
        for call, times in ((package, package_times), (raw, raw_times))[::1 - 2 * (turn % 2)]:
            start = clock()
            call()
            times.append(clock() - start)
    return statistics.median(package_times), statistics.median(raw_times)


def run(address, args):
    import numpy as np
    import okl
    pb, pb_grpc = okl.pb, okl.pb_grpc
    client = okl.Client(address)
    stub = pb_grpc.OnlineKernelLearningStub(client.channel)
    tenant = "bench"
    for info in client.list_models(tenant):
        client.model(tenant, info.model).delete()
    rng = np.random.default_rng(1)
    results = {}

    # 1. A 64-example Observe, each call its own examples.
    X = rng.normal(size=(64 * 256, DIM))
    y = np.sin(X.sum(axis=1))
    package_model = client.create_model(tenant, "observe-package", CONFIG)
    client.create_model(tenant, "observe-raw", CONFIG)
    raw_ref = pb.ModelRef(tenant=tenant, model="observe-raw")
    batches = [(X[i:i + 64], y[i:i + 64]) for i in range(0, X.shape[0], 64)]
    turn = {"package": 0, "raw": 0}

    def observe_package():
        xs, ys = batches[turn["package"] % len(batches)]
        turn["package"] += 1
        package_model.observe(xs, ys)

    def observe_raw():
        xs, ys = batches[turn["raw"] % len(batches)]
        turn["raw"] += 1
        stub.Observe(pb.ObserveRequest(ref=raw_ref, examples=[
            pb.Example(x=pb.Vector(values=row), y=label)
            for row, label in zip(xs.tolist(), ys.tolist())]), timeout=30)

    observe_package(), observe_raw()  # connect, warm up
    package_s, raw_s = side_by_side(observe_package, observe_raw, args.calls)
    results["observe_64"] = {"package_us": package_s * 1e6, "raw_us": raw_s * 1e6,
                             "overhead_percent": 100 * (package_s / raw_s - 1)}

    # 2. A one-input Predict.
    query = rng.normal(size=(1, DIM))
    query_list = query[0].tolist()

    def predict_package():
        package_model.predict(query)

    def predict_raw():
        stub.Predict(pb.PredictRequest(ref=raw_ref, inputs=[pb.Vector(values=query_list)]),
                     timeout=30)

    package_s, raw_s = side_by_side(predict_package, predict_raw, args.calls)
    results["predict_1"] = {"package_us": package_s * 1e6, "raw_us": raw_s * 1e6,
                            "overhead_percent": 100 * (package_s / raw_s - 1)}

    # 3. 100,000 examples from one numpy array into one model (best of three).
    X = rng.normal(size=(100_000, DIM))
    y = np.sin(X.sum(axis=1))
    rates = []
    for attempt in range(3):
        model = client.create_model(tenant, "observe-100k-%d" % attempt, CONFIG)
        start = time.perf_counter()
        result = model.observe(X, y)
        rates.append(X.shape[0] / (time.perf_counter() - start))
        assert result.steps == X.shape[0]
    results["observe_100000"] = {"examples_per_second": max(rates),
                                 "all_runs": rates}
    for info in client.list_models(tenant):
        client.model(tenant, info.model).delete()
    client.close()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.path.join(REPO, "build", "release", "server",
                                                         "okl_server"),
                        help="the okl_server binary to start (unless --address)")
    parser.add_argument("--address", help="a running okl_server's host:port instead")
    parser.add_argument("--site", help="a directory holding the installed okl package")
    parser.add_argument("--calls", type=int, default=3000, help="calls of each side")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if args.site:
        sys.path.insert(0, args.site)

    if args.address:
        results = run(args.address, args)
    else:
        sys.path.insert(0, os.path.join(REPO, "tests", "system"))
        import okl_system  # the tests' okl_server harness
        with tempfile.TemporaryDirectory(prefix="okl_python_bench.") as work:
            server = okl_system.OklServer(args.server, work).start()
            try:
                results = run(server.address, args)
            finally:
                server.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name in ("observe_64", "predict_1"):
        r = results[name]
        print("%-12s package %7.1f us  raw stubs %7.1f us  overhead %+5.1f%%"
              % (name, r["package_us"], r["raw_us"], r["overhead_percent"]))
    print("observe of 100,000 examples from numpy: %.0f examples/s (runs: %s)"
          % (results["observe_100000"]["examples_per_second"],
             ", ".join("%.0f" % r for r in results["observe_100000"]["all_runs"])))


if __name__ == "__main__":
    main()
