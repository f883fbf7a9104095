"""The documentation's links and citations resolve.

  python3 tests/docs/doc_links_test.py --repo=.

- Every Markdown link `[text](target)` of README.md, docs/*.md and the other READMEs
  names a file or folder that exists (relative to the page), and its `#anchor`, if any,
  is a heading of that page (GitHub's anchor for it).
- Every repository path a page quotes in backticks (`server/host/model_host.h`,
  `docs/core.md`) exists, or is a program its folder's CMakeLists.txt builds
  (`bench/okl_loadgen`), or lies in a folder .gitignore keeps out (`deploy/secrets/`);
  paths with placeholders are not checked.
- README's documentation index links every page of docs/.
- Every citation of a section, `<page>.md, "<section>"`, in the repository's sources and
  pages names a section of that page: a heading, or a paragraph's bold lead-in
  (`**A local cluster**`), that starts with the cited words.
"""
import argparse
import fnmatch
import os
import re
import sys
import unittest

ARGS = None

# The pages whose links and quoted paths are checked (docs/*.md are added).
PAGES = ["README.md", "deploy/README.md", "data/README.md", "tests/fuzz/README.md"]
# Folders a quoted path may start with: the repository's own.
TOP_LEVEL = ("bench", "client", "core", "data", "deploy", "docs", "proto", "scripts",
             "server", "tests", ".ci")
# What the citation check reads, and what it skips.
SOURCE_SUFFIXES = (".md", ".h", ".cc", ".py", ".sh", ".txt", ".yaml", ".yml", ".proto",
                   ".textproto", ".conf", "Dockerfile", "run")
SKIPPED_DIRS = {".git", "data", "corpus", "regressions", "node_modules", "__pycache__"}

LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
QUOTED = re.compile(r"`([^`\s]+)`")
CITATION = re.compile(r"`?([A-Za-z0-9_./-]+\.md)`?,? \(?\"([^\"\n]+)\"")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def headings(path):
    """The headings of a Markdown page, without their #s, outside code blocks."""
    text = FENCE.sub("", read(path))
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6} +(.+)$", text, re.MULTILINE)]


def sections(path):
    """What a citation may name: the headings and the paragraphs' bold lead-ins."""
    text = FENCE.sub("", read(path))
    lead_ins = [m.group(1).strip().rstrip(".:")
                for m in re.finditer(r"^\*\*([^*\n]+)\*\*", text, re.MULTILINE)]
    return headings(path) + lead_ins


def ignored_folders(repo):
    """The folders .gitignore names from the root (/build*/, /deploy/secrets/)."""
    return [line.strip("/") for line in read(os.path.join(repo, ".gitignore")).splitlines()
            if line.startswith("/") and line.endswith("/")]


def built_program(repo, path):
    """Whether `path` is DIR/NAME for a program DIR/CMakeLists.txt builds."""
    folder, name = os.path.split(path)
    cmake = os.path.join(repo, folder, "CMakeLists.txt")
    return os.path.exists(cmake) and re.search(r"add_executable\(\s*%s\s" % re.escape(name),
                                               read(cmake)) is not None


def anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = heading.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def pages(repo):
    docs = sorted("docs/" + name for name in os.listdir(os.path.join(repo, "docs"))
                  if name.endswith(".md"))
    return PAGES + docs


def sources(repo):
    for folder, dirs, files in os.walk(repo):
        rel = os.path.relpath(folder, repo)
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS
                   and not (rel == "." and d.startswith("build"))]
        for name in files:
            if name.endswith(SOURCE_SUFFIXES) or name == "CMakeLists.txt":
                yield os.path.normpath(os.path.join(rel, name))


class DocLinksTest(unittest.TestCase):
    def test_every_link_resolves(self):
        broken = []
        for page in pages(ARGS.repo):
            here = os.path.dirname(page)
            text = FENCE.sub("", read(os.path.join(ARGS.repo, page)))
            for target in LINK.findall(text):
                if re.match(r"[a-z]+:", target):
                    continue  # https:, mailto:
                path, _, fragment = target.partition("#")
                resolved = os.path.normpath(os.path.join(here, path)) if path else page
                full = os.path.join(ARGS.repo, resolved)
                if not os.path.exists(full):
                    broken.append(f"{page}: {target} (no {resolved})")
                elif fragment and fragment not in [anchor(h) for h in headings(full)]:
                    broken.append(f"{page}: {target} (no heading #{fragment} in {resolved})")
        self.assertEqual(broken, [])

    def test_every_quoted_path_exists(self):
        ignored = ignored_folders(ARGS.repo)
        missing = []
        for page in pages(ARGS.repo):
            text = read(os.path.join(ARGS.repo, page))
            for quoted in QUOTED.findall(text):
                path = quoted.rstrip(".,:;")
                if (not path.startswith(tuple(p + "/" for p in TOP_LEVEL))
                        or re.search(r"[*$<>{}=|~]|\.\.\.|/[A-Z]+$|/NAME", path)):
                    continue
                if (not os.path.exists(os.path.join(ARGS.repo, path))
                        and not built_program(ARGS.repo, path)
                        and not any(fnmatch.fnmatch(path, folder)
                                    or fnmatch.fnmatch(path, folder + "/*")
                                    for folder in ignored)):
                    missing.append(f"{page}: `{quoted}`")
        self.assertEqual(missing, [])

    def test_readme_indexes_every_page_of_docs(self):
        readme = read(os.path.join(ARGS.repo, "README.md"))
        linked = set(LINK.findall(readme))
        unlisted = [page for page in pages(ARGS.repo)
                    if page.startswith("docs/") and page not in linked]
        self.assertEqual(unlisted, [], "pages of docs/ README's index does not link")

    def test_every_cited_section_is_a_heading(self):
        wrong = []
        for source in sources(ARGS.repo):
            try:
                text = read(os.path.join(ARGS.repo, source))
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                for cited, section in CITATION.findall(line):
                    page = os.path.normpath(os.path.join(os.path.dirname(source), cited))
                    if not os.path.exists(os.path.join(ARGS.repo, page)):
                        page = os.path.normpath(cited)  # a path from the repository root
                    full = os.path.join(ARGS.repo, page)
                    if not os.path.exists(full):
                        wrong.append(f"{source}:{number}: {cited} does not exist")
                    elif not any(s.startswith(section) for s in sections(full)):
                        wrong.append(f'{source}:{number}: {page} has no section "{section}"')
        self.assertEqual(wrong, [])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
