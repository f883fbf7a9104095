"""ObserveStream: examples streamed into one model, with okl::ObserveWriter's rules
(client/client.h, client/observe_writer.cc), which this mirrors step for step."""

from __future__ import annotations

import queue
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple, Type

import grpc
import numpy as np

from okl import _arrays
from okl._calls import batches_applied, jittered
from okl._errors import (Error, FailedPrecondition, Internal, InvalidArgument, error_class,
                         from_rpc_error)
from okl._types import AckedBatch

if TYPE_CHECKING:
    from okl._client import Model

_EMPTY = np.empty(0, dtype=np.float64)


class ObserveStream:
    """Streams labelled examples into one model at a high rate.

    observe() and add() buffer examples; every batch_size of them go out as one
    ObserveStream message, which the server applies on arrival; after batches_per_stream
    messages (and on flush() and close()) the stream is closed, and the server's answer
    acknowledges every example on it: they are applied and durable, and on_ack receives
    an AckedBatch with their prequential predictions and losses. `acknowledged` counts the
    examples acknowledged. A stream open for half of the client's deadline is closed
    before the next batch goes out on a new one.

    Refusals: when the server refuses a message with UNAVAILABLE and says it applied
    nothing of it or after it (its trailer okl-batches-applied: a tenant being moved, a
    server starting or draining), or the stream fails with "GOAWAY received" (a proxy
    that never passed it on), or the answer covers fewer messages than were written, the
    messages before are acknowledged and the rest are sent again on a new stream, with
    the client's backoff, for up to its deadline: the model holds each example once and
    in order, and the caller sees no error.

    Failure: any other error ends the stream for good: that call and every later one
    raise the okl.Error (the server's code and message, and a note saying which examples
    the failed stream carried). Some of those may have been applied; if this was the
    model's only writer, applied_since_open() is the index to resume from.

    Use it as a context manager (close() on exit) or call close(). Not thread-safe.

    Example:
        with model.stream(batch_size=256) as stream:
            stream.observe(X, y)          # any number of rows, any number of calls
        print(stream.acknowledged)
    """

    def __init__(self, model: "Model", dim: Optional[int], steps_at_open: Optional[int],
                 batch_size: int = 256, batches_per_stream: int = 64,
                 on_ack: Optional[Callable[[AckedBatch], Any]] = None) -> None:
        """Use Model.stream(), which reads the model's dim and steps first."""
        if batch_size < 1 or batches_per_stream < 1:
            raise InvalidArgument(f"batch_size ({batch_size}) and batches_per_stream "
                                  f"({batches_per_stream}) must be at least 1")
        self._model = model
        self._client = model.client
        self._dim = dim
        self._steps_at_open = steps_at_open
        self._batch_size = batch_size
        self._batches_per_stream = batches_per_stream
        self._on_ack = on_ack
        self._ref = _arrays.ref_field(model.tenant, model.name)
        self._metadata = self._client._metadata(model.tenant)
        # The pending examples: the next message's parts.
        self._pending: List[bytes] = []
        self._pending_count = 0
        # The open stream (future None when none): its request queue, fed to gRPC.
        self._future: Optional[Any] = None
        self._queue: "Optional[queue.SimpleQueue[Optional[bytes]]]" = None
        self._opened = 0.0
        self._first = 0   # the index of the stream's first example
        self._count = 0   # examples written to the stream
        # Messages written to the stream, kept (bytes, examples) until acknowledged so
        # that those a server refused can be sent again.
        self._unacknowledged: List[Tuple[bytes, int]] = []
        # Since when streams have been refused in a row (None: none is), and the backoff.
        self._refused_since: Optional[float] = None
        self._backoff = 0.0
        self._added = 0
        self._sent = 0
        self._acknowledged = 0
        self._streams_refused = 0
        self._closed = False
        self._error: Optional[Error] = None

    # --- Adding examples ----------------------------------------------------------------

    def observe(self, X: Any, y: Any) -> None:
        """Adds the examples (X, y): X of shape (n, dim) (a numpy array, anything
        np.asarray takes, or a scipy.sparse matrix), y of n labels. Checked whole before
        any is added (InvalidArgument)."""
        self._check_open()
        x = _arrays.matrix(X)
        labels = _arrays.labels(y, x.shape[0])
        if self._dim is not None and x.shape[1] != self._dim:
            raise InvalidArgument(f"X has {x.shape[1]} columns but the model's dim is "
                                  f"{self._dim}")
        # The server checks each message, not the stream: a bad value found here leaves
        # nothing applied.
        _arrays.check_finite(x, labels)
        self._add_rows(_arrays.encode(x, labels))

    def add(self, x: Any, y: float) -> None:
        """Adds one example: x of the model's dim values (1-D), y its label."""
        row = np.asarray(x)
        if row.ndim != 1:
            raise InvalidArgument(f"x must be one example, a 1-D array; got shape {row.shape} "
                                  "(use observe() for several)")
        self.observe(row.reshape(1, -1), np.asarray([y]))

    def flush(self) -> None:
        """Sends the buffered examples and closes the stream, so that every example added
        so far is acknowledged (or the stream failed: raises its error)."""
        self._check_open()
        self._send_batch()
        self._finish_stream()

    def close(self) -> None:
        """flush(), then no more examples. Raises the stream's failure, if any; calling it
        again raises the same."""
        if not self._closed:
            try:
                if self._error is None:
                    self.flush()
            except Error:
                pass  # kept in self._error
            finally:
                self._closed = True
        if self._error is not None:
            raise self._error

    def __enter__(self) -> "ObserveStream":
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if kind is None:
            self.close()
            return
        try:  # the with block's own exception is the one to see
            self.close()
        except Error:
            pass

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # noqa: BLE001 (nothing can be reported from here)
                pass

    # --- State ----------------------------------------------------------------------------

    @property
    def dim(self) -> Optional[int]:
        """The model's dimension when the stream opened (None if it was not read)."""
        return self._dim

    @property
    def added(self) -> int:
        """Examples added."""
        return self._added

    @property
    def acknowledged(self) -> int:
        """Examples acknowledged: applied and durable, and reported to on_ack."""
        return self._acknowledged

    @property
    def streams_refused(self) -> int:
        """Streams the server refused with nothing applied, whose rest were sent again."""
        return self._streams_refused

    @property
    def steps_at_open(self) -> Optional[int]:
        """The model's steps when the stream opened (None if they were not read)."""
        return self._steps_at_open

    @property
    def error(self) -> Optional[Error]:
        """None, or the failure the stream stopped at."""
        return self._error

    def applied_since_open(self) -> int:
        """The model's steps now minus steps_at_open: if this stream is the model's only
        writer, how many of its examples were applied; after a failure, the index to
        resume from (count once the server is done with the failed stream: at once if the
        server ended it, else after a moment). FailedPrecondition if the model has fewer
        steps than at open (it was replaced)."""
        if self._steps_at_open is None:
            raise FailedPrecondition("the stream did not read the model's steps when it "
                                     "opened: open it with Model.stream()")
        steps = self._model.stats().steps
        if steps < self._steps_at_open:
            raise FailedPrecondition(f"the model has {steps} steps, fewer than the "
                                     f"{self._steps_at_open} it had when the stream opened: "
                                     "it was replaced")
        return steps - self._steps_at_open

    # --- The streams ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise FailedPrecondition("ObserveStream used after close()")

    def _add_rows(self, rows: _arrays.Rows) -> None:
        done = 0
        while done < rows.count:
            take = min(self._batch_size - self._pending_count, rows.count - done)
            self._pending.append(rows.slice(done, done + take))
            self._pending_count += take
            self._added += take
            done += take
            if self._pending_count >= self._batch_size:
                self._send_batch()

    def _send_batch(self) -> None:
        count = self._pending_count
        if count == 0:
            return
        if (self._future is not None
                and time.monotonic() - self._opened > self._client.options.deadline / 2):
            self._finish_stream()
        if self._future is None:
            self._open_stream()
            self._first = self._sent
        message = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending = []
        self._pending_count = 0
        self._unacknowledged.append((message, count))
        written = self._write(len(self._unacknowledged) - 1)
        self._sent += count
        self._count += count
        # A write that found the stream over ends it; _finish_stream says why.
        if not written or len(self._unacknowledged) >= self._batches_per_stream:
            self._finish_stream()

    def _open_stream(self) -> None:
        self._queue = queue.SimpleQueue()
        self._opened = time.monotonic()
        self._future = self._client._observe_stream.future(
            iter(self._queue.get, None), timeout=self._client.options.deadline,
            metadata=self._metadata)

    def _write(self, index: int) -> bool:
        """Writes unacknowledged message `index` (the first names the model); False if the
        stream is over."""
        assert self._future is not None and self._queue is not None
        if self._future.done():
            return False
        message = self._unacknowledged[index][0]
        self._queue.put(self._ref + message if index == 0 else message)
        return True

    def _end_stream(self) -> Tuple[Optional[Any], Optional[grpc.RpcError]]:
        """Half-closes the open stream and waits for its answer or its failure."""
        assert self._future is not None and self._queue is not None
        self._queue.put(None)
        future, self._future, self._queue = self._future, None, None
        try:
            return future.result(), None
        except grpc.RpcError as error:
            return None, error

    def _finish_stream(self) -> None:
        while self._future is not None:
            response, error = self._end_stream()
            if error is None:
                # The server answers for the messages it applied. Fewer than were written
                # means the stream was cut short on its way: the rest were not applied,
                # and go again like a refused stream's.
                self._acknowledge_answered(response)
                if not self._unacknowledged:
                    self._refused_since = None
                    return
                code, details = grpc.StatusCode.UNAVAILABLE, \
                    "the server answered for part of the stream only"
            else:
                refused_at = batches_applied(error)
                if (error.code() != grpc.StatusCode.UNAVAILABLE or refused_at < 0
                        or refused_at > len(self._unacknowledged)):
                    raise self._fail(from_rpc_error(error, note=(
                        f" [ObserveStream: the failed stream carried examples {self._first} "
                        f"to {self._first + self._count - 1}, of which any prefix may be "
                        f"applied; {self._acknowledged} are acknowledged; "
                        "applied_since_open() tells]")))
                # Refused at message `refused_at` with none after it applied (or never
                # passed on): acknowledge the ones before, send the rest on a new stream.
                self._acknowledge_refused_prefix(refused_at)
                if not self._unacknowledged:
                    return
                code, details = error.code(), error.details() or ""
            self._streams_refused += 1
            now = time.monotonic()
            options = self._client.options
            if self._refused_since is None:
                self._refused_since = now
                self._backoff = options.initial_backoff
            sleep = jittered(min(self._backoff, options.max_backoff))
            if now + sleep > self._refused_since + options.deadline:
                raise self._fail(error_class(code)(details, code=code, note=(
                    f" [ObserveStream: examples {self._first} to "
                    f"{self._first + self._count - 1} were refused, and not applied, for "
                    f"longer than the deadline; {self._acknowledged} are acknowledged]")))
            time.sleep(sleep)
            self._backoff *= options.backoff_multiplier
            self._open_stream()
            for index in range(len(self._unacknowledged)):
                if not self._write(index):
                    break  # over already: the answer says why

    def _acknowledge_answered(self, response: Any) -> None:
        omitted = response.predictions_omitted
        answered = len(response.predictions) + omitted
        # The messages the answer covers: a prefix of those written.
        messages = 0
        count = 0
        while messages < len(self._unacknowledged) and count < answered:
            count += self._unacknowledged[messages][1]
            messages += 1
        if count != answered or len(response.losses) + omitted != answered:
            raise self._fail(Internal(
                f"ObserveStream: the server acknowledged {len(response.predictions)} "
                f"predictions and {len(response.losses)} losses ({omitted} omitted) for a "
                f"stream of {self._count} examples in {len(self._unacknowledged)} messages"))
        first = self._first
        del self._unacknowledged[:messages]
        self._acknowledged += count
        self._first += count
        self._count -= count
        if self._on_ack is not None and count > 0:
            self._on_ack(AckedBatch(
                first=first, count=count,
                predictions=np.array(response.predictions, dtype=np.float64),
                losses=np.array(response.losses, dtype=np.float64),
                steps=response.steps, expansion_size=response.expansion_size,
                predicted_classes=list(response.predicted_classes)))

    def _acknowledge_refused_prefix(self, messages: int) -> None:
        count = sum(examples for _, examples in self._unacknowledged[:messages])
        del self._unacknowledged[:messages]
        if count == 0:
            return
        first = self._first
        self._acknowledged += count
        self._first += count
        self._count -= count
        if self._on_ack is not None:  # a refused stream carries no predictions for them
            self._on_ack(AckedBatch(first=first, count=count, predictions=_EMPTY,
                                    losses=_EMPTY, steps=0, expansion_size=0))

    def _fail(self, error: Error) -> Error:
        """Records `error` as the stream's failure, ending an open stream; returns it."""
        self._error = error
        if self._future is not None:  # end it, applying no more
            self._future.cancel()
            assert self._queue is not None
            self._queue.put(None)
            self._future = None
            self._queue = None
        self._pending = []
        self._pending_count = 0
        return error
