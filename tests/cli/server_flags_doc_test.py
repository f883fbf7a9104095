"""docs/server-flags.md's okl_server flag table against okl_server itself.

Each default is written once in the code (server/server.h and the Options it nests;
okl_server's flags take theirs from a default-constructed Options). docs/server-flags.md
repeats them for readers, so this test keeps the copy honest: every flag okl_server
defines is in the table, every row names a real flag, and each row's default is the one
`okl_server --helpfull` prints.

  python3 tests/cli/server_flags_doc_test.py --server=build/release/server/okl_server \
      --doc=docs/server-flags.md
"""
import argparse
import re
import subprocess
import sys
import unittest

ARGS = None


def duration_seconds(text):
    """'60s', '1m', '1m30s', '10s', '0' -> seconds; None if it is not a duration."""
    if text == "0":
        return 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def normalise(value):
    """One spelling for a default: the doc's and Abseil's help differ in form only."""
    value = value.strip().strip("`").strip('"')
    if value == "empty":
        return ""
    seconds = duration_seconds(value)
    return f"{seconds}s" if seconds is not None else value


def server_flags(server):
    """{flag: default} of the flags okl_server_main.cc defines, from --helpfull."""
    out = subprocess.run([server, "--helpfull"], capture_output=True, text=True,
                         check=False)
    text = out.stdout + out.stderr
    start = text.find("okl_server_main.cc:")
    if start < 0:
        raise AssertionError("okl_server --helpfull lists no flags of okl_server_main.cc")
    section = text[start:].split("\n\n  Flags from", 1)[0]
    flags = {}
    for match in re.finditer(r"--(\w+) \(.*?\);\s+default: (.*?);", section, re.S):
        flags[match.group(1)] = match.group(2)
    return flags


def doc_rows(doc):
    """{flag: default cell} of the table under "`okl_server` flags"."""
    with open(doc, encoding="utf-8") as file:
        text = file.read()
    start = text.index("`okl_server` flags")
    rows = {}
    for line in text[start:].splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`--"):
            continue
        for flag in re.findall(r"`--(\w+)`", cells[0]):
            rows[flag] = cells[1]
    return rows


class ServerFlagsDocTest(unittest.TestCase):
    def setUp(self):
        self.flags = server_flags(ARGS.server)
        self.rows = doc_rows(ARGS.doc)
        self.assertGreater(len(self.flags), 20)

    def test_every_flag_has_a_row_and_every_row_a_flag(self):
        self.assertEqual(sorted(set(self.flags) - set(self.rows)), [],
                         "flags of okl_server missing from the doc's table")
        self.assertEqual(sorted(set(self.rows) - set(self.flags)), [],
                         "the doc's table names flags okl_server does not have")

    def test_every_default_is_okl_servers(self):
        for flag, default in sorted(self.flags.items()):
            if flag not in self.rows:
                continue
            # A cell may explain its value after it: "0 (none)", "0 = 3/4 of RAM".
            cell = re.split(r"\s+[(=]", self.rows[flag], 1)[0]
            with self.subTest(flag=flag):
                self.assertEqual(normalise(cell), normalise(default),
                                 f"{ARGS.doc} says --{flag} defaults to {self.rows[flag]!r}, "
                                 f"okl_server says {default}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--doc", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
