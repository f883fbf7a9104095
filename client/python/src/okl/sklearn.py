"""scikit-learn estimators whose model lives on an okl server.

KernelRegressor and KernelClassifier learn online on okl_server: fit() creates the model
(replacing one of the same name) and streams the examples into it in order, partial_fit()
streams more, predict() asks the server. Their parameters are the connection (`address`,
`tenant`, `token`, TLS), the model's name (`model`) and its `config` (a dict, a
text-format string or an okl.pb.ModelConfig, its dim taken from X when it leaves dim
unset); by default okl's model selection (`select {}`), which needs no tuning.

With `model=None` (the default) each estimator makes a model of its own name
(okl-sklearn-<random>) on its first fit and deletes it when the estimator is garbage
collected (or on delete_model()): so cross_val_score, GridSearchCV and clone() give each
fold its own model and leave none behind. A named model is the caller's: it is replaced
by fit, continued by partial_fit (an existing one too), and never deleted but by
delete_model().

They follow scikit-learn's estimator protocol (get_params/set_params, clone-able, usable
in a Pipeline and in cross_val_score) without importing scikit-learn: where it is not
installed they still work on their own. The classifier takes any number of classes: two
are mapped to -1 and +1 on the wire (classes_[1] is +1) for a binary loss; more (or a
multi-class loss in the config) make a multi-class model whose classes are the labels'
str() names.

Example:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.model_selection import cross_val_score
    from okl.sklearn import KernelRegressor

    pipeline = make_pipeline(StandardScaler(), KernelRegressor("127.0.0.1:50051", "demo"))
    print(cross_val_score(pipeline, X, y, cv=5))
"""

from __future__ import annotations

import inspect
import threading
import uuid
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

import okl
from okl import _arrays
from okl._client import Client, Model, PathOrPem
from okl._config import ConfigLike, model_config
from okl._types import FloatArray

__all__ = ["KernelRegressor", "KernelClassifier", "NotFittedError"]

try:  # scikit-learn's own, where it is installed, so that its utilities recognise it
    from sklearn.exceptions import NotFittedError
except ImportError:
    class NotFittedError(ValueError, AttributeError):  # type: ignore[no-redef]
        """An estimator used before fit (scikit-learn's NotFittedError where installed)."""

_REGRESSOR_CONFIG = "loss { squared {} } select {}"
_CLASSIFIER_CONFIG = "loss { hinge {} } select {}"
# More than two classes: budgeted Pegasos (eta_t = 1 / (lambda t)) on the Crammer-Singer
# hinge with 500 merged terms, the Gaussian kernel's gamma scaled to the data as
# scikit-learn's SVC does by default (gamma="scale": 1 / (n_features * X.var())).
_MULTICLASS_LAMBDA = 1e-4
_MULTICLASS_CONFIG = (
    "loss {{ multiclass_hinge {{}} }} kernel {{ gaussian {{ gamma: {gamma!r} }} }} "
    "learning_rate {{ eta0: {eta0!r} schedule: POWER theta: 1 }} lambda: {lam!r} "
    "budget {{ max_terms: 500 policy: MERGE }}")
_CLEANUP_DEADLINE_S = 5.0

# One client per connection, shared by every estimator in the process (clones too).
_clients: Dict[Tuple[Any, ...], Client] = {}
_clients_lock = threading.Lock()


def _client(address: str, token: Optional[str], tls_ca: Optional[PathOrPem],
            tls_cert: Optional[PathOrPem], tls_key: Optional[PathOrPem],
            deadline: float) -> Client:
    key = (address, token, tls_ca, tls_cert, tls_key, deadline)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = Client(address, token=token, tls_ca=tls_ca, tls_cert=tls_cert,
                            tls_key=tls_key, deadline=deadline)
            _clients[key] = client
        return client


def _delete_quietly(client: Client, tenant: str, name: str) -> None:
    """Deletes an estimator's own model when the estimator goes away; errors are dropped
    (the server may be gone), and it waits at most a few seconds."""
    try:
        client.with_deadline(_CLEANUP_DEADLINE_S).model(tenant, name).delete()
    except Exception:  # noqa: BLE001 (a finaliser can report nothing)
        pass


class _ServerEstimator:
    """What both estimators share: parameters, the server's model, fitting."""

    _default_config = ""
    _estimator_type = ""

    def __init__(self, address: str = "127.0.0.1:50051", tenant: str = "default",
                 model: Optional[str] = None, config: Optional[ConfigLike] = None, *,
                 token: Optional[str] = None, tls_ca: Optional[PathOrPem] = None,
                 tls_cert: Optional[PathOrPem] = None, tls_key: Optional[PathOrPem] = None,
                 deadline: float = 30.0) -> None:
        # Stored as given (scikit-learn's clone() checks that), checked when used.
        self.address = address
        self.tenant = tenant
        self.model = model
        self.config = config
        self.token = token
        self.tls_ca = tls_ca
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self.deadline = deadline

    # --- scikit-learn's parameter protocol ------------------------------------------------

    @classmethod
    def _param_names(cls) -> List[str]:
        signature = inspect.signature(cls.__init__)
        return [name for name in signature.parameters if name != "self"]

    def get_params(self, deep: bool = True) -> Dict[str, Any]:
        """The estimator's parameters, {name: value} (they hold no estimators, so `deep`
        changes nothing)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> "_ServerEstimator":
        """Sets parameters by name; returns the estimator. A fitted model keeps serving
        until the next fit."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}: "
                                 f"valid parameters are {', '.join(valid)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {name: p.default
                    for name, p in inspect.signature(type(self).__init__).parameters.items()}
        changed = [f"{name}={value!r}" for name, value in self.get_params().items()
                   if value is not defaults.get(name) and value != defaults.get(name)]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __getstate__(self) -> Dict[str, Any]:
        # A copy (pickled, deep-copied) serves the same model but does not own it: only
        # the estimator that made an unnamed model deletes it.
        state = dict(self.__dict__)
        state.pop("_finalizer", None)
        return state

    # --- The server's model ---------------------------------------------------------------

    def _client(self) -> Client:
        return _client(self.address, self.token, self.tls_ca, self.tls_cert, self.tls_key,
                       self.deadline)

    @property
    def model_(self) -> Model:
        """The okl.Model this estimator learns into (after fit or partial_fit)."""
        self._check_fitted()
        return self._client().model(self.tenant, self.model_name_)

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_name_"):
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet: call fit or partial_fit "
                "first")

    def _config(self, dim: int) -> Any:
        config = model_config(self._default_config if self.config is None else self.config,
                              dim=dim)
        if config.dim != dim:
            raise okl.InvalidArgument(f"X has {dim} features but the config's dim is "
                                      f"{config.dim}: leave dim unset to take X's")
        return config

    def _create(self, dim: int, config: Any = None) -> None:
        """Creates the model for inputs of `dim` features (of `config`, else the
        estimator's): a named one replaces the model of its name; an unnamed one gets a
        fresh name, and the estimator's previous unnamed model is deleted."""
        client = self._client()
        if config is None:
            config = self._config(dim)
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()  # deletes the previous unnamed model now
        self._finalizer: Optional[weakref.finalize] = None
        if self.model is None:
            name = "okl-sklearn-" + uuid.uuid4().hex[:16]
        else:
            name = self.model
            try:
                client.model(self.tenant, name).delete()
            except okl.NotFound:
                pass
        client.create_model(self.tenant, name, config)
        if self.model is None:
            self._finalizer = weakref.finalize(self, _delete_quietly, client, self.tenant,
                                               name)
        self.model_name_ = name
        self.n_features_in_ = dim

    def _attach_or_create(self, dim: int, config: Any = None) -> None:
        """partial_fit's first call: a named model that exists is continued."""
        if self.model is not None:
            try:
                info = self._client().model(self.tenant, self.model).info()
            except okl.NotFound:
                info = None
            if info is not None:
                if info.config.dim != dim:
                    raise okl.InvalidArgument(
                        f"X has {dim} features but model {self.model!r} of tenant "
                        f"{self.tenant!r} has dim {info.config.dim}")
                self.model_name_ = self.model
                self.n_features_in_ = dim
                return
        self._create(dim, config)

    def delete_model(self) -> None:
        """Deletes the model on the server (named or not) and unfits the estimator."""
        self._check_fitted()
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer.detach()
            self._finalizer = None
        try:
            self.model_.delete()
        except okl.NotFound:
            pass
        del self.model_name_

    def _inputs(self, X: Any) -> Any:
        """X checked (2-D, of the fitted feature count): a float64 array or CSR matrix."""
        X = _arrays.matrix(X)
        fitted = getattr(self, "n_features_in_", None)
        if fitted is not None and X.shape[1] != fitted:
            raise okl.InvalidArgument(f"X has {X.shape[1]} features, but "
                                      f"{type(self).__name__} is expecting {fitted} features "
                                      "as input")
        return X

    def _continue(self, X: Any, y: FloatArray) -> None:
        """partial_fit's step: the model made or found on the first call, then (X, y)."""
        if not hasattr(self, "model_name_"):
            self._attach_or_create(X.shape[1])
        else:
            X = self._inputs(X)
        self.model_.observe(X, y)

    def _decision(self, X: Any) -> FloatArray:
        self._check_fitted()
        return self.model_.predict(self._inputs(X))


class KernelRegressor(_ServerEstimator):
    """Regression by an okl model: any config with a regression loss (squared by
    default, with okl's model selection: `loss { squared {} } select {}`).

    Parameters:
      address: okl_server's host:port.
      tenant: the tenant that owns the model.
      model: the model's name; None: a model of the estimator's own, deleted with it.
      config: the model's config (dict, text format or okl.pb.ModelConfig); dim, if
        unset, is X's number of features. None: `loss { squared {} } select {}`.
      token, tls_ca, tls_cert, tls_key: as okl.Client's.
      deadline: seconds per call.

    Attributes after fit: model_name_, model_ (the okl.Model), n_features_in_.
    """

    _default_config = _REGRESSOR_CONFIG
    _estimator_type = "regressor"

    def fit(self, X: Any, y: Any) -> "KernelRegressor":
        """Learns (X, y) in order on a new model (replacing the model of that name)."""
        X = _arrays.matrix(X)
        labels = _arrays.labels(y, X.shape[0])
        self._create(X.shape[1])
        self.model_.observe(X, labels)
        return self

    def partial_fit(self, X: Any, y: Any) -> "KernelRegressor":
        """Learns (X, y) in order on the model: the first call creates it (or continues a
        named model that exists), later calls continue it."""
        X = _arrays.matrix(X)
        self._continue(X, _arrays.labels(y, X.shape[0]))
        return self

    def predict(self, X: Any) -> "npt.NDArray[Any]":
        """The model's predictions, a 1-D array of one per row of X."""
        return self._decision(X)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """The coefficient of determination R^2 of predict(X) against y."""
        truth = _arrays.labels(y, _row_count(X))
        return _r2(truth, self.predict(X), sample_weight)


class KernelClassifier(_ServerEstimator):
    """Classification by an okl model, of any number of classes (numbers, strings, bools;
    classes_ is their sorted unique values, as scikit-learn requires).

    Two classes go to a binary loss as -1 (classes_[0]) and +1 (classes_[1]): hinge by
    default, with okl's model selection (`loss { hinge {} } select {}`); decision_function
    is the model's f(x), of shape (n,), and predict is classes_[1] where it is positive.

    More classes (or a config whose loss is multiclass_hinge or softmax) make a
    multi-class model: each class is named on the server by str(label) (so those names
    must differ), max_classes is the number of classes unless the config sets it, and the
    default config is budgeted Pegasos on the Crammer-Singer hinge with 500 merged terms
    and gamma = 1 / (n_features * X.var()). decision_function is then of shape (n, K),
    its columns the classes_ (the server keeps them in the order first seen; a class not
    seen yet scores 0), and predict_proba (softmax models) the same for probabilities.

    Parameters: as KernelRegressor's.

    Attributes after fit: classes_, model_name_, model_ (the okl.Model), n_features_in_.
    """

    _default_config = _CLASSIFIER_CONFIG
    _estimator_type = "classifier"

    def fit(self, X: Any, y: Any) -> "KernelClassifier":
        """Learns (X, y) in order on a new model (replacing the model of that name); y
        holds at least two distinct labels."""
        X = _arrays.matrix(X)
        labels = _label_array(y, _row_count(X))
        self._set_classes(np.unique(labels), "y")
        self._create(X.shape[1], self._classifier_config(X))
        self._observe(X, labels)
        return self

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> "KernelClassifier":
        """Learns (X, y) in order on the model. The first call creates it (or continues a
        named model that exists) and fixes classes_: from `classes` if given, else from y,
        which must then hold every class (at least two)."""
        X = _arrays.matrix(X)
        labels = _label_array(y, _row_count(X))
        if not hasattr(self, "classes_"):
            if classes is None:
                found = np.unique(labels)
                if found.shape[0] < 2:
                    raise okl.InvalidArgument(
                        f"y holds only {found.tolist()}: pass classes=[a, b, ...] on the "
                        "first partial_fit call")
                self._set_classes(found, "y")
            else:
                self._set_classes(np.unique(np.asarray(classes)), "classes")
        elif classes is not None and not np.array_equal(np.unique(np.asarray(classes)),
                                                         self.classes_):
            raise okl.InvalidArgument(f"classes {np.asarray(classes).tolist()} differ from "
                                      f"the first call's {self.classes_.tolist()}")
        if not hasattr(self, "model_name_"):
            self._attach_or_create(X.shape[1], self._classifier_config(X))
            loss = self.model_.config().loss  # a named model continued keeps its own
            self._multiclass_ = loss.HasField("multiclass_hinge") or loss.HasField("softmax")
        else:
            X = self._inputs(X)
        self._observe(X, labels)
        return self

    def decision_function(self, X: Any) -> FloatArray:
        """Two classes: the model's f(x) per row of X, positive for classes_[1]. More: the
        score of each class, shape (n, len(classes_)), its columns the classes_."""
        self._check_fitted()
        if not self._multiclass_:
            return self._decision(X)
        scores = self._class_columns(self._details(X).class_scores)
        return scores[:, 1] - scores[:, 0] if len(self.classes_) == 2 else scores

    def predict(self, X: Any) -> "npt.NDArray[Any]":
        """Each row's class: the one of highest score (two classes: classes_[1] where
        decision_function is positive, else classes_[0])."""
        self._check_fitted()
        if not self._multiclass_:
            return self.classes_[(self.decision_function(X) > 0).astype(np.intp)]
        by_name = {name: i for i, name in enumerate(self._names)}
        details = self._details(X)
        # The server's own choice (its ties go to the class learned first).
        return self.classes_[np.array([by_name[c] for c in details.predicted_classes],
                                      dtype=np.intp)]

    def predict_proba(self, X: Any) -> FloatArray:
        """A softmax model's probability of each class, shape (n, len(classes_)), its
        columns the classes_ (a class not seen yet has probability 0); each row sums to
        1."""
        self._check_fitted()
        if not self._multiclass_ or not self.model_.config().loss.HasField("softmax"):
            raise okl.InvalidArgument("predict_proba needs a softmax model: set the config's "
                                      "loss to softmax {}")
        return self._class_columns(self._details(X).probabilities)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """The (weighted) fraction of rows whose predicted label is y's."""
        truth = _label_array(y, _row_count(X))
        correct = (self.predict(X) == truth).astype(np.float64)
        return float(np.average(correct, weights=sample_weight))

    # --- Classes on the wire ------------------------------------------------------------

    def _set_classes(self, classes: "npt.NDArray[Any]", what: str) -> None:
        if classes.shape[0] < 2:
            raise okl.InvalidArgument(f"{what} holds {classes.shape[0]} class "
                                      f"{classes.tolist()}: a classifier needs at least two")
        names = [str(c) for c in classes.tolist()]
        if len(set(names)) != len(names):
            raise okl.InvalidArgument(f"{what}'s classes {classes.tolist()[:10]} are not "
                                      "told apart by their str() names, which the server "
                                      "keeps")
        self.classes_ = classes
        self._names = names

    def _classifier_config(self, X: Any) -> Any:
        """The config fit creates: the estimator's, or for more than two classes the
        multi-class default scaled to X; a multi-class config gets max_classes."""
        dim = X.shape[1]
        count = len(self.classes_)
        if self.config is None and count > 2:
            variance = float(_arrays.matrix(X).power(2).mean() - X.mean() ** 2) \
                if _arrays.is_sparse(X) else float(np.var(X))
            gamma = 1.0 / (dim * variance) if variance > 0 else 1.0
            config = model_config(_MULTICLASS_CONFIG.format(
                gamma=gamma, eta0=1.0 / _MULTICLASS_LAMBDA, lam=_MULTICLASS_LAMBDA), dim=dim)
        else:
            config = self._config(dim)
        self._multiclass_ = config.loss.HasField("multiclass_hinge") or \
            config.loss.HasField("softmax")
        if self._multiclass_ and config.max_classes == 0:
            config.max_classes = count
        elif not self._multiclass_ and count > 2:
            raise okl.InvalidArgument(
                f"y holds {count} classes but the config's loss is binary: use "
                "loss { multiclass_hinge {} } or loss { softmax {} }, or leave config unset")
        return config

    def _observe(self, X: Any, labels: "npt.NDArray[Any]") -> None:
        unknown = ~np.isin(labels, self.classes_)
        if unknown.any():
            raise okl.InvalidArgument(
                f"y holds {labels[unknown][0]!r}, not one of the classes "
                f"{self.classes_.tolist()}")
        if self._multiclass_:
            self.model_.observe_classes(X, [str(c) for c in labels.tolist()])
        else:
            self.model_.observe(X, np.where(labels == self.classes_[1], 1.0, -1.0))

    def _details(self, X: Any) -> Any:
        return self.model_.predict_details(self._inputs(X))

    def _class_columns(self, rows: FloatArray) -> FloatArray:
        """The server's columns (its classes in the order first seen) as the classes_'."""
        column = {name: i for i, name in enumerate(self.model_.stats().classes)}
        out = np.zeros((rows.shape[0], len(self.classes_)))
        for j, name in enumerate(self._names):
            i = column.get(name, rows.shape[1])
            if i < rows.shape[1]:
                out[:, j] = rows[:, i]
        return out

    def _check_fitted(self) -> None:
        super()._check_fitted()
        if not hasattr(self, "classes_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit or "
                                 "partial_fit first")


def _row_count(X: Any) -> int:
    shape = X.shape if hasattr(X, "shape") else np.shape(X)
    return int(shape[0]) if len(shape) else 0


def _label_array(y: Any, count: int) -> "npt.NDArray[Any]":
    labels = np.asarray(y)
    if labels.ndim != 1:
        fix = ": flatten it with y.ravel()" if labels.ndim == 2 and 1 in labels.shape else ""
        raise okl.InvalidArgument(f"y must be a 1-D array of labels; got shape "
                                  f"{labels.shape}{fix}")
    if labels.shape[0] != count:
        raise okl.InvalidArgument(f"X has {count} rows but y has {labels.shape[0]} labels: "
                                  "pass one label per row")
    return labels


def _r2(truth: FloatArray, predicted: FloatArray, sample_weight: Any) -> float:
    weights = np.ones_like(truth) if sample_weight is None else np.asarray(
        sample_weight, dtype=np.float64)
    residual = float(np.sum(weights * (truth - predicted) ** 2))
    mean = np.average(truth, weights=weights)
    total = float(np.sum(weights * (truth - mean) ** 2))
    if total == 0.0:  # as scikit-learn's r2_score: perfect or nothing to explain
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total

