"""okl: the Python client of okl_server, the online kernel learning service.

Numpy arrays in and out, models as objects, errors as exceptions by status code, the C++
client's retry rules, delayed feedback (Model.remember now, Model.label later), and
scikit-learn estimators over a server's model (okl.sklearn).

Example:
    import numpy as np
    import okl

    client = okl.Client("127.0.0.1:50051")
    model = client.create_model("demo", "sine", {
        "dim": 1, "kernel": {"gaussian": {"gamma": 10}}, "loss": {"squared": {}},
        "learning_rate": {"eta0": 0.5}, "lambda": 0.001, "budget": {"max_terms": 200}})
    X = np.random.default_rng(0).uniform(0, 3, size=(2000, 1))
    model.observe(X, np.sin(X[:, 0]))
    print(model.predict([[1.0]]))      # about sin(1) = 0.84
    model.delete()

docs/python.md in the okl repository documents the package.
"""

try:
    from okl.v1 import okl_pb2 as pb
    from okl.v1 import okl_pb2_grpc as pb_grpc
except ImportError as _e:  # pragma: no cover (a source tree without its build step)
    raise ImportError(
        "okl's gRPC stubs (okl.v1) are missing: they are generated when the package is "
        "built, so install it with pip (/usr/bin/python3 -m pip install "
        "--break-system-packages --no-build-isolation --no-deps --no-index ./client/python "
        f"from an okl checkout) instead of importing it from the source tree ({_e})"
    ) from None

from okl._calls import BATCHES_APPLIED_METADATA_KEY, TENANT_METADATA_KEY, Options
from okl._client import Client, Model
from okl._config import ConfigLike, config_text, model_config
from okl._errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, Error,
                         FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                         PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable,
                         Unimplemented, Unknown, error_class)
from okl._stream import ObserveStream
from okl._types import (AckedBatch, Candidate, LabelOutcome, LabelResult, ModelInfo,
                        ModelStats, ObserveResult, Prediction, Remembered)

__version__ = "0.1.0"

__all__ = [
    "Client", "Model", "ObserveStream", "Options",
    "ModelInfo", "ModelStats", "Candidate", "ObserveResult", "Prediction", "AckedBatch",
    "Remembered", "LabelResult", "LabelOutcome",
    "ConfigLike", "model_config", "config_text", "pb", "pb_grpc",
    "TENANT_METADATA_KEY", "BATCHES_APPLIED_METADATA_KEY",
    "Error", "error_class", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded",
    "NotFound", "AlreadyExists", "PermissionDenied", "ResourceExhausted",
    "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented", "Internal",
    "Unavailable", "DataLoss", "Unauthenticated",
]
