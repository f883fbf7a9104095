"""okl.Client and okl.Model against a real okl_server: every method, configs in each form,
and each error class the server's codes map to."""

import os
import threading

import grpc
import numpy as np
import pytest

import okl
from conftest import regression_config


def sine(rng, count=500):
    X = rng.uniform(0, 3, size=(count, 1))
    return X, np.sin(X[:, 0])


CONFIG_DICT = {"dim": 1, "kernel": {"gaussian": {"gamma": 10}}, "loss": {"squared": {}},
               "learning_rate": {"eta0": 0.5, "schedule": "CONSTANT"}, "lambda": 0.001,
               "budget": {"max_terms": 200, "policy": "OLDEST"}}
CONFIG_TEXT = ("dim: 1 kernel { gaussian { gamma: 10 } } loss { squared {} } "
               "learning_rate { eta0: 0.5 schedule: CONSTANT } lambda: 0.001 "
               "budget { max_terms: 200 policy: OLDEST }")


def test_health_is_serving(client):
    assert client.health() is True
    assert client.health("okl.v1.OnlineKernelLearning") is True
    with pytest.raises(okl.NotFound):
        client.health("no.such.Service")


def test_a_config_may_be_a_dict_a_text_or_the_message(client, tenant, rng):
    message = okl.pb.ModelConfig()
    message.CopyFrom(okl.model_config(CONFIG_TEXT))
    assert okl.model_config(CONFIG_DICT) == message
    X, y = sine(rng)
    predictions = []
    configs = []
    for name, config in (("dict", CONFIG_DICT), ("text", CONFIG_TEXT), ("message", message)):
        model = client.create_model(tenant, name, config)
        configs.append(model.config())  # as the server holds it: defaults made explicit
        model.observe(X, y)
        predictions.append(model.predict(X[:10]))
    assert configs[0] == configs[1] == configs[2]
    assert configs[0].budget.max_terms == 200 and configs[0].learning_rate.theta == 0.5
    np.testing.assert_array_equal(predictions[0], predictions[1])
    np.testing.assert_array_equal(predictions[0], predictions[2])
    # dim left unset takes the one given.
    assert okl.model_config({"loss": {"squared": {}}}, dim=7).dim == 7
    assert okl.config_text(message).startswith("dim: 1 kernel {")


def test_a_bad_config_says_which_field(client, tenant):
    with pytest.raises(okl.InvalidArgument, match="no_such_field"):
        client.create_model(tenant, "m", {"dim": 1, "no_such_field": 3})
    with pytest.raises(okl.InvalidArgument, match=r"config \(text format\): 1:"):
        client.create_model(tenant, "m", "dim: 1 kernel {")
    with pytest.raises(okl.InvalidArgument, match="got int"):
        client.create_model(tenant, "m", 7)
    # The server's own check, with its message.
    with pytest.raises(okl.InvalidArgument, match="kernel must set one of"):
        client.create_model(tenant, "m", "dim: 1 loss { squared {} }")
    assert client.list_models(tenant) == []


def test_observe_returns_the_prequential_predictions_and_the_stats_follow(client, tenant, rng):
    model = client.create_model(tenant, "sine", CONFIG_TEXT)
    X, y = sine(rng, 300)
    first = model.observe(X[:100], y[:100])
    assert first.steps == 100 and first.predictions.shape == (100,)
    assert first.predictions[0] == 0.0  # an empty model predicts 0
    np.testing.assert_allclose(first.losses, 0.5 * (first.predictions - y[:100]) ** 2)
    before = model.predict(X[100:])
    second = model.observe(X[100:], y[100:])
    assert second.predictions[0] == before[0]  # the next prediction is the model's now
    assert second.steps == 300 and second.expansion_size == 200
    stats = model.stats()
    assert isinstance(stats, okl.ModelStats)
    assert (stats.steps, stats.expansion_size, stats.terms_removed) == (300, 200, 100)
    assert stats.cumulative_loss == pytest.approx(first.losses.sum() + second.losses.sum())
    assert stats.average_loss == pytest.approx(stats.cumulative_loss / 300)
    info = model.info()
    assert (info.tenant, info.model, info.config.dim) == (tenant, "sine", 1)
    assert abs(model.predict([[1.0]])[0] - np.sin(1.0)) < 0.1


def test_list_models_of_a_tenant_and_of_all(client, tenant):
    for name in ("b", "a"):
        client.create_model(tenant, name, CONFIG_TEXT)
    listed = client.list_models(tenant)
    assert [(m.tenant, m.model) for m in listed] == [(tenant, "a"), (tenant, "b")]
    assert all(isinstance(m.stats, okl.ModelStats) for m in listed)
    everyone = client.list_models()
    assert {(tenant, "a"), (tenant, "b")} <= {(m.tenant, m.model) for m in everyone}


def test_model_is_a_handle_and_delete_removes_the_model(client, tenant):
    created = client.create_model(tenant, "m", CONFIG_TEXT)
    handle = client.model(tenant, "m")
    assert handle == created and hash(handle) == hash(created)
    assert handle.ref == okl.pb.ModelRef(tenant=tenant, model="m")
    assert "okl.Model(" in repr(handle)
    handle.delete()
    with pytest.raises(okl.NotFound, match='model "m" of tenant'):
        created.stats()
    with pytest.raises(okl.NotFound):
        created.delete()


def test_snapshot_and_restore_continue_bit_identically(client, tenant, rng, work_dir):
    model = client.create_model(tenant, "original", CONFIG_TEXT)
    X, y = sine(rng, 400)
    model.observe(X[:200], y[:200])
    path = os.path.join(work_dir, tenant + ".snapshot")
    written = model.snapshot(path)
    assert written == os.path.getsize(path) > 0
    from_file = client.restore(tenant, "from-file", path)
    from_bytes = client.restore(tenant, "from-bytes", model.snapshot_bytes())
    for other in (from_file, from_bytes):
        assert other.stats() == model.stats()
    expected = model.observe(X[200:], y[200:]).predictions
    for other in (from_file, from_bytes):
        np.testing.assert_array_equal(other.observe(X[200:], y[200:]).predictions, expected)
        assert other.snapshot_bytes() == model.snapshot_bytes()
    # Restore replaces a model that exists.
    client.restore(tenant, "from-file", path)
    assert from_file.stats().steps == 200


def test_predict_details_carries_novelty_flags_and_variances(client, tenant, rng):
    novelty = client.create_model(tenant, "novelty", (
        "dim: 2 kernel { gaussian { gamma: 1 } } loss { novelty { rho: 0.5 } } "
        "learning_rate { eta0: 0.2 } budget { max_terms: 50 }"))
    novelty.observe(rng.normal(size=(200, 2)), np.zeros(200))
    details = novelty.predict_details([[0.0, 0.0], [30.0, 30.0]])
    assert details.novel.dtype == bool and details.novel.tolist() == [False, True]
    assert details.variances.shape == (0,)
    tracker = client.create_model(tenant, "tracker", (
        "dim: 1 kernel { gaussian { gamma: 1 } } loss { squared {} } "
        "krls_tracker { max_basis: 30 noise_variance: 1e-4 }"))
    X, y = sine(rng, 200)
    tracker.observe(X, y)
    details = tracker.predict_details([[1.0], [50.0]])
    assert details.novel.shape == (0,)
    assert details.variances.shape == (2,) and details.variances[1] > details.variances[0] > 0
    np.testing.assert_array_equal(details.predictions, tracker.predict([[1.0], [50.0]]))


def test_predict_of_no_rows_is_empty_and_many_rows_go_in_several_requests(
        server, tenant, rng):
    small = okl.Client(server.address, max_batch=7)
    model = small.create_model(tenant, "m", regression_config(3))
    X = rng.normal(size=(50, 3))
    model.observe(X, X.sum(axis=1))  # 50 examples: in messages of at most 7
    assert model.stats().steps == 50
    assert model.predict(np.empty((0, 3))).shape == (0,)
    everything = model.predict(X)
    np.testing.assert_array_equal(everything, np.concatenate(
        [model.predict(X[i:i + 7]) for i in range(0, 50, 7)]))
    small.close()


SOFTMAX_CONFIG = {"dim": 2, "kernel": {"gaussian": {"gamma": 2}}, "loss": {"softmax": {}},
                  "learning_rate": {"eta0": 0.5}, "lambda": 0.01,
                  "budget": {"max_terms": 40, "policy": "MERGE"}, "max_classes": 4}


def three_blobs(rng, count):
    """Points around three centres, each named by its centre's class (3 is an int: its
    class is "3")."""
    names = np.array(["north", "south-west", 3], dtype=object)
    centres = np.array([[0.0, 1.0], [-1.0, -0.5], [1.0, -0.5]])
    which = rng.integers(0, 3, size=count)
    return centres[which] + 0.3 * rng.normal(size=(count, 2)), names[which]


def test_a_multi_class_model_learns_named_classes_unary_or_streamed(server, tenant, rng):
    X, classes = three_blobs(rng, 60)
    small = okl.Client(server.address, max_batch=7)
    client = okl.Client(server.address)
    unary = client.create_model(tenant, "unary", SOFTMAX_CONFIG)
    streamed = small.create_model(tenant, "streamed", SOFTMAX_CONFIG)
    one = unary.observe_classes(X, classes)  # one request
    many = streamed.observe_classes(X, classes)  # messages of at most 7
    np.testing.assert_array_equal(one.predictions, many.predictions)
    np.testing.assert_array_equal(one.losses, many.losses)
    assert one.predicted_classes == many.predicted_classes
    assert one.predicted_classes[0] == ""  # before any class was known
    assert set(one.predicted_classes[1:]) <= {"north", "south-west", "3"}
    stats = unary.stats()
    assert stats.classes == list(dict.fromkeys(str(c) for c in classes))
    assert stats.mistakes == sum(p != str(c) for p, c in zip(one.predicted_classes, classes))
    assert stats.mistakes < 30

    probes, truth = three_blobs(rng, 20)
    details = unary.predict_details(probes)
    assert details.class_scores.shape == (20, 3) and details.probabilities.shape == (20, 3)
    best = details.class_scores.argmax(axis=1)
    assert details.predicted_classes == [stats.classes[i] for i in best]
    np.testing.assert_array_equal(details.predictions, details.class_scores.max(axis=1))
    shifted = np.exp(details.class_scores - details.class_scores.max(axis=1, keepdims=True))
    np.testing.assert_allclose(details.probabilities,
                               shifted / shifted.sum(axis=1, keepdims=True), rtol=1e-12)
    assert sum(p == str(t) for p, t in zip(details.predicted_classes, truth)) >= 15
    np.testing.assert_array_equal(unary.predict(probes), details.predictions)

    # A bad class is refused before anything is sent, even when the call would stream.
    for bad, message in ((["x" * 129] * 60, "129 bytes"), ([""] * 60, "0 bytes"),
                         (classes[:59], "pass one class per row")):
        with pytest.raises(okl.InvalidArgument, match=message):
            streamed.observe_classes(X, bad)
    assert streamed.stats().steps == 60
    # A model of another loss refuses class labels; a multi-class model refuses y.
    binary = client.create_model(tenant, "binary", {
        "dim": 2, "kernel": {"gaussian": {"gamma": 2}}, "loss": {"hinge": {}},
        "learning_rate": {"eta0": 0.5}, "budget": {"max_terms": 10}})
    with pytest.raises(okl.InvalidArgument, match="leave class_label empty"):
        binary.observe_classes(X[:2], ["a", "b"])
    with pytest.raises(okl.InvalidArgument, match="class_label"):
        unary.observe(X[:2], [1.0, -1.0])
    small.close()
    client.close()


# --- Errors -------------------------------------------------------------------------------


def test_every_status_code_has_its_error_class():
    for code in grpc.StatusCode:
        if code == grpc.StatusCode.OK:
            continue
        cls = okl.error_class(code)
        assert issubclass(cls, okl.Error)
        error = cls("it broke", code=code)
        assert error.code == code and str(error) == "%s: it broke" % code.name
        name = "".join(part.capitalize() for part in code.name.split("_"))
        assert cls.__name__ == name
        assert getattr(okl, cls.__name__) is cls
    assert issubclass(okl.InvalidArgument, ValueError)


def test_server_errors_raise_their_classes_with_the_servers_message(client, server, tenant,
                                                                    rng):
    model = client.create_model(tenant, "m", CONFIG_TEXT)
    with pytest.raises(okl.AlreadyExists, match="already exists"):
        client.create_model(tenant, "m", CONFIG_TEXT)
    with pytest.raises(okl.InvalidArgument, match="is invalid: use 1 to 64 characters"):
        client.create_model(tenant, "bad name!", CONFIG_TEXT)
    with pytest.raises(okl.NotFound):
        client.model(tenant, "absent").predict([[1.0]])
    with pytest.raises(okl.InvalidArgument, match="dim is 1"):
        model.observe(np.ones((2, 3)), np.ones(2))
    with pytest.raises(okl.DataLoss):
        client.restore(tenant, "corrupt", b"not a snapshot")
    with pytest.raises(okl.DataLoss):
        client.restore(tenant, "empty", b"")
    # More examples in one request than the server's --max_batch (10000).
    unbounded = okl.Client(server.address, max_batch=20000)
    with pytest.raises(okl.ResourceExhausted, match="max_batch"):
        unbounded.model(tenant, "m").observe(np.ones((15000, 1)), np.ones(15000))
    unbounded.close()
    # A step that would diverge.
    diverging = client.create_model(tenant, "diverging", (
        "dim: 1 kernel { linear { c: 1 } } loss { squared {} } learning_rate { eta0: 0.9 } "
        "budget { max_terms: 1000 }"))
    with pytest.raises(okl.FailedPrecondition) as caught:
        diverging.observe(np.full((400, 1), 1e150), np.full(400, 1e150))
    assert caught.value.details and caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
    # Nothing there: retried (reads) and then Unavailable.
    nowhere = okl.Client("127.0.0.1:%d" % okl_free_port(), deadline=5, initial_backoff=0.01)
    with pytest.raises(okl.Unavailable):
        nowhere.health()
    with pytest.raises(okl.Unavailable):
        nowhere.model(tenant, "m").observe([[1.0]], [1.0])
    nowhere.close()
    assert model.stats().steps == 0  # every rejected write changed nothing


def okl_free_port():
    import okl_system
    return okl_system.free_port()


def test_tls_and_tokens(secure_server, rng):
    process, cert, tokens = secure_server
    writer = okl.Client(process.address, token=tokens["write"], tls_ca=cert)
    model = writer.create_model("acme", "m", CONFIG_TEXT)
    X, y = sine(rng, 50)
    model.observe(X, y)
    with open(cert, "rb") as f:
        reader = okl.Client(process.address, token=tokens["read"], tls_ca=f.read())
    np.testing.assert_array_equal(reader.model("acme", "m").predict(X), model.predict(X))
    with pytest.raises(okl.PermissionDenied):
        reader.model("acme", "m").observe(X, y)
    with pytest.raises(okl.PermissionDenied):
        writer.create_model("other", "m", CONFIG_TEXT)
    anonymous = okl.Client(process.address, tls_ca=cert)
    with pytest.raises(okl.Unauthenticated):
        anonymous.model("acme", "m").stats()
    assert anonymous.health()  # health needs no token
    for connection in (writer, reader, anonymous):
        connection.close()


def test_client_arguments_are_checked():
    with pytest.raises(okl.InvalidArgument, match="address is empty"):
        okl.Client("")
    with pytest.raises(okl.InvalidArgument, match="printable ASCII without spaces"):
        okl.Client("127.0.0.1:1", token="two words")
    with pytest.raises(okl.InvalidArgument, match="tls_cert and tls_key go together"):
        okl.Client("127.0.0.1:1", tls_cert=b"pem")
    with pytest.raises(okl.InvalidArgument, match="cannot read /no/such/ca.pem"):
        okl.Client("127.0.0.1:1", tls_ca="/no/such/ca.pem")
    with pytest.raises(okl.InvalidArgument, match="deadline must be positive"):
        okl.Client("127.0.0.1:1", deadline=0)
    with pytest.raises(okl.InvalidArgument, match="no_such_option"):
        okl.Client("127.0.0.1:1", no_such_option=1)


def test_a_client_is_shared_by_threads(client, tenant, rng):
    models = [client.create_model(tenant, "m%d" % i, regression_config(2)) for i in range(4)]
    X = rng.normal(size=(2000, 2))
    y = X.sum(axis=1)
    errors = []

    def run(model):
        try:
            for start in range(0, 2000, 250):
                model.observe(X[start:start + 250], y[start:start + 250])
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    snapshots = {m.snapshot_bytes() for m in models}
    assert len(snapshots) == 1  # the same examples in the same order: the same model


def test_model_stats_holds_every_field_of_the_message():
    import dataclasses

    from okl.v1 import okl_pb2

    assert ({f.name for f in dataclasses.fields(okl.ModelStats)}
            == {f.name for f in okl_pb2.ModelStats.DESCRIPTOR.fields})
