"""Inputs: numpy dtypes and shapes, the errors that say what to fix, sparse matrices, and
the package's hand-written wire encoding against the generated messages'."""

import numpy as np
import pytest

import okl
from conftest import regression_config
from okl import _arrays

pb = okl.pb


def generated_request(X, y=None, indices=None):
    """The ObserveRequest (y given) or PredictRequest the generated classes build."""
    vectors = []
    for row, x in enumerate(X):
        if indices is None:
            vectors.append(pb.Vector(values=[float(v) for v in x]))
        else:
            vectors.append(pb.Vector(values=[float(v) for v in x], indices=indices[row]))
    ref = pb.ModelRef(tenant="t", model="m")
    if y is None:
        return pb.PredictRequest(ref=ref, inputs=vectors)
    return pb.ObserveRequest(ref=ref, examples=[pb.Example(x=v, y=float(label))
                                                for v, label in zip(vectors, y)])


@pytest.mark.parametrize("dim", [1, 3, 17, 300])
@pytest.mark.parametrize("count", [1, 3, 5, 64])  # a few rows are joined, more vectorised
def test_the_dense_encoding_is_the_generated_messages(rng, dim, count):
    X = rng.normal(size=(count, dim))
    y = rng.normal(size=count)
    rows = _arrays.encode(_arrays.matrix(X), y)
    encoded = _arrays.ref_field("t", "m") + rows.blob
    assert pb.ObserveRequest.FromString(encoded) == generated_request(X, y)
    encoded = _arrays.ref_field("t", "m") + _arrays.inputs(X).blob
    assert pb.PredictRequest.FromString(encoded) == generated_request(X)
    assert pb.ObserveRequest.FromString(rows.slice(1, count)) == pb.ObserveRequest(
        examples=generated_request(X, y).examples[1:count])


def test_the_sparse_encoding_is_the_generated_messages(rng):
    sparse = pytest.importorskip("scipy.sparse")
    dense = np.zeros((4, 400))
    dense[0, [2, 130, 399]] = [1.5, -2.0, 3.0]   # indices of one and two varint bytes
    dense[2, 0] = 7.0                             # row 1 and 3: no entries
    y = np.array([1.0, -1.0, 0.5, 2.0])
    encoded = (_arrays.ref_field("t", "m")
               + _arrays.encode(_arrays.matrix(sparse.csr_matrix(dense)), y).blob)
    expected = generated_request([[1.5, -2.0, 3.0], [0.0], [7.0], [0.0]], y,
                                 indices=[[2, 130, 399], [0], [0], [0]])
    assert pb.ObserveRequest.FromString(encoded) == expected
    large = sparse.csr_matrix(([1.0, 2.0], ([0, 0], [5, 3_000_000])), shape=(1, 3_000_001))
    vector = pb.PredictRequest.FromString(_arrays.inputs(large).blob).inputs[0]
    assert list(vector.indices) == [5, 3_000_000] and list(vector.values) == [1.0, 2.0]


@pytest.mark.parametrize("ids", [
    ["%032x" % i for i in range(9)],                 # one length (the server's): vectorised
    ["a", "bb", "", "ccc" * 50, "d.e:f-g_h", "é"],    # any lengths, a 2-byte varint, UTF-8
    ["x"] * 3])                                      # a few: joined
def test_the_label_encoding_is_the_generated_messages(rng, ids):
    y = rng.normal(size=len(ids))
    y[0] = 0.0
    rows = _arrays.label_rows(_arrays.event_ids(ids), y)
    expected = pb.LabelRequest(ref=pb.ModelRef(tenant="t", model="m"), labels=[
        pb.EventLabel(event_id=i, y=float(v)) for i, v in zip(ids, y)])
    assert pb.LabelRequest.FromString(_arrays.ref_field("t", "m") + rows.blob) == expected
    assert pb.LabelRequest.FromString(rows.slice(1, len(ids))) == pb.LabelRequest(
        labels=expected.labels[1:])


@pytest.mark.parametrize("ids,wait,default", [
    (None, 0.0, None), (["a", "b"], 2.5, -1.0), (None, 0.0, 0.0), (["é"], 0.0, 1.0)])
def test_the_remember_encoding_is_the_generated_messages(ids, wait, default):
    X = np.ones((len(ids) if ids else 2, 3))
    encoded = (_arrays.ref_field("t", "m") + _arrays.inputs(X).blob
               + _arrays.remember_field(_arrays.event_ids(ids) if ids else None, wait, default))
    expected = generated_request(X)
    expected.remember.SetInParent()  # present even when empty: it asks to remember
    expected.remember.event_ids.extend(ids or [])
    expected.remember.wait_seconds = wait
    if default is not None:
        expected.remember.default_label = default
    parsed = pb.PredictRequest.FromString(encoded)
    assert parsed == expected and parsed.HasField("remember")
    assert parsed.remember.HasField("default_label") == (default is not None)


@pytest.fixture(scope="module")
def trained(client):
    """A model of dim 3 trained on float64 inputs, and its float64 predictions."""
    rng = np.random.default_rng(7)
    tenant = "arrays-test"
    model = client.create_model(tenant, "trained", regression_config(3))
    X = rng.integers(-3, 4, size=(300, 3)).astype(np.float64)
    model.observe(X, X.sum(axis=1))
    yield model, X[:40], model.predict(X[:40])
    model.delete()


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.int8, np.int16])
def test_every_real_dtype_predicts_as_float64(trained, dtype):
    model, X, expected = trained
    np.testing.assert_array_equal(model.predict(X.astype(dtype)), expected)


def test_lists_fortran_order_and_strided_views_predict_the_same(trained):
    model, X, expected = trained
    np.testing.assert_array_equal(model.predict(X.tolist()), expected)
    np.testing.assert_array_equal(model.predict(np.asfortranarray(X)), expected)
    wide = np.repeat(X, 2, axis=1)
    np.testing.assert_array_equal(model.predict(wide[:, ::2]), expected)
    np.testing.assert_array_equal(model.predict(np.repeat(X, 2, axis=0)[::2]), expected)
    assert model.predict(np.array([[True, False, True]])).dtype == np.float64


def test_float32_and_int_labels_observe_as_float64(client, tenant, rng):
    X = rng.normal(size=(100, 2))
    y = rng.integers(-2, 3, size=100)
    models = [client.create_model(tenant, name, regression_config(2))
              for name in ("f64", "f32", "int")]
    models[0].observe(X, y.astype(np.float64))
    models[1].observe(X.astype(np.float32).astype(np.float64), y.astype(np.float32))
    models[2].observe(X, y)
    assert models[0].snapshot_bytes() == models[2].snapshot_bytes()
    assert models[1].stats().steps == 100


@pytest.mark.parametrize("X, message", [
    (np.ones(3), r"X must be a 2-D array of shape \(n, d\); got shape \(3,\): reshape a "
                 r"single example with X.reshape\(1, -1\)"),
    (np.ones((2, 3, 1)), r"got shape \(2, 3, 1\)"),
    (5.0, r"got shape \(\)"),
    (np.ones((4, 0)), r"shape \(4, 0\): every row needs at least one value"),
    (np.array([["a", "b"]]), r"X must hold numbers; got dtype <U1"),
    (np.array([[1 + 1j]]), r"X must hold real numbers; got complex dtype complex128"),
    ([[1.0, 2.0], [3.0]], r"X must be a 2-D array of numbers of shape \(n, d\)"),
    (None, r"X is None"),
])
def test_bad_inputs_are_rejected_saying_what_to_fix(trained, X, message):
    model, _, _ = trained
    with pytest.raises(okl.InvalidArgument, match=message):
        model.predict(X)
    rows = 1 if X is None or np.isscalar(X) else len(X)
    with pytest.raises(ValueError, match=message):  # InvalidArgument is a ValueError
        model.observe(X, np.ones(rows))


@pytest.mark.parametrize("y, message", [
    (np.ones((5, 1)), r"y must be a 1-D array of labels; got shape \(5, 1\): flatten it "
                      r"with y.ravel\(\)"),
    (np.ones(4), r"X has 5 rows but y has 4 labels"),
    (None, r"y is None"),
])
def test_bad_labels_are_rejected_saying_what_to_fix(trained, y, message):
    model, _, _ = trained
    with pytest.raises(okl.InvalidArgument, match=message):
        model.observe(np.ones((5, 3)), y)
    assert model.stats().steps == 300


def test_a_value_that_is_not_finite_is_named(trained):
    """The server names it in a request (validated whole); the client before a stream,
    whose earlier messages would stay applied."""
    model, _, _ = trained
    X = np.ones((5, 3))
    X[3, 1] = np.nan
    with pytest.raises(okl.InvalidArgument, match=r"input 3: x\[1\] is nan; values must be "
                                                  "finite"):
        model.predict(X)
    with pytest.raises(okl.InvalidArgument, match=r"example 3: x\[1\] is nan.*no example "
                                                  "applied"):
        model.observe(X, np.ones(5))
    with pytest.raises(okl.InvalidArgument, match=r"example 2: label y is inf"):
        model.observe(np.ones((5, 3)), [1, 1, np.inf, 1, 1])
    with model.stream() as stream:
        with pytest.raises(okl.InvalidArgument, match=r"X\[3, 1\] is nan: every value must "
                                                      "be finite"):
            stream.observe(X, np.ones(5))
        with pytest.raises(okl.InvalidArgument, match=r"y\[2\] is -inf"):
            stream.observe(np.ones((5, 3)), [1, 1, -np.inf, 1, 1])
    assert model.stats().steps == 300


def test_observe_of_no_rows_is_an_error_saying_so(trained):
    model, _, _ = trained
    with pytest.raises(okl.InvalidArgument, match="X has no rows"):
        model.observe(np.empty((0, 3)), np.empty(0))


def test_sparse_inputs_predict_and_learn_as_dense(client, tenant, rng):
    sparse = pytest.importorskip("scipy.sparse")
    # + 0.0 turns the product's -0.0s into the 0s a sparse matrix leaves out, so that
    # the models' inputs are equal to the bit (their snapshots are compared).
    dense = rng.normal(size=(300, 20)) * (rng.uniform(size=(300, 20)) < 0.2) + 0.0
    dense[5] = 0.0  # a row without entries
    y = dense.sum(axis=1)
    config = regression_config(20, gamma=0.1)
    by_dense = client.create_model(tenant, "dense", config)
    by_csr = client.create_model(tenant, "csr", config)
    stored_sparse = client.create_model(
        tenant, "stored-sparse", config + " sparse { max_nonzeros: 20 }")
    expected = by_dense.observe(dense, y).predictions
    np.testing.assert_array_equal(by_csr.observe(sparse.csr_matrix(dense), y).predictions,
                                  expected)
    # Sparse storage sums the kernel in another order: equal to rounding.
    np.testing.assert_allclose(
        stored_sparse.observe(sparse.coo_matrix(dense), y).predictions, expected,
        rtol=1e-12, atol=1e-14)
    assert by_csr.snapshot_bytes() == by_dense.snapshot_bytes()
    for form in (sparse.csr_matrix, sparse.csc_matrix, sparse.coo_matrix):
        np.testing.assert_array_equal(by_csr.predict(form(dense[:30])),
                                      by_dense.predict(dense[:30]))
    # Unsorted and repeated indices are summed and sorted, as scipy reads them.
    messy = sparse.csr_matrix((np.array([1.0, 2.0, 0.5]), np.array([7, 3, 7]),
                               np.array([0, 3])), shape=(1, 20))
    clean = np.zeros((1, 20))
    clean[0, 3], clean[0, 7] = 2.0, 1.5
    np.testing.assert_array_equal(by_csr.predict(messy), by_dense.predict(clean))
    with by_csr.stream() as stream:
        with pytest.raises(okl.InvalidArgument, match="row 1 holds a non-finite value"):
            stream.observe(sparse.csr_matrix(np.array([[0, 1.0] * 10, [np.nan, 0] * 10])),
                           [1.0, 2.0])
