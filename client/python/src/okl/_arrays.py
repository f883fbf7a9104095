"""Inputs checked and written straight to protobuf's wire format.

A request of n examples is built with numpy, not message by message: a dense example's
encoding has the same length for every row (ObserveRequest.examples: tag, length, then
Example.x: tag, length, Vector.values: tag, length, d doubles; then Example.y: tag, one
double), so n of them are one structured numpy array whose bytes are the request's. That
is what lets observe() take hundreds of thousands of examples a second (building the
messages with the generated classes costs several microseconds an example). Sparse rows
(scipy.sparse) are written row by row, each as its non-zeros' values and packed indices.

The encodings are checked against the generated classes' in tests/python: both parse to
equal messages.
"""

from __future__ import annotations

import functools
import numbers
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from okl._errors import InvalidArgument

# Wire tags: (field number << 3) | wire type (1: 64-bit, 2: length-delimited).
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
ByteArray = npt.NDArray[np.uint8]

_TAG_REF = b"\x0a"          # ObserveRequest.ref, PredictRequest.ref: field 1, LEN
_TAG_ROW = b"\x12"          # ObserveRequest.examples, PredictRequest.inputs: field 2, LEN
_TAG_EXAMPLE_X = b"\x0a"    # Example.x: field 1, LEN
_TAG_EXAMPLE_Y = 0x11       # Example.y: field 2, I64
_TAG_CLASS_LABEL = b"\x1a"  # Example.class_label: field 3, LEN
_TAG_VALUES = b"\x0a"       # Vector.values (packed doubles): field 1, LEN
_TAG_INDICES = b"\x12"      # Vector.indices (packed varints): field 2, LEN
_TAG_TENANT = b"\x0a"       # ModelRef.tenant: field 1, LEN
_TAG_MODEL = b"\x12"        # ModelRef.model: field 2, LEN
_TAG_REMEMBER = b"\x1a"     # PredictRequest.remember: field 3, LEN
_TAG_EVENT_ID = b"\x0a"     # Remember.event_ids, EventLabel.event_id: field 1, LEN
_TAG_WAIT = b"\x11"         # Remember.wait_seconds: field 2, I64
_TAG_DEFAULT_LABEL = b"\x19"  # Remember.default_label: field 3, I64
_TAG_LABEL = b"\x12"        # LabelRequest.labels: field 2, LEN
_TAG_LABEL_Y = 0x11         # EventLabel.y: field 2, I64


def varint(value: int) -> bytes:
    """value (>= 0) as a protobuf varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def ref_field(tenant: str, model: str) -> bytes:
    """Field 1 (ref) of an ObserveRequest or a PredictRequest naming tenant/model."""
    ref = (_length_delimited(_TAG_TENANT, tenant.encode("utf-8"))
           + _length_delimited(_TAG_MODEL, model.encode("utf-8")))
    return _length_delimited(_TAG_REF, ref)


@dataclass(frozen=True)
class Rows:
    """n encoded rows (examples, inputs or labels), each a repeated field 2 entry of an
    ObserveRequest, a PredictRequest or a LabelRequest; rows a..b are the bytes
    blob[offset(a):offset(b)]."""

    blob: bytes
    count: int
    dim: int
    row_bytes: int = 0                    # dense: every row's length
    offsets: Optional[IntArray] = None  # sparse: count + 1 row boundaries

    def offset(self, row: int) -> int:
        if self.offsets is None:
            return row * self.row_bytes
        return int(self.offsets[row])

    def slice(self, first: int, end: int) -> bytes:
        """The encoding of rows [first, end)."""
        if first == 0 and end == self.count:
            return self.blob
        return self.blob[self.offset(first):self.offset(end)]


def is_sparse(x: Any) -> bool:
    """Whether x is a scipy.sparse matrix or array (without importing scipy)."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and bool(sparse.issparse(x))


def _shape_text(shape: Sequence[int]) -> str:
    return "(%s%s)" % (", ".join(str(s) for s in shape), "," if len(shape) == 1 else "")


def _as_float64(values: Any, name: str) -> FloatArray:
    array = values if isinstance(values, np.ndarray) else np.asarray(values)
    if array.dtype == np.float64:
        return array
    if array.dtype.kind in "biuf":
        return array.astype(np.float64)
    if array.dtype.kind == "c":
        raise InvalidArgument(f"{name} must hold real numbers; got complex dtype {array.dtype}")
    try:
        return np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(
            f"{name} must hold numbers; got dtype {array.dtype} ({e})") from None


def check_finite(x: Any, y: Optional[FloatArray] = None, name: str = "X") -> None:
    """InvalidArgument naming the first value of x (a matrix()) or y that is not finite.

    Only a stream needs it: the server validates each request whole and names the bad
    value itself, but a stream's messages before a bad one stay applied."""
    if is_sparse(x):
        data = x.data
        if not np.isfinite(data).all():
            row = int(np.searchsorted(x.indptr, np.flatnonzero(~np.isfinite(data))[0],
                                      "right")) - 1
            raise InvalidArgument(f"{name} row {row} holds a non-finite value: every value "
                                  "must be finite (drop or impute NaN and infinite values "
                                  "first)")
    else:
        _check_finite_array(x, name)
    if y is not None:
        _check_finite_array(y, "y")


def _check_finite_array(x: FloatArray, name: str) -> None:
    if np.isfinite(x).all():
        return
    where = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
    index = ", ".join(str(i) for i in where)
    raise InvalidArgument(
        f"{name}[{index}] is {x[where]!r}: every value must be finite (drop or impute "
        f"NaN and infinite values first)")


def matrix(x: Any, name: str = "X") -> Any:
    """x as a C-ordered 2-D float64 numpy array, or a scipy.sparse matrix as canonical CSR
    of float64 (indices sorted, none repeated); InvalidArgument saying what to fix for
    anything else. Values are not checked (see check_finite)."""
    if is_sparse(x):
        return _sparse_matrix(x, name)
    if x is None:
        raise InvalidArgument(f"{name} is None: pass a 2-D array of shape (n, d)")
    try:
        array = _as_float64(x, name)
    except InvalidArgument:
        raise
    except (TypeError, ValueError) as e:  # ragged lists and the like
        raise InvalidArgument(f"{name} must be a 2-D array of numbers of shape (n, d): {e}") \
            from None
    if array.ndim != 2:
        fix = ""
        if array.ndim == 1:
            fix = (": reshape a single example with X.reshape(1, -1), or a single feature "
                   "with X.reshape(-1, 1)")
        raise InvalidArgument(f"{name} must be a 2-D array of shape (n, d); got shape "
                              f"{_shape_text(array.shape)}{fix}")
    if array.shape[1] == 0:
        raise InvalidArgument(f"{name} has shape {_shape_text(array.shape)}: every row needs "
                              "at least one value")
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def _sparse_matrix(x: Any, name: str) -> Any:
    if len(x.shape) != 2:
        raise InvalidArgument(f"{name} must be 2-D; got shape {_shape_text(x.shape)}")
    csr = x.tocsr()
    if csr.shape[1] == 0:
        raise InvalidArgument(f"{name} has shape {_shape_text(csr.shape)}: every row needs at "
                              "least one value")
    if csr.shape[1] > 1 << 32:
        raise InvalidArgument(f"{name} has {csr.shape[1]} columns; a model takes at most 2^32")
    if not csr.has_canonical_format:  # unsorted or repeated indices: sum and sort them
        csr = csr.copy()
        csr.sum_duplicates()
    if csr.dtype != np.float64:
        csr = csr.astype(np.float64) if csr.dtype.kind in "biuf" else csr.astype(
            _as_float64(csr.data, name).dtype)
    return csr


def labels(y: Any, count: int, name: str = "y", rows: str = "X has {} rows",
           per: str = "row") -> FloatArray:
    """y as a 1-D float64 array of `count` labels, or InvalidArgument saying what to fix
    (`rows` and `per` name what the labels are counted against). Values are not checked
    (see check_finite)."""
    if y is None:
        raise InvalidArgument(f"{name} is None: pass one label per row of X")
    array = _as_float64(y, name)
    if array.ndim != 1:
        fix = ": flatten it with y.ravel()" if array.ndim == 2 and 1 in array.shape else ""
        raise InvalidArgument(f"{name} must be a 1-D array of labels; got shape "
                              f"{_shape_text(array.shape)}{fix}")
    if array.shape[0] != count:
        raise InvalidArgument(f"{rows.format(count)} but {name} has {array.shape[0]} labels: "
                              f"pass one label per {per}")
    return array


@functools.lru_cache(maxsize=64)
def _dense_layout(dim: int, labelled: bool) -> Tuple[bytes, Any]:
    """What precedes each dense row's values (its tags and lengths), and the numpy
    structured dtype of a whole row."""
    values = 8 * dim
    vector = len(_TAG_VALUES) + len(varint(values)) + values
    head = _TAG_ROW
    if labelled:
        example = len(_TAG_EXAMPLE_X) + len(varint(vector)) + vector + 9
        head += varint(example) + _TAG_EXAMPLE_X
    head += varint(vector) + _TAG_VALUES + varint(values)
    fields: List[Tuple[Any, ...]] = [("head", np.uint8, (len(head),)), ("x", "<f8", (dim,))]
    if labelled:
        fields += [("y_tag", np.uint8), ("y", "<f8")]
    return head, np.dtype(fields)


# float64 is "<f8" (the wire's byte order) here: no conversion.
_LITTLE_ENDIAN = sys.byteorder == "little"
# Up to this many rows, joining bytes costs less than filling a structured array.
_FEW_ROWS = 4


def _dense_rows(x: FloatArray, y: Optional[FloatArray]) -> Rows:
    count, dim = x.shape
    head, dtype = _dense_layout(dim, y is not None)
    little = x if _LITTLE_ENDIAN else x.astype("<f8")
    if count <= _FEW_ROWS:  # a Predict of one input, say: the per-call cost matters
        if y is None:
            blob = (head + little.tobytes() if count == 1
                    else b"".join([head + row.tobytes() for row in little]))
        else:
            labels = y if _LITTLE_ENDIAN else y.astype("<f8")
            blob = b"".join([head + little[i].tobytes() + b"\x11" + labels[i].tobytes()
                             for i in range(count)])
        return Rows(blob=blob, count=count, dim=dim, row_bytes=dtype.itemsize)
    rows = np.empty(count, dtype=dtype)
    rows["head"] = np.frombuffer(head, dtype=np.uint8)
    rows["x"] = little
    if y is not None:
        rows["y_tag"] = _TAG_EXAMPLE_Y
        rows["y"] = y
    return Rows(blob=rows.tobytes(), count=count, dim=dim, row_bytes=dtype.itemsize)


def _varint_bytes(values: IntArray) -> Tuple[ByteArray, IntArray]:
    """The varints of non-negative integers < 2^35, concatenated, and where each ends."""
    values = values.astype(np.uint64)
    lengths = np.ones(values.shape[0], dtype=np.int64)
    for bits in (7, 14, 21, 28):
        lengths += values >= (1 << bits)
    groups = np.empty((values.shape[0], 5), dtype=np.uint8)
    for j in range(5):
        more = (lengths > j + 1).astype(np.uint8) << 7
        groups[:, j] = ((values >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8) | more
    used = np.arange(5) < lengths[:, None]
    return groups[used], np.cumsum(lengths)


def _sparse_rows(csr: Any, y: Optional[FloatArray]) -> Rows:
    values = csr.data.astype("<f8").tobytes()
    indices, index_ends = _varint_bytes(csr.indices)
    index_bytes = indices.tobytes()
    indptr = csr.indptr
    y_bytes = y.astype("<f8").tobytes() if y is not None else b""
    parts: List[bytes] = []
    offsets = np.zeros(csr.shape[0] + 1, dtype=np.int64)
    zero = _TAG_VALUES + varint(8) + bytes(8) + _TAG_INDICES + varint(1) + b"\x00"
    total = 0
    for row in range(csr.shape[0]):
        first, end = int(indptr[row]), int(indptr[row + 1])
        if first == end:
            # No entries would read as an empty dense vector: one explicit zero instead.
            vector = zero
        else:
            varint_first = int(index_ends[first - 1]) if first > 0 else 0
            varints = index_bytes[varint_first:int(index_ends[end - 1])]
            vector = (_TAG_VALUES + varint(8 * (end - first)) + values[8 * first:8 * end]
                      + _TAG_INDICES + varint(len(varints)) + varints)
        if y is not None:
            vector = (_TAG_EXAMPLE_X + varint(len(vector)) + vector
                      + bytes((_TAG_EXAMPLE_Y,)) + y_bytes[8 * row:8 * row + 8])
        encoded = _TAG_ROW + varint(len(vector)) + vector
        parts.append(encoded)
        total += len(encoded)
        offsets[row + 1] = total
    return Rows(blob=b"".join(parts), count=csr.shape[0], dim=csr.shape[1], offsets=offsets)


def encode(x: Any, y: Optional[FloatArray] = None) -> Rows:
    """The rows of x (a matrix()) as ObserveRequest.examples entries labelled by y (labels()
    of as many), or without y as PredictRequest.inputs entries."""
    if is_sparse(x):
        return _sparse_rows(x, y)
    return _dense_rows(x, y)


def inputs(x: Any) -> Rows:
    """X checked (matrix()) and encoded as PredictRequest.inputs entries."""
    return encode(matrix(x))


MAX_CLASS_LABEL_BYTES = 128


def class_labels(classes: Any, count: int, name: str = "classes") -> List[bytes]:
    """A multi-class model's labels, one per row, as UTF-8 bytes: each a str (any other
    value, an int say, is named by str(value)) of 1 to 128 bytes, or InvalidArgument
    naming the first bad one, as the server would (checked here so that a call split into
    several requests applies none of them)."""
    if classes is None or isinstance(classes, (str, bytes)):
        raise InvalidArgument(f"{name} must be a sequence of class names, one per row of X; "
                              f"got {type(classes).__name__}")
    try:
        items = list(classes)
    except TypeError:
        raise InvalidArgument(f"{name} must be a sequence of class names; got "
                              f"{type(classes).__name__}") from None
    if len(items) != count:
        raise InvalidArgument(f"X has {count} rows but {name} has {len(items)} classes: pass "
                              "one class per row")
    encoded = []
    for index, item in enumerate(items):
        label = (item if isinstance(item, str) else str(item)).encode("utf-8")
        if not 1 <= len(label) <= MAX_CLASS_LABEL_BYTES:
            raise InvalidArgument(f"{name}[{index}] is {len(label)} bytes of UTF-8: a class "
                                  f"is 1 to {MAX_CLASS_LABEL_BYTES} bytes")
        encoded.append(label)
    return encoded


def _read_varint(data: bytes, at: int) -> Tuple[int, int]:
    """The varint at data[at:] and where it ends."""
    value, shift = 0, 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def with_class_labels(rows: Rows, labels: Sequence[bytes]) -> Rows:
    """Example rows (encode(x, zeros)) with Example.class_label appended to each."""
    parts: List[bytes] = []
    offsets = np.zeros(rows.count + 1, dtype=np.int64)
    total = 0
    for row in range(rows.count):
        encoded = rows.slice(row, row + 1)
        length, body = _read_varint(encoded, len(_TAG_ROW))
        example = (encoded[body:body + length] + _TAG_CLASS_LABEL + varint(len(labels[row]))
                   + labels[row])
        entry = _TAG_ROW + varint(len(example)) + example
        parts.append(entry)
        total += len(entry)
        offsets[row + 1] = total
    return Rows(blob=b"".join(parts), count=rows.count, dim=rows.dim, offsets=offsets)


def rows_per_request(rows: Rows, max_batch: int, max_bytes: int, extra_bytes: int = 0) -> int:
    """How many rows one request may carry: at most max_batch, and about max_bytes
    (extra_bytes: what the request carries besides the rows, in proportion to them)."""
    if rows.count == 0:
        return max_batch
    average = max(1, (len(rows.blob) + extra_bytes) // rows.count)
    return max(1, min(max_batch, max_bytes // average))


# --- Delayed feedback: a Predict's Remember, and Label -----------------------------------


_EVENT_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


def check_event_ids(ids: List[bytes], name: str = "event_ids") -> None:
    """InvalidArgument naming the first malformed id, as the server's check words it: an
    id is 1 to 128 bytes of [A-Za-z0-9._:-]. For a call split into several requests,
    which checks every id before the first request is sent."""
    for index, item in enumerate(ids):
        if _EVENT_ID.fullmatch(item) is None:
            raise InvalidArgument(f"{name}[{index}] is {item.decode('utf-8', 'replace')!r}: an "
                                  "event id is 1 to 128 bytes of [A-Za-z0-9._:-]")


def event_ids(ids: Any, name: str = "event_ids") -> List[bytes]:
    """Event ids (a list, tuple or array of str) as their UTF-8 bytes, or InvalidArgument.
    Their characters and lengths are the server's to check."""
    if isinstance(ids, (str, bytes)):
        raise InvalidArgument(f"{name} must be a sequence of str, one per row; got a single "
                              f"{type(ids).__name__} (wrap one id in a list)")
    if ids is None:
        raise InvalidArgument(f"{name} is None: pass a sequence of str")
    try:
        items = list(ids)
    except TypeError:
        raise InvalidArgument(f"{name} must be a sequence of str; got {type(ids).__name__}") \
            from None
    encoded = []
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidArgument(f"{name}[{index}] is {item!r} ({type(item).__name__}): "
                                  "event ids are str")
        encoded.append(item.encode("utf-8"))
    return encoded


def number(value: Any, name: str) -> float:
    """A real number as a float, or InvalidArgument (its range is the server's to check)."""
    if isinstance(value, numbers.Real) or (isinstance(value, np.ndarray) and value.ndim == 0
                                           and value.dtype.kind in "biuf"):
        return float(value)
    raise InvalidArgument(f"{name} must be a number; got {value!r} ({type(value).__name__})")


def remember_field(ids: Optional[Sequence[bytes]], wait_seconds: float,
                   default_label: Optional[float]) -> bytes:
    """Field 3 (remember) of a PredictRequest: present even when empty, since its presence
    is what asks the server to remember (ids empty or None: the server makes them)."""
    parts = [_TAG_EVENT_ID + varint(len(i)) + i for i in ids or ()]
    if wait_seconds != 0:  # 0 is the field's default; NaN is sent, for the server to refuse
        parts.append(_TAG_WAIT + struct.pack("<d", wait_seconds))
    if default_label is not None:
        parts.append(_TAG_DEFAULT_LABEL + struct.pack("<d", default_label))
    return _length_delimited(_TAG_REMEMBER, b"".join(parts))


def label_rows(ids: Sequence[bytes], y: FloatArray) -> Rows:
    """LabelRequest.labels entries: EventLabel { event_id: ids[i], y: y[i] }. Ids of one
    length (the server's are all 32 bytes) are written as one structured numpy array."""
    count = len(ids)
    ys = y.astype("<f8") if not _LITTLE_ENDIAN else y
    lengths = {len(i) for i in ids}
    if count > _FEW_ROWS and len(lengths) == 1 and 0 < min(lengths):
        length = lengths.pop()
        body_bytes = len(_TAG_EVENT_ID) + len(varint(length)) + length + 9
        head = _TAG_LABEL + varint(body_bytes) + _TAG_EVENT_ID + varint(length)
        dtype = np.dtype([("head", np.uint8, (len(head),)), ("id", f"S{length}"),
                          ("y_tag", np.uint8), ("y", "<f8")])
        rows = np.empty(count, dtype=dtype)
        rows["head"] = np.frombuffer(head, dtype=np.uint8)
        rows["id"] = ids
        rows["y_tag"] = _TAG_LABEL_Y
        rows["y"] = ys
        return Rows(blob=rows.tobytes(), count=count, dim=0, row_bytes=dtype.itemsize)
    y_bytes = ys.tobytes()
    parts: List[bytes] = []
    offsets = np.zeros(count + 1, dtype=np.int64)
    total = 0
    for index, event_id in enumerate(ids):
        body = (_TAG_EVENT_ID + varint(len(event_id)) + event_id + bytes((_TAG_LABEL_Y,))
                + y_bytes[8 * index:8 * index + 8])
        encoded = _TAG_LABEL + varint(len(body)) + body
        parts.append(encoded)
        total += len(encoded)
        offsets[index + 1] = total
    return Rows(blob=b"".join(parts), count=count, dim=0, offsets=offsets)
