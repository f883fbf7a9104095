"""The okl Python package's tests: the package as pip installs it, a real okl_server.

Run by ctest (tests/python/CMakeLists.txt) with Debian's /usr/bin/python3:

  /usr/bin/python3 -m pytest tests/python --server=build/release/server/okl_server \
      --okl=build/release/client/okl --repo=.

Before any test is collected, client/python is copied to a temporary directory and
pip-installed from there into another (`pip install --target`, no index, no build
isolation: Debian's setuptools, protoc and grpc_python_plugin build it, generating its
stubs from proto/), which then leads sys.path; nothing is written to the checkout or the
machine, and the directories go when the session ends. --installed=DIR uses a package
installed there instead. One okl_server (memory only, loopback, free ports) serves the
session; each test makes its own tenant and models.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "system"))
import okl_system  # noqa: E402 (the system tests' okl_server harness)

_TEMPORARY = []


def pytest_addoption(parser):
    group = parser.getgroup("okl")
    group.addoption("--server", required=True, help="the okl_server binary")
    group.addoption("--okl", required=True, help="the okl tool (the C++ client)")
    group.addoption("--repo", required=True, help="the repository's root")
    group.addoption("--protoc", default=shutil.which("protoc") or "/usr/bin/protoc")
    group.addoption("--grpc_python_plugin",
                    default=shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin")
    group.addoption("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx",
                    help="the local cluster's router")
    group.addoption("--installed", default="",
                    help="a directory where the okl package is installed already")


def install_package(repo, protoc, plugin):
    """pip-installs client/python into a new temporary directory; returns the directory."""
    work = tempfile.mkdtemp(prefix="okl_python_test.")
    _TEMPORARY.append(work)
    source = os.path.join(work, "source")
    shutil.copytree(os.path.join(repo, "client", "python"), source,
                    ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__",
                                                  "v1"))
    site = os.path.join(work, "site")
    env = dict(os.environ, OKL_PROTO_DIR=os.path.join(repo, "proto"), OKL_PROTOC=protoc,
               OKL_GRPC_PYTHON_PLUGIN=plugin, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
         "--no-index", "--no-cache-dir", "--target", site, source],
        env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise pytest.UsageError("pip could not install client/python (exit %d):\n%s%s"
                                % (done.returncode, done.stdout, done.stderr))
    return site


def pytest_configure(config):
    if config.getoption("--help", default=False):
        return
    site = config.getoption("--installed") or install_package(
        os.path.abspath(config.getoption("--repo")), config.getoption("--protoc"),
        config.getoption("--grpc_python_plugin"))
    sys.path.insert(0, site)
    config.okl_site = site


def pytest_unconfigure(config):
    for path in _TEMPORARY:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def options(pytestconfig):
    """The command line's paths, absolute."""
    class Paths:
        server = os.path.abspath(pytestconfig.getoption("--server"))
        cli = os.path.abspath(pytestconfig.getoption("--okl"))
        repo = os.path.abspath(pytestconfig.getoption("--repo"))
        nginx = pytestconfig.getoption("--nginx")
        site = pytestconfig.okl_site
    return Paths


@pytest.fixture(scope="session")
def work_dir():
    """A temporary directory for the session, removed after it."""
    with tempfile.TemporaryDirectory(prefix="okl_python_test.") as path:
        yield path


@pytest.fixture(scope="session")
def server(options, work_dir):
    """One okl_server for the session: memory only, on free loopback ports."""
    directory = os.path.join(work_dir, "server")
    os.makedirs(directory)
    process = okl_system.OklServer(options.server, directory).start()
    yield process
    code = process.stop()
    assert code == 0, "okl_server did not exit 0 on SIGTERM (%s):\n%s" % (code, process.log())


@pytest.fixture(scope="session")
def secure_server(options, work_dir):
    """okl_server with TLS (a self-signed certificate for 127.0.0.1) and tokens: one
    that writes tenant "acme", one that reads it. Returns (server, certificate's path,
    {"write": token, "read": token})."""
    directory = os.path.join(work_dir, "secure")
    os.makedirs(directory)
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    tokens = {}
    with open(os.path.join(directory, "tokens"), "w") as f:
        for role in ("write", "read"):
            out = subprocess.run([options.cli, "token", "new", "--role=" + role,
                                  "--tenants=acme"], check=True, capture_output=True,
                                 text=True).stdout.splitlines()
            tokens[role] = out[0]
            f.write(out[1] + "\n")
    process = okl_system.OklServer(options.server, directory, [
        "--auth_tokens_file=" + os.path.join(directory, "tokens"),
        "--tls_cert_file=" + cert, "--tls_key_file=" + key]).start()
    yield process, cert, tokens
    assert process.stop() == 0


@pytest.fixture(scope="session")
def client(server):
    import okl
    with okl.Client(server.address) as connection:
        yield connection


_TENANTS = itertools.count()


@pytest.fixture
def tenant(request):
    """A tenant of this test's own: its name and a counter, as the server's names allow."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:56]
    return "%s-%d" % (name, next(_TENANTS))


@pytest.fixture
def rng():
    import numpy
    return numpy.random.default_rng(20240611)


GAUSSIAN = ("kernel {{ gaussian {{ gamma: {gamma} }} }} loss {{ squared {{}} }} "
            "learning_rate {{ eta0: 0.5 }} lambda: 0.001 budget {{ max_terms: {terms} }}")


def regression_config(dim, gamma=1.0, terms=64):
    """A small NORMA regression config in text format."""
    return ("dim: %d " % dim) + GAUSSIAN.format(gamma=gamma, terms=terms)
