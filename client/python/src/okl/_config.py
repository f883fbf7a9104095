"""A model's config from what a Python caller has at hand."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from google.protobuf import json_format, text_format

from okl._errors import InvalidArgument
from okl.v1 import okl_pb2 as pb

ConfigLike = Union[pb.ModelConfig, str, Mapping[str, Any]]
"""A config: an okl.pb.ModelConfig, a protobuf text-format string (as client/examples/'s
files and `okl create --config` take), or a dict of the same fields, nested as in the
text format ({"dim": 1, "kernel": {"gaussian": {"gamma": 10}}, "lambda": 0.001, ...})."""


def model_config(config: ConfigLike, dim: Optional[int] = None) -> pb.ModelConfig:
    """The okl.pb.ModelConfig of `config` (a copy), with its dim set to `dim` if it leaves
    dim unset (0). InvalidArgument for a field that does not exist or a value of the wrong
    type, naming it; the server checks the values themselves when the model is created."""
    message = pb.ModelConfig()
    if isinstance(config, pb.ModelConfig):
        message.CopyFrom(config)
    elif isinstance(config, str):
        try:
            text_format.Parse(config, message)
        except text_format.ParseError as e:
            raise InvalidArgument(f"config (text format): {e}") from None
    elif isinstance(config, Mapping):
        try:
            json_format.ParseDict(dict(config), message)
        except json_format.ParseError as e:
            raise InvalidArgument(f"config (dict): {e}") from None
    else:
        raise InvalidArgument(
            "config must be a dict, a protobuf text-format string or an okl.pb.ModelConfig; "
            f"got {type(config).__name__}")
    if dim is not None and message.dim == 0:
        message.dim = dim
    return message


def config_text(config: pb.ModelConfig) -> str:
    """A config in protobuf text format, on one line."""
    return str(text_format.MessageToString(config, as_one_line=True))
