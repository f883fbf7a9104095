"""100,000 examples streamed by the package and by the C++ client (the okl tool) into a
real okl_server: the same prequential losses, the same model, the same predictions, bit
for bit. And a stream through a tenant fence (what a tenant move does) applies each
example once."""

import os
import subprocess
import threading

import numpy as np

from conftest import regression_config

EXAMPLES = 100_000
DIM = 4


def run_cli(options, server, *args):
    done = subprocess.run([options.cli, "--server=" + server.address] + list(args),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, "okl %s:\n%s%s" % (" ".join(args), done.stdout, done.stderr)
    return done.stdout


def test_a_100000_example_stream_equals_the_cpp_clients(client, server, options, tenant,
                                                        work_dir):
    rng = np.random.default_rng(100_000)
    X = rng.uniform(-2, 2, size=(EXAMPLES, DIM))
    y = np.sin(X[:, 0] * X[:, 1]) + 0.1 * X[:, 2] - 0.05 * X[:, 3] ** 2
    config = regression_config(DIM, gamma=0.5, terms=64)

    # The package: an ObserveStream, its acknowledgements collected.
    streamed = client.create_model(tenant, "python-stream", config)
    predictions = np.full(EXAMPLES, np.nan)
    losses = np.full(EXAMPLES, np.nan)

    def on_ack(ack):
        predictions[ack.first:ack.first + ack.count] = ack.predictions
        losses[ack.first:ack.first + ack.count] = ack.losses

    with streamed.stream(batch_size=500, on_ack=on_ack) as stream:
        stream.observe(X, y)
    assert stream.acknowledged == EXAMPLES and not np.isnan(predictions).any()

    # The package: one observe() of the whole array.
    observed = client.create_model(tenant, "python-observe", config)
    result = observed.observe(X, y)
    assert result.steps == EXAMPLES
    np.testing.assert_array_equal(result.predictions, predictions)
    np.testing.assert_array_equal(result.losses, losses)

    # The C++ client: okl create, and okl observe of the same rows as CSV (repr() and
    # the tool's parser round-trip every double), its prequential losses in the curve.
    base = os.path.join(work_dir, tenant)
    with open(base + ".textproto", "w") as f:
        f.write(config)
    with open(base + ".csv", "w") as f:
        f.writelines(",".join(map(repr, row)) + "\n"
                     for row in np.column_stack([X, y]).tolist())
    common = ["--tenant=" + tenant, "--model=cpp"]
    run_cli(options, server, "create", "--config=" + base + ".textproto", *common)
    run_cli(options, server, "observe", "--curve=" + base + ".curve.csv",
            "--batches_per_stream=64", "--noprogress", base + ".csv", *common)
    curve = np.loadtxt(base + ".curve.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(curve[:, 0], np.arange(1, EXAMPLES + 1))
    np.testing.assert_array_equal(curve[:, 1], losses)

    cpp = client.model(tenant, "cpp")
    assert cpp.snapshot_bytes() == streamed.snapshot_bytes() == observed.snapshot_bytes()
    queries = rng.uniform(-2, 2, size=(200, DIM))
    with open(base + ".queries.csv", "w") as f:
        f.writelines(",".join(map(repr, row)) + "\n" for row in queries.tolist())
    printed = run_cli(options, server, "predict", base + ".queries.csv", *common)
    np.testing.assert_array_equal(np.array([float(v) for v in printed.split()]),
                                  streamed.predict(queries))
    target = (np.sin(queries[:, 0] * queries[:, 1]) + 0.1 * queries[:, 2]
              - 0.05 * queries[:, 3] ** 2)
    assert np.mean((streamed.predict(queries) - target) ** 2) < 0.5 * np.var(target)


def test_a_stream_through_a_tenant_fence_applies_each_example_once(client, tenant, rng):
    """FenceTenant is what a tenant move does to the old replica: every write refused
    with UNAVAILABLE and okl-batches-applied. The stream waits it out (the client's
    backoff) and then applies the refused examples, once."""
    fenced = client.create_model(tenant, "fenced", regression_config(2))
    reference = client.create_model(tenant, "reference", regression_config(2))
    X = rng.normal(size=(3000, 2))
    y = X[:, 0] - X[:, 1]
    reference.observe(X, y)
    with fenced.stream(batch_size=100, batches_per_stream=5) as stream:
        stream.observe(X[:1000], y[:1000])
        client.fence_tenant(tenant)
        lift = threading.Timer(0.5, client.fence_tenant, (tenant,), {"fenced": False})
        lift.start()
        stream.observe(X[1000:2000], y[1000:2000])
    lift.join()
    assert stream.streams_refused >= 1 and stream.acknowledged == 2000
    # A unary observe through the fence, too.
    client.fence_tenant(tenant)
    threading.Timer(0.2, client.fence_tenant, (tenant,), {"fenced": False}).start()
    fenced.observe(X[2000:], y[2000:])
    assert fenced.stats().steps == 3000
    assert fenced.snapshot_bytes() == reference.snapshot_bytes()
