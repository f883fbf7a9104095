"""The rules every call follows, as okl's C++ client (client/client.cc) has them: a
deadline that covers the call's retries, which calls are retried on UNAVAILABLE, the
backoff between attempts, and what a refused write's trailers say was applied."""

from __future__ import annotations

import enum
import random
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple, TypeVar

import grpc

from okl._errors import from_rpc_error, trailing_metadata

T = TypeVar("T")

Metadata = Tuple[Tuple[str, str], ...]

TENANT_METADATA_KEY = "x-okl-tenant"
"""The metadata key that carries a call's tenant, for routers that route by tenant."""

BATCHES_APPLIED_METADATA_KEY = "okl-batches-applied"
"""The trailer okl_server sets when it refuses a write with UNAVAILABLE: how many of the
call's messages it applied (none of the later ones)."""


@dataclass(frozen=True)
class Options:
    """How a Client calls: okl::ClientOptions' fields, in seconds.

    deadline: of every call, counted from its start; it bounds the call's retries and
      backoff too. For an ObserveStream, the deadline of each of its streams.
    max_attempts, initial_backoff, backoff_multiplier, max_backoff: the read-only calls
      (get, list, predict, snapshot, health) and label (safe to repeat: the first label
      of an event wins) are retried on UNAVAILABLE up to max_attempts attempts in all,
      sleeping initial_backoff before the second, then multiplied by backoff_multiplier
      each time up to max_backoff, each sleep jittered by +-20%; a sleep that would end
      past the deadline is not taken. Writes (observe, streams and remember) are
      retried, until the deadline, only when the server said it applied nothing.
    max_batch: examples per Observe request, inputs per Predict request and labels per
      Label request (okl_server's --max_batch); larger arrays go in several.
    max_request_bytes: about the most bytes one request carries; larger ones are split.
    max_receive_message_bytes, max_reconnect_backoff: the channel's (see client.h).
    """

    deadline: float = 30.0
    max_attempts: int = 3
    initial_backoff: float = 0.05
    backoff_multiplier: float = 2.0
    max_backoff: float = 1.0
    max_batch: int = 10000
    max_request_bytes: int = 32 << 20
    max_receive_message_bytes: int = 64 << 20
    max_reconnect_backoff: float = 1.0


class Retry(enum.Enum):
    """Which failures of a call are tried again."""

    NEVER = 0
    ON_UNAVAILABLE = 1       # read-only calls and Label: up to Options.max_attempts in all
    WHEN_NOT_APPLIED = 2     # writes: an UNAVAILABLE that applied nothing, until the deadline


def jittered(seconds: float) -> float:
    """seconds give or take 20%, so that clients refused together do not retry together."""
    return seconds * random.uniform(0.8, 1.2)


def batches_applied(error: grpc.RpcError) -> int:
    """How many of a failed call's messages were applied, when that is known: the number
    okl_server's trailers give when it refused the call, or 0 for a call the peer never
    processed (gRPC fails exactly the streams above a GOAWAY's last stream id with
    "GOAWAY received", and HTTP/2 promises the sender did not process those: a proxy's
    GOAWAY, e.g. nginx reloading after a tenant move). -1 otherwise: anything may have
    been applied."""
    if error.code() == grpc.StatusCode.UNAVAILABLE and error.details() == "GOAWAY received":
        return 0
    value = trailing_metadata(error).get(BATCHES_APPLIED_METADATA_KEY)
    if value is None or not value.isdigit():
        return -1
    return int(value)


def call_metadata(tenant: str, token: Optional[str]) -> Metadata:
    """The tenant for routing (if gRPC can carry it: printable ASCII) and the bearer token."""
    metadata: Sequence[Tuple[str, str]] = ()
    if tenant and tenant.isascii() and tenant.isprintable():
        metadata = ((TENANT_METADATA_KEY, tenant),)
    if token:
        metadata = tuple(metadata) + (("authorization", "Bearer " + token),)
    return tuple(metadata)


def call(options: Options, retry: Retry, attempt: Callable[[float], T]) -> T:
    """attempt(timeout) until it succeeds or `retry` gives up, all under one deadline;
    raises the okl.Error of the last failure."""
    deadline = time.monotonic() + options.deadline
    max_attempts = (max(options.max_attempts, 1) if retry is Retry.ON_UNAVAILABLE
                    else 1 if retry is Retry.NEVER else 1 << 62)
    backoff = options.initial_backoff
    attempts = 0
    while True:
        attempts += 1
        started = time.monotonic()
        try:
            return attempt(max(deadline - started, 0.0))
        except grpc.RpcError as error:
            if (error.code() != grpc.StatusCode.UNAVAILABLE or attempts >= max_attempts
                    or (retry is Retry.WHEN_NOT_APPLIED and batches_applied(error) != 0)):
                raise from_rpc_error(error) from None
            sleep = jittered(min(backoff, options.max_backoff))
            # An attempt left less time than this one took would most likely end in
            # DEADLINE_EXCEEDED, which says less than the refusal: that is the answer.
            if time.monotonic() + sleep + (time.monotonic() - started) >= deadline:
                raise from_rpc_error(error) from None
            time.sleep(sleep)
            backoff *= options.backoff_multiplier
