"""okl.sklearn's estimators against a real okl_server: the scikit-learn protocol, a
Pipeline after StandardScaler, cross_val_score with a model per fold (deleted after),
the classifier's labels; and the module without scikit-learn installed."""

import gc
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import okl
from okl.sklearn import KernelClassifier, KernelRegressor, NotFittedError

SMALL = ("kernel { gaussian { gamma: 0.5 } } loss { squared {} } learning_rate { eta0: 0.5 } "
         "lambda: 0.001 budget { max_terms: 100 }")


def regression_data(rng, count=600):
    # Features of very different scales: StandardScaler's job.
    X = rng.normal(size=(count, 3)) * [1.0, 10.0, 100.0]
    y = np.sin(X[:, 0]) + 0.05 * X[:, 1] + rng.normal(scale=0.05, size=count)
    return X, y


def models_of(client, tenant):
    return sorted(m.model for m in client.list_models(tenant))


def test_regressor_fit_predict_score_and_partial_fit(server, client, tenant, rng):
    X, y = regression_data(rng)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    regressor = KernelRegressor(server.address, tenant, model="named", config=SMALL)
    with pytest.raises(NotFittedError, match="call fit or partial_fit first"):
        regressor.predict(X)
    assert regressor.fit(X[:400], y[:400]) is regressor
    assert regressor.n_features_in_ == 3 and regressor.model_name_ == "named"
    assert regressor.model_.stats().steps == 400
    assert regressor.predict(X[400:]).shape == (200,)
    assert regressor.score(X[400:], y[400:]) > 0.8
    regressor.partial_fit(X[400:], y[400:])
    assert regressor.model_.stats().steps == 600
    regressor.fit(X[:100], y[:100])  # fit starts afresh
    assert regressor.model_.stats().steps == 100
    with pytest.raises(okl.InvalidArgument, match="X has 2 features, but KernelRegressor is "
                                                  "expecting 3 features as input"):
        regressor.predict(X[:, :2])
    # partial_fit on a fresh estimator continues a named model that exists.
    again = KernelRegressor(server.address, tenant, model="named", config=SMALL)
    again.partial_fit(X[100:150], y[100:150])
    assert again.model_.stats().steps == 150
    with pytest.raises(okl.InvalidArgument, match="has dim 3"):
        KernelRegressor(server.address, tenant, model="named").partial_fit(X[:5, :2], y[:5])
    with pytest.raises(okl.InvalidArgument, match="X has 3 features but the config's dim is 2"):
        KernelRegressor(server.address, tenant, config="dim: 2 " + SMALL).fit(X, y)
    # A named model is the caller's: it outlives the estimators.
    del regressor, again
    gc.collect()
    assert models_of(client, tenant) == ["named"]


def test_get_params_set_params_clone_and_pickle(server, tenant):
    sklearn_base = pytest.importorskip("sklearn.base")
    regressor = KernelRegressor(server.address, tenant, config=SMALL, deadline=10.0)
    params = regressor.get_params()
    assert params == {"address": server.address, "tenant": tenant, "model": None,
                      "config": SMALL, "token": None, "tls_ca": None, "tls_cert": None,
                      "tls_key": None, "deadline": 10.0}
    copy = sklearn_base.clone(regressor)
    assert copy is not regressor and copy.get_params() == params
    assert regressor.set_params(model="other") is regressor and regressor.model == "other"
    with pytest.raises(ValueError, match="invalid parameter 'gamma'"):
        regressor.set_params(gamma=1)
    assert repr(regressor).startswith("KernelRegressor(address=")
    assert sklearn_base.is_regressor(regressor)
    assert sklearn_base.is_classifier(KernelClassifier())
    restored = pickle.loads(pickle.dumps(regressor))
    assert restored.get_params() == regressor.get_params()


def test_in_a_pipeline_after_standard_scaler(server, client, tenant, rng):
    pytest.importorskip("sklearn")
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    X, y = regression_data(rng)
    pipeline = make_pipeline(StandardScaler(), KernelRegressor(server.address, tenant))
    pipeline.fit(X[:450], y[:450])
    assert pipeline.score(X[450:], y[450:]) > 0.9
    # Unscaled, the same model (the default: okl's model selection) does far worse.
    unscaled = KernelRegressor(server.address, tenant).fit(X[:450], y[:450])
    assert unscaled.score(X[450:], y[450:]) < pipeline.score(X[450:], y[450:])
    name = pipeline[-1].model_name_
    assert name.startswith("okl-sklearn-") and name in models_of(client, tenant)
    first = unscaled.model_name_
    unscaled.fit(X[:100], y[:100])  # a refit makes a new model and deletes the old one
    assert unscaled.model_name_ != first
    assert models_of(client, tenant) == sorted([name, unscaled.model_name_])
    del pipeline, unscaled
    gc.collect()
    assert models_of(client, tenant) == []  # deleted with their estimators


def test_cross_val_score_gives_each_fold_its_model_and_deletes_them(server, client, tenant,
                                                                     rng):
    pytest.importorskip("sklearn")
    from sklearn.model_selection import cross_val_score, cross_validate
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    X, y = regression_data(rng)
    pipeline = make_pipeline(StandardScaler(), KernelRegressor(server.address, tenant))
    scores = cross_val_score(pipeline, X, y, cv=3)
    assert scores.shape == (3,) and (scores > 0.9).all()
    gc.collect()
    assert models_of(client, tenant) == []
    kept = cross_validate(pipeline, X, y, cv=3, return_estimator=True)
    names = {fitted[-1].model_name_ for fitted in kept["estimator"]}
    assert len(names) == 3 and sorted(names) == models_of(client, tenant)
    del kept
    gc.collect()
    assert models_of(client, tenant) == []
    assert not hasattr(pipeline[-1], "model_name_")  # the original was only cloned


def test_classifier_maps_any_two_labels_to_signs_and_back(server, client, tenant, rng):
    X, _ = regression_data(rng, 500)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    labels = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, "dog", "cat")
    classifier = KernelClassifier(server.address, tenant, model="pets")
    classifier.fit(X[:400], labels[:400])
    assert classifier.classes_.tolist() == ["cat", "dog"]
    predicted = classifier.predict(X[400:])
    assert set(predicted) <= {"cat", "dog"}
    decision = classifier.decision_function(X[400:])
    np.testing.assert_array_equal(predicted, np.where(decision > 0, "dog", "cat"))
    assert classifier.score(X[400:], labels[400:]) > 0.85
    # On the wire: -1 for classes_[0], +1 for classes_[1]: one hinge step on a "dog" makes
    # f positive there, one on a "cat" negative.
    signs = KernelClassifier(server.address, tenant, config=SMALL.replace("squared", "hinge"))
    signs.partial_fit([[0.0, 0.0, 0.0]], ["dog"], classes=["dog", "cat"])
    signs.partial_fit([[9.0, 9.0, 9.0]], ["cat"])
    dog, cat = signs.decision_function([[0.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    assert dog > 0.4 and cat < -0.4
    with pytest.raises(okl.InvalidArgument, match="y holds 'bird', not one of the classes"):
        classifier.partial_fit(X[:2], ["cat", "bird"])
    with pytest.raises(okl.InvalidArgument, match="3 classes but the config's loss is binary"):
        KernelClassifier(server.address, tenant, config=SMALL.replace("squared", "hinge")).fit(
            X[:3], ["a", "b", "c"])
    with pytest.raises(okl.InvalidArgument, match="at least two"):
        KernelClassifier(server.address, tenant).fit(X[:3], ["a", "a", "a"])
    # partial_fit: classes on the first call when y holds one label only.
    online = KernelClassifier(server.address, tenant, config=(
        "kernel { gaussian { gamma: 0.5 } } loss { logistic {} } learning_rate { eta0: 0.5 } "
        "budget { max_terms: 100 }"))
    with pytest.raises(okl.InvalidArgument, match=r"pass classes=\[a, b, ...\]"):
        online.partial_fit(X[:1], [True])
    for start in range(0, 400, 50):
        online.partial_fit(X[start:start + 50], labels[start:start + 50] == "dog",
                           classes=[False, True])
    assert online.classes_.tolist() == [False, True]
    assert online.model_.stats().steps == 400
    assert online.score(X[400:], labels[400:] == "dog") > 0.8
    online.delete_model()
    with pytest.raises(NotFittedError):
        online.predict(X)


def test_classifier_in_cross_val_score_and_one_vs_rest(server, client, tenant, rng):
    pytest.importorskip("sklearn")
    from sklearn.model_selection import cross_val_score
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    X, _ = regression_data(rng, 450)
    labels = np.where(X[:, 0] > 0, 1, 7)
    scores = cross_val_score(make_pipeline(StandardScaler(), KernelClassifier(
        server.address, tenant)), X, labels, cv=3)
    assert (scores > 0.75).all()
    three = np.digitize(X[:, 0], [-0.5, 0.5])
    ovr = make_pipeline(StandardScaler(), OneVsRestClassifier(KernelClassifier(
        server.address, tenant, config=SMALL.replace("squared", "hinge"))))
    ovr.fit(X[:300], three[:300])
    assert ovr.score(X[300:], three[300:]) > 0.7
    assert len(models_of(client, tenant)) == 3
    del ovr
    gc.collect()
    assert models_of(client, tenant) == []


def test_classifier_of_many_classes_is_one_multi_class_model(server, client, tenant, rng):
    """More than two classes: one multi-class model whose columns are the sorted
    classes_, whatever order the server first saw them in."""
    X, _ = regression_data(rng, 900)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    # Four bands of X[:, 0], named so that sorted order is not the order first seen.
    names = np.array(["zebra", "bee", "apple", "moth"])
    labels = names[np.digitize(X[:, 0], [-0.7, 0.0, 0.7])]
    classifier = KernelClassifier(server.address, tenant).fit(X[:700], labels[:700])
    assert classifier.classes_.tolist() == sorted(names.tolist())
    config = classifier.model_.config()
    assert config.loss.HasField("multiclass_hinge") and config.max_classes == 4
    assert classifier.model_.stats().classes == list(dict.fromkeys(str(c) for c in labels[:700]))
    decision = classifier.decision_function(X[700:])
    assert decision.shape == (200, 4)
    predicted = classifier.predict(X[700:])
    np.testing.assert_array_equal(predicted, classifier.classes_[decision.argmax(axis=1)])
    assert classifier.score(X[700:], labels[700:]) > 0.8
    with pytest.raises(okl.InvalidArgument, match="predict_proba needs a softmax model"):
        classifier.predict_proba(X[:2])
    # A softmax config: probabilities in the classes_' columns; a class declared to
    # partial_fit but not seen yet has probability 0 and score 0.
    softmax = KernelClassifier(server.address, tenant, config=(
        "kernel { gaussian { gamma: 0.5 } } loss { softmax {} } learning_rate { eta0: 0.5 } "
        "lambda: 0.001 budget { max_terms: 100 policy: MERGE }"))
    seen = labels[:300] != "moth"
    softmax.partial_fit(X[:300][seen], labels[:300][seen], classes=names)
    assert softmax.model_.config().max_classes == 4
    probabilities = softmax.predict_proba(X[700:])
    assert probabilities.shape == (200, 4)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-12)
    moth = classifier.classes_.tolist().index("moth")
    assert (probabilities[:, moth] == 0).all()
    assert (softmax.decision_function(X[700:])[:, moth] == 0).all()
    softmax.partial_fit(X[300:700], labels[300:700])
    assert (softmax.predict_proba(X[700:])[:, moth] > 0).all()
    assert softmax.score(X[700:], labels[700:]) > 0.7
    with pytest.raises(okl.InvalidArgument, match="not one of the classes"):
        softmax.partial_fit(X[:1], ["wasp"])


def test_sparse_input_to_the_estimators(server, tenant, rng):
    sparse = pytest.importorskip("scipy.sparse")
    X = rng.normal(size=(300, 30)) * (rng.uniform(size=(300, 30)) < 0.1)
    y = X[:, :5].sum(axis=1)
    dense = KernelRegressor(server.address, tenant, config=SMALL).fit(X, y)
    csr = KernelRegressor(server.address, tenant, config=SMALL).fit(sparse.csr_matrix(X), y)
    np.testing.assert_array_equal(csr.predict(sparse.csr_matrix(X[:20])), dense.predict(X[:20]))


def test_the_estimators_work_without_scikit_learn(options, server, tenant):
    """With scikit-learn absent (its import blocked) okl.sklearn imports nothing of it,
    and fit, predict, get_params and set_params still work."""
    program = """
import sys
sys.modules["sklearn"] = None  # `import sklearn` now raises ImportError
import numpy as np
from okl.sklearn import KernelRegressor, NotFittedError
assert issubclass(NotFittedError, ValueError) and NotFittedError.__module__ == "okl.sklearn"
regressor = KernelRegressor(sys.argv[1], sys.argv[2], config=sys.argv[3])
X = np.linspace(-1, 1, 200).reshape(-1, 1)
regressor.fit(X, X[:, 0] ** 2)
assert regressor.predict(X[:5]).shape == (5,)
assert regressor.set_params(tenant="x").get_params()["tenant"] == "x"
assert not any(name == "sklearn" or name.startswith("sklearn.") for name, module
               in sys.modules.items() if module is not None)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", program, server.address, tenant, SMALL],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=options.site))
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
