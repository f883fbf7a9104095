"""The Python examples of docs/service.md and docs/python.md, run as they are written
against the session's okl_server (their address, 127.0.0.1:50051, replaced by its), so
that they cannot go stale.

docs/service.md: the first ```python block after the sentence naming this test, and the
first after the one naming its click-through example (delayed feedback). docs/python.md:
every ```python block, in order, as one program (they build on each other).
"""

import os
import re
import subprocess
import sys

import pytest

SERVICE_DOC = os.path.join("docs", "service.md")
MARKER = "`tests/python/doc_examples_test.py` runs this example"
CLICKS_MARKER = r"`tests/python/doc_examples_test\.py`\s+runs\s+this click-through example"
ADDRESS = "127.0.0.1:50051"


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def run(program, server, site, cwd):
    assert ADDRESS in program, "the example no longer connects to %s" % ADDRESS
    done = subprocess.run([sys.executable, "-c", program.replace(ADDRESS, server.address)],
                          capture_output=True, text=True, timeout=120, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=site))
    assert done.returncode == 0, "the example failed:\n%s\n%s" % (program, done.stderr)
    return done.stdout


def test_the_service_doc_example_runs(options, server, work_dir):
    with open(os.path.join(options.repo, SERVICE_DOC)) as f:
        text = f.read()
    assert MARKER in text, "%s no longer says %r" % (SERVICE_DOC, MARKER)
    example = python_blocks(text[text.index(MARKER):])[0]
    printed = run(example, server, options.site, work_dir).splitlines()
    assert re.fullmatch(r"\[0\.8\d*\]", printed[0]), printed  # sin(1) = 0.84
    assert printed[1] == "200"


def test_the_service_doc_click_through_example_runs(options, server, work_dir):
    with open(os.path.join(options.repo, SERVICE_DOC)) as f:
        text = f.read()
    found = re.search(CLICKS_MARKER, text)
    assert found, "%s no longer says %r" % (SERVICE_DOC, CLICKS_MARKER)
    example = python_blocks(text[found.start():])[0]
    assert ".remember(" in example and ".label(" in example
    printed = run(example, server, options.site, work_dir).splitlines()
    assert printed[:3] == ["50 0 0", "1", "600 0"], printed
    assert 0 < float(printed[3]) < 0.5, printed  # it learned: a coin's log-loss is 0.69


def test_the_examples_of_docs_python_md_run(options, server, work_dir):
    pytest.importorskip("sklearn")
    pytest.importorskip("scipy")
    with open(os.path.join(options.repo, "docs", "python.md")) as f:
        blocks = python_blocks(f.read())
    assert len(blocks) >= 5
    run("\n".join(blocks), server, options.site, work_dir)
