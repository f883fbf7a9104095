"""Delayed feedback against a real okl_server: Model.remember() predicts and keeps each
input under an event id, Model.label() learns from it later. Labels applied out of order
leave the model bit for bit as Observes of the same examples in that order would; the
first label wins; ids made by the server or chosen by the caller, also over several
requests; default labels at the end of a wait; bad requests; the write role."""

import re
import time

import numpy as np
import pytest

import okl
from conftest import regression_config

APPLIED, DUPLICATE, UNKNOWN = (okl.LabelOutcome.APPLIED, okl.LabelOutcome.DUPLICATE,
                               okl.LabelOutcome.UNKNOWN)
HINGE = ("dim: 2 kernel { gaussian { gamma: 1 } } loss { hinge {} } "
         "learning_rate { eta0: 0.5 } budget { max_terms: 50 }")


def model_section(snapshot):
    """A snapshot's bytes up to and including its checksum (ModelSnapshot field 100):
    the model's whole state. A model's remembered events may follow it in the snapshot
    (field 101); a twin fed by Observe has none, so the comparison stops there."""
    def varint(position):
        value = shift = 0
        while True:
            byte = snapshot[position]
            value |= (byte & 0x7F) << shift
            position += 1
            shift += 7
            if byte < 0x80:
                return value, position

    position = 0
    while position < len(snapshot):
        key, position = varint(position)
        wire_type = key & 7
        if wire_type == 0:
            _, position = varint(position)
        elif wire_type == 1:
            position += 8
        elif wire_type == 2:
            length, position = varint(position)
            position += length
        elif wire_type == 5:
            position += 4
        else:
            raise AssertionError("wire type %d in a snapshot" % wire_type)
        if key >> 3 == 100:
            return snapshot[:position]
    raise AssertionError("the snapshot has no checksum")


def test_labels_out_of_order_equal_observe_bit_for_bit(client, tenant, rng):
    config = regression_config(2, terms=40)  # fewer terms than examples: the budget acts
    labelled = client.create_model(tenant, "labelled", config)
    observed = client.create_model(tenant, "observed", config)
    warm = rng.normal(size=(30, 2))
    for model in (labelled, observed):
        model.observe(warm, warm.sum(axis=1))
    X = rng.normal(size=(60, 2))
    y = np.sin(X[:, 0]) + X[:, 1]
    remembered = labelled.remember(X)
    assert isinstance(remembered, okl.Remembered) and remembered.predictions.dtype == np.float64
    np.testing.assert_array_equal(remembered.predictions, observed.predict(X))
    between = rng.normal(size=(5, 2))
    for part, order in enumerate(np.array_split(rng.permutation(60), 3)):
        result = labelled.label([remembered.event_ids[i] for i in order], y[order])
        expected = observed.observe(X[order], y[order])
        assert isinstance(result, okl.LabelResult)
        assert result.outcomes == [APPLIED] * len(order) and result.applied == len(order)
        np.testing.assert_array_equal(result.predictions, expected.predictions)
        np.testing.assert_array_equal(result.losses, expected.losses)
        assert result.steps == expected.steps
        if part == 0:  # an Observe between labels is one more step of the same sequence
            for model in (labelled, observed):
                model.observe(between, between.sum(axis=1))
    assert model_section(labelled.snapshot_bytes()) == model_section(observed.snapshot_bytes())
    probe = rng.normal(size=(10, 2))
    np.testing.assert_array_equal(labelled.predict(probe), observed.predict(probe))
    stats = labelled.stats()
    assert stats.steps == observed.stats().steps == 95
    assert (stats.events_pending, stats.labels_applied, stats.served_labels) == (0, 60, 60)
    # The served loss is the loss of the predictions remember() returned (squared: half
    # the squared error), not of the model's predictions when the labels came.
    assert stats.served_loss == pytest.approx(0.5 * np.sum((remembered.predictions - y) ** 2))


def test_the_first_label_wins_and_unknown_events_are_unknown(client, tenant):
    model = client.create_model(tenant, "m", regression_config(1))
    remembered = model.remember([[0.1], [0.2], [0.3]], event_ids=("ad-1", "ad-2", "ad-3"))
    assert remembered.event_ids == ["ad-1", "ad-2", "ad-3"]
    # A malformed id refuses the whole request: nothing of it is applied.
    with pytest.raises(okl.InvalidArgument, match="labels.4.: an event id is empty"):
        model.label(["ad-2", "ad-2", "no-such-ad", "ad-1", ""], [1.0, 5.0, 1.0, 2.0, 1.0])
    assert model.stats().steps == 0
    result = model.label(["ad-2", "ad-2", "no-such-ad", "ad-1"], [1.0, 5.0, 1.0, 2.0])
    assert result.outcomes == [APPLIED, DUPLICATE, UNKNOWN, APPLIED]
    assert (result.applied, result.duplicates, result.unknown) == (2, 1, 1)
    assert result.predictions.shape == result.losses.shape == (2,) and result.steps == 2
    again = model.label(["ad-1"], [7.0])  # e.g. a retry: the first label stays
    assert again.outcomes == [DUPLICATE] and again.steps == 2
    assert again.predictions.shape == again.losses.shape == (0,)
    stats = model.stats()
    assert (stats.steps, stats.events_pending, stats.labels_applied,
            stats.labels_duplicate) == (2, 1, 2, 2)
    # An id the model holds is not remembered again, and nothing of that request is.
    with pytest.raises(okl.AlreadyExists, match="ad-3"):
        model.remember([[0.4], [0.5]], event_ids=["ad-4", "ad-3"])
    assert model.stats().events_pending == 1
    assert model.label(["ad-4"], [1.0]).outcomes == [UNKNOWN]
    # Events belong to their model.
    other = client.create_model(tenant, "other", regression_config(1))
    assert other.label(["ad-3"], [1.0]).outcomes == [UNKNOWN]
    assert model.label(["ad-3"], [1.0]).outcomes == [APPLIED]


def test_server_made_ids_are_distinct_and_split_requests_keep_their_order(
        server, tenant, rng):
    # max_batch 7: 20 rows go as three Predicts and their 20 labels as three Labels.
    small = okl.Client(server.address, max_batch=7)
    try:
        labelled = small.create_model(tenant, "labelled", regression_config(3))
        observed = small.create_model(tenant, "observed", regression_config(3))
        X = rng.normal(size=(20, 3))
        y = X.sum(axis=1)
        first = labelled.remember(X)
        second = labelled.remember(X[:4])
        ids = first.event_ids + second.event_ids
        assert len(first.event_ids) == 20 and len(set(ids)) == 24
        assert all(re.fullmatch(r"[0-9a-f]{33,48}", i) for i in ids), ids
        assert labelled.stats().events_pending == 24
        # Each id labelled with its row's y: were an id paired with another row's input,
        # the model would differ from the one that observed the rows in order.
        result = labelled.label(first.event_ids, y)
        expected = observed.observe(X, y)
        assert result.applied == 20 and result.steps == 20
        np.testing.assert_array_equal(result.predictions, expected.predictions)
        np.testing.assert_array_equal(result.losses, expected.losses)
        assert model_section(labelled.snapshot_bytes()) == \
            model_section(observed.snapshot_bytes())
        # The caller's ids, over three requests, come back as given.
        chosen = ["row.%d" % i for i in range(20)]
        assert labelled.remember(X, event_ids=chosen).event_ids == chosen
        assert labelled.stats().events_pending == 24
        # A malformed id in the last of three requests refuses the first two too.
        with pytest.raises(okl.InvalidArgument, match=r"event_ids\[19\] is 'row 19'"):
            labelled.label(chosen[:19] + ["row 19"], y)
        assert labelled.stats().events_pending == 24 and labelled.stats().steps == 20
    finally:
        small.close()


def test_sparse_inputs_are_remembered(client, tenant, rng):
    sparse = pytest.importorskip("scipy.sparse")
    config = ("dim: 1000 kernel { gaussian { gamma: 0.5 } } loss { squared {} } "
              "learning_rate { eta0: 0.2 } budget { max_terms: 20 } sparse { max_nonzeros: 50 }")
    labelled = client.create_model(tenant, "labelled", config)
    observed = client.create_model(tenant, "observed", config)
    rows = sparse.random(12, 1000, density=0.004, format="csr", random_state=3)
    y = np.asarray(rows.sum(axis=1)).ravel()
    remembered = labelled.remember(rows)
    result = labelled.label(remembered.event_ids[::-1], y[::-1])
    expected = observed.observe(rows[::-1], y[::-1])
    np.testing.assert_array_equal(result.predictions, expected.predictions)
    assert model_section(labelled.snapshot_bytes()) == model_section(observed.snapshot_bytes())


def test_a_default_label_is_learned_when_the_wait_ends(client, tenant):
    model = client.create_model(tenant, "m", regression_config(1))
    twin = client.create_model(tenant, "twin", regression_config(1))
    X = np.array([[0.5], [1.5], [2.5]])
    model.remember(X[:2], event_ids=["e1", "e2"], wait_seconds=0.5, default_label=0.25)
    model.remember(X[2:], event_ids=["e3"], wait_seconds=0.5)  # no default: dropped
    model.remember(X[:1], event_ids=["e4"], wait_seconds=600)
    deadline = time.monotonic() + 10
    stats = model.stats()
    while stats.events_expired < 3:
        assert time.monotonic() < deadline, "the waits did not end: %s" % (stats,)
        time.sleep(0.05)
        stats = model.stats()
    assert (stats.events_expired, stats.events_pending, stats.steps) == (3, 1, 2)
    assert (stats.labels_applied, stats.served_labels) == (0, 0)  # defaults are not served
    # The default labels were two Observes (in id order, as they share their expiry).
    twin.observe(X[:2], [0.25, 0.25])
    assert model_section(model.snapshot_bytes()) == model_section(twin.snapshot_bytes())
    # An event whose wait ended is unknown; the one still waiting takes its label.
    result = model.label(["e1", "e2", "e3", "e4"], [1.0, 1.0, 1.0, 1.0])
    assert result.outcomes == [UNKNOWN, UNKNOWN, UNKNOWN, APPLIED] and result.steps == 3


def test_bad_requests_raise_and_change_nothing(client, server, tenant):
    model = client.create_model(tenant, "m", regression_config(2))
    X = np.ones((3, 2))
    # The client's checks.
    with pytest.raises(okl.InvalidArgument, match="X has 3 rows but event_ids has 2 ids"):
        model.remember(X, event_ids=["a", "b"])
    with pytest.raises(okl.InvalidArgument, match="got a single str"):
        model.remember(X[:1], event_ids="a")
    with pytest.raises(okl.InvalidArgument, match=r"event_ids\[0\] is 7 \(int\)"):
        model.remember(X[:1], event_ids=[7])
    with pytest.raises(okl.InvalidArgument, match="reshape a single example"):
        model.remember(np.ones(2))
    with pytest.raises(okl.InvalidArgument, match="wait_seconds must be a number"):
        model.remember(X[:1], wait_seconds="soon")
    with pytest.raises(okl.InvalidArgument, match="event_ids has 1 ids but y has 2 labels"):
        model.label(["a"], [1.0, 2.0])
    with pytest.raises(okl.InvalidArgument, match="nothing to label"):
        model.label([], [])
    # The server's, with its messages.
    with pytest.raises(okl.InvalidArgument, match="dim is 2"):
        model.remember(np.ones((1, 3)))
    with pytest.raises(okl.InvalidArgument):
        model.remember(X[:1], event_ids=["not an id!"])
    with pytest.raises(okl.InvalidArgument, match="wait_seconds is -1"):
        model.remember(X[:1], wait_seconds=-1)
    classifier = client.create_model(tenant, "hinge", HINGE)
    with pytest.raises(okl.InvalidArgument, match="default_label"):
        classifier.remember(X[:1], default_label=0.5)  # hinge takes -1 or +1
    remembered = classifier.remember(X[:2])
    with pytest.raises(okl.InvalidArgument):
        classifier.label(remembered.event_ids, [1.0, 0.5])
    with pytest.raises(okl.InvalidArgument, match="not a finite number"):
        classifier.label(remembered.event_ids, [1.0, np.nan])
    # Several requests: checked here first, so the first request is not applied either.
    small = okl.Client(server.address, max_batch=1)
    with pytest.raises(okl.InvalidArgument, match=r"y\[1\] is nan"):
        small.model(tenant, "hinge").label(remembered.event_ids, [1.0, np.nan])
    small.close()
    stats = classifier.stats()
    assert (stats.steps, stats.events_pending, stats.labels_applied) == (0, 2, 0)
    assert model.stats().events_pending == 0
    assert classifier.label(remembered.event_ids, [1, -1]).outcomes == [APPLIED, APPLIED]
    absent = client.model(tenant, "absent")
    with pytest.raises(okl.NotFound):
        absent.remember(X)
    with pytest.raises(okl.NotFound):
        absent.label(["a"], [1.0])


def test_remember_and_label_need_the_write_role(secure_server, rng):
    process, cert, tokens = secure_server
    writer = okl.Client(process.address, token=tokens["write"], tls_ca=cert)
    reader = okl.Client(process.address, token=tokens["read"], tls_ca=cert)
    try:
        model = writer.create_model("acme", "delayed", regression_config(2))
        X = rng.normal(size=(3, 2))
        remembered = model.remember(X)
        as_reader = reader.model("acme", "delayed")
        np.testing.assert_array_equal(as_reader.predict(X), remembered.predictions)
        with pytest.raises(okl.PermissionDenied):
            as_reader.remember(X)
        with pytest.raises(okl.PermissionDenied):
            as_reader.label(remembered.event_ids, [1.0, 2.0, 3.0])
        stats = model.stats()
        assert (stats.events_pending, stats.steps) == (3, 0)
        assert model.label(remembered.event_ids, [1.0, 2.0, 3.0]).applied == 3
        model.delete()
    finally:
        writer.close()
        reader.close()
