"""Builds the okl package: its gRPC stubs are generated from proto/ at build time.

setuptools reads the metadata from pyproject.toml; this file adds one step to build_py:
protoc, with grpc_python_plugin, compiles okl/v1/okl.proto into okl/v1/okl_pb2.py and
okl/v1/okl_pb2_grpc.py beside the package's own modules. The proto's package, okl.v1,
is then the subpackage okl.v1 of this package, so the generated
`from okl.v1 import okl_pb2` resolves as it is.

Where things are found (each overridable by the environment variable named):
  OKL_PROTO_DIR            the directory holding okl/v1/okl.proto (default: ../../proto
                           from this file, the repository's proto/)
  OKL_PROTOC               protoc (default: on PATH; Debian package protobuf-compiler)
  OKL_GRPC_PYTHON_PLUGIN   grpc_python_plugin (default: on PATH, then /usr/bin;
                           Debian package protobuf-compiler-grpc)
"""

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = "okl/v1/okl.proto"


def _tool(variable, name, fallback):
    path = os.environ.get(variable) or shutil.which(name) or fallback
    if not path or not os.access(path, os.X_OK):
        sys.exit("okl: cannot build the gRPC stubs: no %s (install Debian's %s, or set %s)"
                 % (name, "protobuf-compiler-grpc" if "grpc" in name else "protobuf-compiler",
                    variable))
    return path


def generate_stubs(out_dir):
    """Writes okl/v1/{__init__,okl_pb2,okl_pb2_grpc}.py and okl_pb2.pyi under out_dir."""
    proto_dir = os.environ.get("OKL_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
    if not os.path.isfile(os.path.join(proto_dir, PROTO)):
        sys.exit("okl: cannot build the gRPC stubs: no %s under %s; build from an okl "
                 "checkout (pip install ./client/python) or set OKL_PROTO_DIR to its proto/"
                 % (PROTO, os.path.abspath(proto_dir)))
    protoc = _tool("OKL_PROTOC", "protoc", "/usr/bin/protoc")
    plugin = _tool("OKL_GRPC_PYTHON_PLUGIN", "grpc_python_plugin", "/usr/bin/grpc_python_plugin")
    os.makedirs(os.path.join(out_dir, "okl", "v1"), exist_ok=True)
    subprocess.run([protoc, "-I" + proto_dir, "--python_out=" + out_dir, "--pyi_out=" + out_dir,
                    "--grpc_python_out=" + out_dir,
                    "--plugin=protoc-gen-grpc_python=" + plugin, PROTO], check=True)
    with open(os.path.join(out_dir, "okl", "v1", "__init__.py"), "w") as f:
        f.write('"""okl.v1: messages and stubs generated from proto/okl/v1/okl.proto '
                '(by setup.py; never edit)."""\n')


class BuildPyWithStubs(build_py):
    """build_py, then the stubs into the build tree (into src/ when editable)."""

    def run(self):
        super().run()
        editable = getattr(self, "editable_mode", False)
        generate_stubs(os.path.join(HERE, "src") if editable else self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
