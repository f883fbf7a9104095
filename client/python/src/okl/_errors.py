"""okl.Error and one subclass per gRPC status code.

Every failure the package reports is an okl.Error: the server's (its code and message,
unchanged) and the client's own checks (an input of the wrong shape is InvalidArgument
before anything is sent). InvalidArgument is also a ValueError, as scikit-learn's and
numpy's callers expect of a bad input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Mapping, Optional, Type

import grpc

if TYPE_CHECKING:  # pragma: no cover
    from okl._types import Remembered

__all__ = [
    "Error", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
    "Unauthenticated",
]


class Error(Exception):
    """A failed call or a rejected input.

    Attributes:
      code: the grpc.StatusCode (the server's, or the one a client-side check chose).
      details: the server's message as it sent it (or the client's check's).
      trailers: the call's trailing metadata, e.g. {"okl-batches-applied": "2"}.
      note: what the package adds, e.g. which examples a failed stream carried.
      remembered: for a Model.remember() sent as several requests (more rows than
        Options.max_batch) that failed part-way, the okl.Remembered of the rows the
        requests before the failing one remembered (its first rows); None otherwise.
    str(error) is "CODE: details" followed by the note, as the okl tool prints it.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    remembered: Optional["Remembered"] = None

    def __init__(self, details: str, *, code: Optional[grpc.StatusCode] = None,
                 trailers: Optional[Mapping[str, str]] = None, note: str = "") -> None:
        if code is not None:
            self.code = code
        self.details = details
        self.trailers: Dict[str, str] = dict(trailers or {})
        self.note = note
        super().__init__(f"{self.code.name}: {details}{note}")


class Cancelled(Error):
    """CANCELLED: the call was cancelled, usually by the caller."""
    code = grpc.StatusCode.CANCELLED


class Unknown(Error):
    """UNKNOWN: an error the server did not classify."""
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(Error, ValueError):
    """INVALID_ARGUMENT: a bad name, config, input shape, dimension or value."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(Error):
    """DEADLINE_EXCEEDED: the call (with its retries) ran past the client's deadline."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(Error):
    """NOT_FOUND: no model of that name (or an unknown health service)."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(Error):
    """ALREADY_EXISTS: create_model of a name that is taken."""
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(Error):
    """PERMISSION_DENIED: the token does not grant this tenant or method."""
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(Error):
    """RESOURCE_EXHAUSTED: a limit of the server (models, bytes, batch size, rate, disk)."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(Error):
    """FAILED_PRECONDITION: e.g. an example would make the model diverge."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(Error):
    """ABORTED."""
    code = grpc.StatusCode.ABORTED


class OutOfRange(Error):
    """OUT_OF_RANGE."""
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(Error):
    """UNIMPLEMENTED: the server does not have this method (an older server)."""
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(Error):
    """INTERNAL: a server fault, or an answer the client cannot read."""
    code = grpc.StatusCode.INTERNAL


class Unavailable(Error):
    """UNAVAILABLE: the server is unreachable, starting, draining or moving the tenant
    (after the client's retries)."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(Error):
    """DATA_LOSS: snapshot bytes that do not decode or fail their checksum."""
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(Error):
    """UNAUTHENTICATED: no token, or one the server does not know."""
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[grpc.StatusCode, Type[Error]] = {
    cls.code: cls for cls in (
        Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
        PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
        Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}


def error_class(code: grpc.StatusCode) -> Type[Error]:
    """The okl.Error subclass of a status code (Error itself for one without a class)."""
    return _BY_CODE.get(code, Error)


def from_rpc_error(error: grpc.RpcError, note: str = "") -> Error:
    """The okl.Error of a failed gRPC call: its code's class, its message and trailers."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    trailers = trailing_metadata(error)
    return error_class(code)(details or "", code=code, trailers=trailers, note=note)


def trailing_metadata(error: grpc.RpcError) -> Dict[str, str]:
    """A failed call's trailing metadata as a dict ({} if it has none)."""
    get = getattr(error, "trailing_metadata", None)
    items = get() if get is not None else None
    return {key: value for key, value in (items or ()) if isinstance(value, str)}
