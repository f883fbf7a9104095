"""okl.Client and okl.Model: okl_server's calls with numpy in and out."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar,
                    Union)

import grpc
import numpy as np
import numpy.typing as npt

from okl import _arrays
from okl._calls import Metadata, Options, Retry, call, call_metadata
from okl._config import ConfigLike, model_config
from okl._errors import Error, Internal, InvalidArgument
from okl._stream import ObserveStream
from okl._types import (AckedBatch, FloatArray, LabelOutcome, LabelResult, ModelInfo,
                        ModelStats, ObserveResult, Prediction, Remembered)
from okl.v1 import okl_pb2 as pb
from okl.v1 import okl_pb2_grpc as pb_grpc

T = TypeVar("T")
PathOrPem = Union[str, "os.PathLike[str]", bytes]

_SERVICE = "/" + pb.DESCRIPTOR.services_by_name["OnlineKernelLearning"].full_name + "/"
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_SNAPSHOT_CHUNK_BYTES = 1 << 20  # as okl's server and C++ client chunk snapshots
# An observe() of more examples (or bytes) than one request may carry streams them in
# messages of about this many.
_STREAM_BATCH = 1000
_STREAM_MESSAGE_BYTES = 4 << 20
# okl_server's --max_response_predictions: a stream's answer holds the predictions of at
# most this many examples, so observe() closes its streams before.
_PREDICTIONS_PER_STREAM = 100_000
_OUTCOMES = {outcome.value: outcome for outcome in LabelOutcome}


def _read_pem(value: Optional[PathOrPem], what: str) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    try:
        with open(value, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidArgument(f"{what}: cannot read {value}: {e.strerror}") from None


class Client:
    """A connection to okl_server (service okl.v1.OnlineKernelLearning).

    Every call has a deadline (`deadline` seconds, 30 by default, covering its retries)
    and carries the metadata x-okl-tenant with the model's tenant (a router in front of
    several servers sends a tenant's calls to the one holding its models) and, with a
    token, `authorization: Bearer TOKEN`. The read-only calls (get, list, predict,
    snapshot, health) and label (the first label of an event wins) are retried on
    UNAVAILABLE with exponential backoff; writes (observe, streams, remember) are retried
    only when the server said it applied nothing (okl-batches-applied: 0); create,
    delete and restore never. Errors are okl.Error subclasses by status code,
    carrying the server's message.

    The channel connects lazily: an unreachable server shows as okl.Unavailable on the
    first call. A Client is thread-safe; close() it (or use `with`) when done.

    Args:
      address: okl_server's host:port (or any gRPC target).
      token: a bearer token (okl token new); over plain TCP it travels in clear text.
      tls_ca: connect with TLS, authenticating the server by these CA certificates (a
        PEM file's path, or its bytes); tls=True with no tls_ca uses the system's roots.
      tls_cert, tls_key: a client certificate chain and its key (paths or PEM bytes),
        both or neither, for mutual TLS.
      deadline and the other keyword arguments: see okl.Options.

    Example:
        client = okl.Client("127.0.0.1:50051")
        model = client.create_model("demo", "sine", "dim: 1 kernel { gaussian { gamma: 10 } } "
                                    "loss { squared {} } learning_rate { eta0: 0.5 } "
                                    "budget { max_terms: 200 }")
        model.observe(X, y)
        print(model.predict(X[:5]))
    """

    def __init__(self, address: str, token: Optional[str] = None,
                 tls_ca: Optional[PathOrPem] = None, tls_cert: Optional[PathOrPem] = None,
                 tls_key: Optional[PathOrPem] = None, *, tls: bool = False,
                 options: Optional[Options] = None, **option_fields: Any) -> None:
        if not address:
            raise InvalidArgument("address is empty: pass okl_server's host:port")
        if token is not None and (not token or not token.isascii() or not token.isprintable()
                                  or " " in token):
            raise InvalidArgument("token must be printable ASCII without spaces")
        if (tls_cert is None) != (tls_key is None):
            raise InvalidArgument("tls_cert and tls_key go together: pass both or neither")
        try:
            self._options = dataclasses.replace(options or Options(), **option_fields)
        except TypeError as e:
            raise InvalidArgument(f"Client: {e}; see okl.Options") from None
        if self._options.deadline <= 0:
            raise InvalidArgument(f"deadline must be positive, got {self._options.deadline}")
        self._address = address
        self._token = token
        reconnect_ms = max(int(self._options.max_reconnect_backoff * 1000), 1)
        channel_options = [
            ("grpc.max_receive_message_length", self._options.max_receive_message_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.max_reconnect_backoff_ms", reconnect_ms),
            ("grpc.initial_reconnect_backoff_ms", min(reconnect_ms, 100)),
        ]
        if tls or tls_ca is not None or tls_cert is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_pem(tls_ca, "tls_ca"),
                private_key=_read_pem(tls_key, "tls_key"),
                certificate_chain=_read_pem(tls_cert, "tls_cert"))
            self._channel = grpc.secure_channel(address, credentials, channel_options)
        else:
            self._channel = grpc.insecure_channel(address, channel_options)
        stub = pb_grpc.OnlineKernelLearningStub
        self._stub = stub(self._channel)  # type: ignore[no-untyped-call]
        # The hot calls take requests already serialized (okl._arrays writes them).
        self._observe = self._channel.unary_unary(
            _SERVICE + "Observe", response_deserializer=pb.ObserveResponse.FromString)
        self._observe_stream = self._channel.stream_unary(
            _SERVICE + "ObserveStream", response_deserializer=pb.ObserveResponse.FromString)
        self._predict = self._channel.unary_unary(
            _SERVICE + "Predict", response_deserializer=pb.PredictResponse.FromString)
        self._label = self._channel.unary_unary(
            _SERVICE + "Label", response_deserializer=pb.LabelResponse.FromString)
        self._health = self._channel.unary_unary(_HEALTH_CHECK)
        self._metadata_by_tenant: Dict[str, Metadata] = {}

    # --- The connection -------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The address the client connects to."""
        return self._address

    @property
    def options(self) -> Options:
        """The deadline, retry and size options of every call."""
        return self._options

    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel (e.g. for the generated stubs of okl.v1.okl_pb2_grpc)."""
        return self._channel

    def with_deadline(self, seconds: float) -> "Client":
        """A client whose calls have this deadline instead; it shares the channel."""
        if seconds <= 0:
            raise InvalidArgument(f"deadline must be positive, got {seconds}")
        other = object.__new__(Client)
        other.__dict__.update(self.__dict__)
        other._options = dataclasses.replace(self._options, deadline=seconds)
        return other

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"okl.Client({self._address!r})"

    def _metadata(self, tenant: str) -> Metadata:
        metadata = self._metadata_by_tenant.get(tenant)
        if metadata is None:
            metadata = call_metadata(tenant, self._token)
            if len(self._metadata_by_tenant) < 4096:
                self._metadata_by_tenant[tenant] = metadata
        return metadata

    def _call(self, method: Callable[..., T], request: Any, tenant: str, retry: Retry) -> T:
        metadata = self._metadata(tenant)
        return call(self._options, retry,
                    lambda timeout: method(request, timeout=timeout, metadata=metadata))

    # --- Models -----------------------------------------------------------------------------

    def model(self, tenant: str, model: str) -> "Model":
        """The model `model` of `tenant`, which exists on the server. No call is made: a
        model that does not exist raises okl.NotFound when first used."""
        return Model(self, tenant, model)

    def create_model(self, tenant: str, model: str, config: ConfigLike) -> "Model":
        """Creates a model: config is a dict, a protobuf text-format string or an
        okl.pb.ModelConfig (see okl.model_config). okl.AlreadyExists if the name is taken;
        okl.InvalidArgument for a bad name or a config the server cannot run, saying why.
        Not retried."""
        request = pb.CreateModelRequest(ref=pb.ModelRef(tenant=tenant, model=model),
                                        config=model_config(config))
        self._call(self._stub.CreateModel, request, tenant, Retry.NEVER)
        return Model(self, tenant, model)

    def list_models(self, tenant: Optional[str] = None) -> List[ModelInfo]:
        """The models of `tenant` (of every tenant the caller may see if None), ordered by
        (tenant, model), each with its config and statistics. Retried. Through a router
        that routes by tenant, name the tenant."""
        request = pb.ListModelsRequest(tenant=tenant or "")
        response = self._call(self._stub.ListModels, request, tenant or "", Retry.ON_UNAVAILABLE)
        return [ModelInfo.from_proto(info) for info in response.models]

    def restore(self, tenant: str, model: str, snapshot: Union[str, "os.PathLike[str]", bytes]
                ) -> "Model":
        """Installs a model from a snapshot (a file's path, or Model.snapshot_bytes()'s
        bytes) under tenant/model, replacing a model already there; it continues
        bit-identically. okl.DataLoss for bytes that are not an intact snapshot; on any
        error nothing changes. Not retried."""
        ref = pb.ModelRef(tenant=tenant, model=model)
        metadata = self._metadata(tenant)
        if isinstance(snapshot, bytes):
            pieces = (snapshot[offset:offset + _SNAPSHOT_CHUNK_BYTES]
                      for offset in range(0, max(len(snapshot), 1), _SNAPSHOT_CHUNK_BYTES))
            self._restore(ref, len(snapshot), pieces, metadata)
            return Model(self, tenant, model)
        try:
            f = open(snapshot, "rb")
        except OSError as e:
            raise InvalidArgument(f"cannot read the snapshot {snapshot}: {e.strerror}") \
                from None
        with f:
            # Streamed, not read whole: a snapshot may be as large as a model.
            size = os.fstat(f.fileno()).st_size
            self._restore(ref, size, iter(lambda: f.read(_SNAPSHOT_CHUNK_BYTES), b""), metadata)
        return Model(self, tenant, model)

    def _restore(self, ref: pb.ModelRef, size: int, pieces: Iterator[bytes],
                 metadata: Metadata) -> None:
        """Restore's call: the first chunk names the model and declares the size (so the
        server checks it against its limits first); every chunk is sent, so even empty
        bytes reach the server (and get its DATA_LOSS)."""
        def chunks() -> Iterator[pb.RestoreChunk]:
            first = True
            for piece in pieces:
                if first:
                    yield pb.RestoreChunk(ref=ref, data=piece, snapshot_bytes=size)
                    first = False
                else:
                    yield pb.RestoreChunk(data=piece)
            if first:
                yield pb.RestoreChunk(ref=ref, snapshot_bytes=size)

        def attempt(timeout: float) -> None:
            self._stub.Restore(chunks(), timeout=timeout, metadata=metadata)

        call(self._options, Retry.NEVER, attempt)

    def health(self, service: str = "") -> bool:
        """grpc.health.v1.Health/Check: whether `service` ("" for the server as a whole,
        "okl.v1.OnlineKernelLearning" for the service) is SERVING; False while the server
        starts or drains. okl.NotFound for a service it does not know. Retried."""
        encoded = service.encode("utf-8")
        request = (b"\x0a" + _arrays.varint(len(encoded)) + encoded) if encoded else b""
        response = self._call(self._health, request, "", Retry.ON_UNAVAILABLE)
        # HealthCheckResponse: field 1 (status), a varint; SERVING is 1.
        return bytes(response) == b"\x08\x01"

    def fence_tenant(self, tenant: str, fenced: bool = True, delete_models: bool = False
                     ) -> List[str]:
        """Admin (a token with the admin role; `okl move` uses it): with `fenced`, fences
        the tenant's writes on this server and waits for those running to finish; with
        `delete_models` too, then deletes its models here; without `fenced`, lifts the
        fence. Returns the tenant's models here. Not retried."""
        request = pb.FenceTenantRequest(tenant=tenant, fenced=fenced,
                                        delete_models=delete_models)
        response = self._call(self._stub.FenceTenant, request, tenant, Retry.NEVER)
        return list(response.models)


class Model:
    """One model on the server: observe, predict, remember and label, inspect, snapshot,
    delete.

    A cheap handle (a client and two names); get one from Client.create_model,
    Client.model or Client.restore. Inputs are 2-D: a numpy array of shape (n, dim) of
    any real dtype (converted to float64), anything np.asarray makes one of, or a
    scipy.sparse matrix; labels are 1-D. Thread-safe, as the Client is.
    """

    def __init__(self, client: Client, tenant: str, name: str) -> None:
        self._client = client
        self._tenant = tenant
        self._name = name
        self._ref_bytes = _arrays.ref_field(tenant, name)

    @property
    def client(self) -> Client:
        """The client this model's calls go through."""
        return self._client

    @property
    def tenant(self) -> str:
        """The tenant that owns the model."""
        return self._tenant

    @property
    def name(self) -> str:
        """The model's name within its tenant."""
        return self._name

    @property
    def ref(self) -> pb.ModelRef:
        """The model's okl.pb.ModelRef."""
        return pb.ModelRef(tenant=self._tenant, model=self._name)

    def __repr__(self) -> str:
        return f"okl.Model({self._tenant!r}, {self._name!r}, address={self._client.address!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Model) and other._client is self._client
                and (other._tenant, other._name) == (self._tenant, self._name))

    def __hash__(self) -> int:
        return hash((id(self._client), self._tenant, self._name))

    # --- Reading ------------------------------------------------------------------------

    def info(self) -> ModelInfo:
        """The model's config and live statistics. okl.NotFound if absent. Retried."""
        return ModelInfo.from_proto(
            self._client._call(self._client._stub.GetModel, self.ref, self._tenant,
                               Retry.ON_UNAVAILABLE))

    def stats(self) -> ModelStats:
        """The model's live statistics (steps, stored terms, losses, regret, ...)."""
        return self.info().stats

    def config(self) -> pb.ModelConfig:
        """The model's config as the server holds it."""
        return self.info().config

    # --- Learning and predicting ----------------------------------------------------------

    def observe(self, X: Any, y: Any) -> ObserveResult:
        """Learns from the examples (X, y) in order, one step each, and returns each
        example's prediction made before learning it (prequential) and its loss.

        X: shape (n, dim), y: n labels (for hinge and logistic, -1 or +1). Up to
        Options.max_batch examples (and max_request_bytes) go as one request, validated
        whole: if the server rejects it, nothing is applied. More go as one
        ObserveStream of messages validated one by one: if one is rejected, the messages
        before it stay applied and the error's note says which examples were on the
        failed stream. Writes are retried only when the server says nothing was applied
        (a tenant being moved), so no example is applied twice. Predictions a refused
        stream acknowledged without are NaN."""
        x = _arrays.matrix(X)
        labels = _arrays.labels(y, x.shape[0])
        if x.shape[0] == 0:
            raise InvalidArgument("X has no rows: nothing to observe")
        return self._observe_rows(x, labels, _arrays.encode(x, labels))

    def observe_classes(self, X: Any, classes: Any) -> ObserveResult:
        """observe() for a multi-class model (loss multiclass_hinge or softmax): each row
        of X is of the class named in `classes` (one per row: a str of 1 to 128 bytes of
        UTF-8, or a value named by str(value), so 3 is "3"). A class joins the model when
        first seen; a request whose new classes would pass the config's max_classes is
        refused whole (okl.FailedPrecondition). The result's predicted_classes holds each
        example's prequential predicted class."""
        x = _arrays.matrix(X)
        labels = _arrays.class_labels(classes, x.shape[0])
        if x.shape[0] == 0:
            raise InvalidArgument("X has no rows: nothing to observe")
        zeros = np.zeros(x.shape[0])
        return self._observe_rows(x, zeros, _arrays.with_class_labels(_arrays.encode(x, zeros),
                                                                      labels))

    def _observe_rows(self, x: Any, labels: FloatArray, rows: _arrays.Rows) -> ObserveResult:
        options = self._client.options
        if rows.count > options.max_batch or len(rows.blob) > options.max_request_bytes:
            # The server checks each message of a stream, not the stream: a bad value
            # found here leaves nothing applied.
            _arrays.check_finite(x, labels)
            return self._observe_streamed(rows)
        response = self._client._call(self._client._observe, self._ref_bytes + rows.blob,
                                      self._tenant, Retry.WHEN_NOT_APPLIED)
        predictions = np.array(response.predictions, dtype=np.float64)
        losses = np.array(response.losses, dtype=np.float64)
        if predictions.shape[0] != rows.count or losses.shape[0] != rows.count:
            raise Internal(f"Observe: the server answered {predictions.shape[0]} "
                           f"predictions and {losses.shape[0]} losses for {rows.count} "
                           "examples")
        return ObserveResult(predictions=predictions, losses=losses, steps=response.steps,
                             expansion_size=response.expansion_size,
                             predicted_classes=list(response.predicted_classes))

    def _observe_streamed(self, rows: _arrays.Rows) -> ObserveResult:
        options = self._client.options
        batch = _arrays.rows_per_request(rows, min(options.max_batch, _STREAM_BATCH),
                                         _STREAM_MESSAGE_BYTES)
        predictions = np.full(rows.count, np.nan)
        losses = np.full(rows.count, np.nan)
        predicted_classes: List[str] = []
        last: List[AckedBatch] = []

        def on_ack(ack: AckedBatch) -> None:
            answered = ack.predictions.shape[0]
            predictions[ack.first:ack.first + answered] = ack.predictions
            losses[ack.first:ack.first + answered] = ack.losses
            if ack.predicted_classes:
                predicted_classes[len(predicted_classes):] = (
                    [""] * (ack.first - len(predicted_classes)) + ack.predicted_classes)
            if answered:
                last[:] = [ack]

        stream = ObserveStream(self, dim=None, steps_at_open=None, batch_size=batch,
                               batches_per_stream=max(1, _PREDICTIONS_PER_STREAM // batch),
                               on_ack=on_ack)
        stream._add_rows(rows)
        stream.close()
        steps, size = (last[0].steps, last[0].expansion_size) if last else (0, 0)
        if not last:
            stats = self.stats()
            steps, size = stats.steps, stats.expansion_size
        return ObserveResult(predictions=predictions, losses=losses, steps=steps,
                             expansion_size=size, predicted_classes=predicted_classes)

    def stream(self, batch_size: int = 256, batches_per_stream: int = 64,
               on_ack: Optional[Callable[[AckedBatch], Any]] = None) -> ObserveStream:
        """An ObserveStream into this model (see ObserveStream): batch_size examples a
        message, batches_per_stream messages a stream (each stream's answer holds 16
        bytes per example, which must fit the client's max_receive_message_bytes), on_ack
        called with each acknowledged stream's AckedBatch. Reads the model first (its dim
        and steps), so okl.NotFound if it does not exist."""
        info = self.info()
        return ObserveStream(self, dim=info.config.dim, steps_at_open=info.stats.steps,
                             batch_size=batch_size, batches_per_stream=batches_per_stream,
                             on_ack=on_ack)

    def predict(self, X: Any) -> FloatArray:
        """The model's predictions for the rows of X (shape (n, dim)): a 1-D float64 array
        of n. Retried. More than Options.max_batch inputs go in several requests."""
        responses, count = self._predict(X)
        if len(responses) == 1:
            predictions = np.array(responses[0].predictions, dtype=np.float64)
        else:
            predictions = np.array([p for r in responses for p in r.predictions],
                                   dtype=np.float64)
        if predictions.shape[0] != count:
            raise Internal(f"Predict: the server answered {predictions.shape[0]} predictions "
                           f"for {count} inputs")
        return predictions

    def predict_details(self, X: Any) -> Prediction:
        """predict(), with the novelty flags of a novelty model and the predictive variances
        of a KRLS tracker (each empty for the other kinds)."""
        responses, count = self._predict(X)
        predictions = _joined(responses, "predictions", np.float64, count)
        if predictions.shape[0] != count:
            raise Internal(f"Predict: the server's answer does not hold one prediction for "
                           f"each of the {count} inputs")
        predicted_classes = [c for r in responses for c in r.predicted_classes]
        if predicted_classes and len(predicted_classes) != count:
            raise Internal(f"Predict: the server answered {len(predicted_classes)} classes for "
                           f"{count} inputs")
        return Prediction(predictions=predictions,
                          novel=_joined(responses, "novel", bool, count),
                          variances=_joined(responses, "variances", np.float64, count),
                          predicted_classes=predicted_classes,
                          class_scores=_class_rows(responses, "class_scores"),
                          probabilities=_class_rows(responses, "probabilities"))

    def _predict(self, X: Any) -> Tuple[List[Any], int]:
        """The PredictResponses for the rows of X, and how many rows there are."""
        rows = _arrays.inputs(X)
        client = self._client
        if rows.count <= client.options.max_batch and \
                len(rows.blob) <= client.options.max_request_bytes:
            if rows.count == 0:
                return [], 0
            return [client._call(client._predict, self._ref_bytes + rows.blob, self._tenant,
                                 Retry.ON_UNAVAILABLE)], rows.count
        per_request = _arrays.rows_per_request(rows, client.options.max_batch,
                                               client.options.max_request_bytes)
        return [client._call(client._predict,
                             self._ref_bytes + rows.slice(first, min(first + per_request,
                                                                     rows.count)),
                             self._tenant, Retry.ON_UNAVAILABLE)
                for first in range(0, rows.count, per_request)], rows.count

    # --- Delayed feedback: predict now, label later ----------------------------------------

    def remember(self, X: Any, *, event_ids: Optional[Sequence[str]] = None,
                 wait_seconds: Optional[float] = None,
                 default_label: Optional[float] = None) -> Remembered:
        """Predicts the rows of X, as predict() does, and has the server remember each
        input and the prediction served for it under an event id, until label() brings
        its label (docs/delayed-feedback.md). Needs a token with the write role.

        Args:
          X: shape (n, dim), as predict() takes.
          event_ids: one id per row, chosen by the caller: 1 to 128 characters of
            [A-Za-z0-9._:-], new to the model (okl.AlreadyExists otherwise, and nothing
            of that request is remembered). None: the server makes them (33 to 48
            hexadecimal digits).
          wait_seconds: how long a label is awaited; None or 0: the server's default
            (10 minutes), at most its --max_label_wait (7 days unless set).
          default_label: learned (as an Observe) for an event whose wait ends without a
            label; None: such an event is dropped. Checked against the model's loss now.

        Returns an okl.Remembered: the predictions (float64, one per row) and the event
        ids, one per row, in order, as the server stored them. The events are durable
        when it returns.

        Up to Options.max_batch rows (and max_request_bytes) go as one Predict, remembered
        all or nothing. More go as several, in order: if one fails, the rows of the
        requests before it stay remembered, and the raised error's `remembered` holds
        their predictions and ids.

        Retries: a remembering Predict is a write, and a repeat would remember its inputs
        a second time (server-made ids) or fail with okl.AlreadyExists without the
        predictions (the caller's ids), so it is sent again only when it cannot have
        reached the model: the server refused it saying it applied nothing (starting,
        draining; the trailer okl-batches-applied: 0), or a proxy never passed it on
        (GOAWAY). Any other failure (a connection lost mid-call, a deadline) raises, and
        its events may or may not have been remembered: unlabelled, they expire.
        """
        rows = _arrays.inputs(X)
        ids: Optional[List[bytes]] = None
        if event_ids is not None:
            ids = _arrays.event_ids(event_ids)
            if len(ids) != rows.count:
                raise InvalidArgument(
                    f"X has {rows.count} rows but event_ids has {len(ids)} ids: pass one "
                    "event id per row, or none and the server makes them")
        wait = 0.0 if wait_seconds is None else _arrays.number(wait_seconds, "wait_seconds")
        default = None if default_label is None else _arrays.number(default_label,
                                                                    "default_label")
        if rows.count == 0:
            return Remembered(predictions=np.empty(0, dtype=np.float64), event_ids=[])
        client = self._client
        options = client.options
        id_bytes = sum(len(i) + 2 for i in ids) if ids else 0
        if rows.count <= options.max_batch and \
                len(rows.blob) + id_bytes <= options.max_request_bytes:
            per_request = rows.count
        else:
            per_request = _arrays.rows_per_request(rows, options.max_batch,
                                                   options.max_request_bytes, id_bytes)
        predictions: List[FloatArray] = []
        remembered: List[str] = []
        for first in range(0, rows.count, per_request):
            end = min(first + per_request, rows.count)
            request = (self._ref_bytes + rows.slice(first, end)
                       + _arrays.remember_field(ids[first:end] if ids else None, wait, default))
            try:
                response = client._call(client._predict, request, self._tenant,
                                        Retry.WHEN_NOT_APPLIED)
            except Error as error:
                if first == 0:
                    raise
                raise _remembered_before(error, first, rows.count, predictions,
                                         remembered) from None
            count = end - first
            if len(response.predictions) != count or len(response.event_ids) != count:
                raise Internal(f"Predict with remember: the server answered "
                               f"{len(response.predictions)} predictions and "
                               f"{len(response.event_ids)} event ids for {count} inputs")
            predictions.append(np.array(response.predictions, dtype=np.float64))
            remembered.extend(response.event_ids)
        return Remembered(predictions=predictions[0] if len(predictions) == 1
                          else np.concatenate(predictions), event_ids=remembered)

    def label(self, event_ids: Sequence[str], y: Any) -> LabelResult:
        """Labels events remembered by remember(): event_ids[i] gets label y[i]. Each
        label applied is exactly an Observe of the event's remembered input with y[i], at
        this moment; the applied labels of one request are one Observe batch, in order.
        Needs a token with the write role.

        Returns an okl.LabelResult: per label, in order, its okl.LabelOutcome: APPLIED,
        DUPLICATE (the event was labelled before, or earlier in this call: the first label
        wins) or UNKNOWN (no such event for this model, or its wait ended); per APPLIED
        label, its prequential prediction and loss, as observe() returns them; and the
        model's steps after the call.

        okl.InvalidArgument for a malformed event id (empty, over 128 bytes, or a character
        outside [A-Za-z0-9._:-]), or a y that is not finite or that the model's loss
        refuses (for hinge and logistic, -1 or +1): then nothing of that request is
        applied. Up to Options.max_batch labels (and max_request_bytes) go as one request;
        more go as several, in order (the ids and the labels' values are then checked here
        first).

        Retried on UNAVAILABLE, as the read-only calls are (up to max_attempts): since the
        first label of an event wins, a label sent again is applied once, so a retry,
        or calling label() again after any failure, is safe. A label that an attempt lost
        on the way back applied then comes back DUPLICATE.
        """
        ids = _arrays.event_ids(event_ids)
        values = _arrays.labels(y, len(ids), rows="event_ids has {} ids", per="event id")
        if not ids:
            raise InvalidArgument("event_ids is empty: nothing to label")
        rows = _arrays.label_rows(ids, values)
        client = self._client
        options = client.options
        if rows.count <= options.max_batch and len(rows.blob) <= options.max_request_bytes:
            per_request = rows.count
        else:
            # Each request is validated on its own: a bad label found here leaves nothing
            # applied.
            _arrays.check_event_ids(ids)
            _arrays.check_finite(values, name="y")
            per_request = _arrays.rows_per_request(rows, options.max_batch,
                                                   options.max_request_bytes)
        outcomes: List[LabelOutcome] = []
        predictions: List[FloatArray] = []
        losses: List[FloatArray] = []
        steps = 0
        for first in range(0, rows.count, per_request):
            end = min(first + per_request, rows.count)
            try:
                response = client._call(client._label, self._ref_bytes + rows.slice(first, end),
                                        self._tenant, Retry.ON_UNAVAILABLE)
            except Error as error:
                if first == 0:
                    raise
                raise type(error)(
                    error.details, code=error.code, trailers=error.trailers,
                    note=f" (labels 0 to {first - 1} of {rows.count} were answered by the "
                         "requests before the failing one; calling label() again is safe: "
                         "those applied come back DUPLICATE)") from None
            count = end - first
            try:
                answered = [_OUTCOMES[o] for o in response.outcomes]
            except KeyError as e:
                raise Internal(f"Label: the server answered the outcome {e.args[0]}, which "
                               "this client does not know") from None
            applied = sum(1 for o in answered if o is LabelOutcome.APPLIED)
            if (len(answered) != count or len(response.predictions) != applied
                    or len(response.losses) != applied):
                raise Internal(f"Label: the server answered {len(answered)} outcomes "
                               f"({applied} applied), {len(response.predictions)} predictions "
                               f"and {len(response.losses)} losses for {count} labels")
            outcomes.extend(answered)
            predictions.append(np.array(response.predictions, dtype=np.float64))
            losses.append(np.array(response.losses, dtype=np.float64))
            steps = response.steps
        return LabelResult(outcomes=outcomes, predictions=np.concatenate(predictions),
                           losses=np.concatenate(losses), steps=steps)

    # --- Snapshots and deletion -----------------------------------------------------------

    def snapshot_bytes(self) -> bytes:
        """The model's whole state (one serialized okl.v1.ModelSnapshot with its checksum),
        for Client.restore. Retried (from the start)."""
        parts: List[bytes] = []
        self._read_snapshot(parts.clear, parts.append)
        return b"".join(parts)

    def snapshot(self, path: Union[str, "os.PathLike[str]"]) -> int:
        """Streams the model's snapshot into the file `path`: written beside it, synced,
        then renamed over it, so `path` holds its old contents or the whole snapshot.
        Retried (from the start). Returns the bytes written."""
        directory = os.path.dirname(os.path.abspath(path))
        fd, temporary = tempfile.mkstemp(prefix=".okl-snapshot.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                def restart() -> None:
                    f.seek(0)
                    f.truncate()

                self._read_snapshot(restart, f.write)
                f.flush()
                os.fsync(f.fileno())
                size = f.tell()
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        return size

    def _read_snapshot(self, restart: Callable[[], Any], sink: Callable[[bytes], Any]
                       ) -> None:
        """Snapshot's chunks into sink(data), restart() before every attempt."""
        metadata = self._client._metadata(self._tenant)
        ref = self.ref

        def attempt(timeout: float) -> None:
            restart()
            for chunk in self._client._stub.Snapshot(ref, timeout=timeout, metadata=metadata):
                sink(chunk.data)

        call(self._client.options, Retry.ON_UNAVAILABLE, attempt)

    def delete(self) -> None:
        """Deletes the model and its stored state. okl.NotFound if absent. Not retried."""
        self._client._call(self._client._stub.DeleteModel, self.ref, self._tenant, Retry.NEVER)


def _remembered_before(error: Error, first: int, count: int, predictions: List[FloatArray],
                       ids: List[str]) -> Error:
    """The error of a remember() whose request from row `first` failed, the rows before
    it remembered: the same class and message, a note, and those rows' Remembered."""
    failed = type(error)(
        error.details, code=error.code, trailers=error.trailers,
        note=f" (rows 0 to {first - 1} of {count} were remembered by the requests before "
             "the failing one: the error's `remembered` holds their predictions and event "
             "ids)")
    failed.remembered = Remembered(predictions=np.concatenate(predictions), event_ids=ids)
    return failed


def _class_rows(responses: Sequence[Any], field: str) -> FloatArray:
    """A multi-class Predict's rows of class values (class_scores or probabilities) as one
    (n, K) array, K the longest row's length: a row predicted before a class joined has 0
    for it. Shape (0, 0) when the responses have none."""
    rows = [row.values for r in responses for row in getattr(r, field)]
    if not rows:
        return np.empty((0, 0))
    out = np.zeros((len(rows), max(len(row) for row in rows)))
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def _joined(responses: Sequence[Any], field: str, dtype: Any, count: int) -> "npt.NDArray[Any]":
    """A repeated field of Predict's responses, one array; empty unless every response
    has one entry per input."""
    parts: List[Tuple[Any, ...]] = [tuple(getattr(r, field)) for r in responses]
    values = np.array([v for part in parts for v in part], dtype=dtype)
    return values if values.shape[0] == count else np.empty(0, dtype=dtype)
