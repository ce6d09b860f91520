"""Every citation of a document in the repository points at something the repository holds.

The documents a section-sign citation may name are listed in docs/profile.md ("Documents cited
in this repository"): `profile §N` and a bare `§N` are docs/profile.md, `livekit-notes §N` is
docs/livekit.md, and so on; a few published standards (A2A, RFCs, JSON-RPC) are external and
not checked. Every text file of the repository is read, and these fail, naming file:line:

- a section sign after a name that looks like a document (`…-notes`, `…profile`, `…spec`,
  `…guide`, `something.md`) the table does not list, or a `.md` file that does not exist;
- a section the document lacks (its headings `## N.` and `### N.M` are its sections). A run
  such as `§5, §6`, `§2 to §6` or two sections joined by a dash cites the document named at
  its start; a bare `§N` cites the internal document last named in its paragraph, else the
  file itself when it is one of the cited documents, else the profile;
- a `.md` file named anywhere that the repository lacks, a `file.md#anchor` whose anchor is
  none of that file's headings, and a `file.md, "Title"` (or `file.md, Title`) that begins none
  of its headings.
"""

from __future__ import annotations

import functools
import re
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE_DOC = Path("docs/profile.md")
TABLE_HEADING = "## Documents cited in this repository"
SECTION_SIGN = "\N{SECTION SIGN}"
TEXT_SUFFIXES = {".py", ".md", ".lua", ".html", ".js", ".ts", ".yaml", ".yml", ".toml", ".txt"}
SKIPPED_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}

NUMBER = r"\d+(?:\.\d+)*"
REF = re.compile(SECTION_SIGN + r"\s*(" + NUMBER + ")")
# what may stand between a document's name and its section: `'s`, spaces and line breaks with
# the comment markers that continue a comment, an opening bracket, a closing quote or link
GAP = r"(?:'s)?(?:[\s(\[*`\"]|#|--|//)*"
CONTINUATION = re.compile(
    SECTION_SIGN + NUMBER + r"[)\]]?\s*(?:,|;|–|—|-|/|&|\bto\b|\band\b|\bor\b|\bover\b)\s*$"
)
LOOKS_LIKE_A_DOCUMENT = re.compile(
    r"(?<![\w.-])([\w.-]*(?:notes|profile|spec|specification|guide))" + GAP + "$", re.I
)
MD_FILE = r"[\w./-]*[\w-]\.md"
FILE_SECTION = re.compile(r"(?<![\w./-])(" + MD_FILE + r")`?\]?(?:\(([^)\s]*)\))?" + GAP + "$")
MD_MENTION = re.compile(r"(?<![\w./-])(" + MD_FILE + r")(#[\w-]+)?\b")
TITLED = re.compile(
    r"(?<![\w./-])(" + MD_FILE + r")`?\]?(?:\([^)\s]*\))?,\s+"
    r"(?:\"([^\"\n]{1,80})\"|([A-Z][^.;:,()\"`\n]{0,60}?)(?=\s*(?:[.;:,)]|$)))",
    re.M,
)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
SECTION_HEADING = re.compile(r"^#{2,6}\s+(" + NUMBER + r")\.?\s", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


@dataclass(frozen=True)
class Citable:
    """One way of citing a document (a row of the table may give several), and where the
    document is (None: an external one)."""

    name: str
    path: Path | None

    @functools.cached_property
    def mention(self) -> re.Pattern[str]:
        """The name anywhere, `N` standing for a number."""
        words = (r"\d+" if word == "N" else re.escape(word) for word in self.name.split())
        return re.compile(r"(?<![\w.-])" + r"\s+".join(words), re.I)

    @functools.cached_property
    def before_section(self) -> re.Pattern[str]:
        """The name right before a section sign (the text up to it searched)."""
        return re.compile(self.mention.pattern + GAP + "$", re.I)


@dataclass(frozen=True)
class Table:
    named: list[Citable]  # longest names first
    bare: Path  # what a bare section sign cites when nothing else is named

    def internal(self) -> list[Citable]:
        return [c for c in self.named if c.path is not None]


def read_table(root: Path) -> Table:
    """The citable documents, from the table in docs/profile.md."""
    text = (root / TABLE_DOC).read_text(encoding="utf-8")
    start = text.index(TABLE_HEADING)
    section = text[start : text.index("\n## ", start + 1)]
    named: list[Citable] = []
    bare: Path | None = None
    for cited, where in re.findall(r"^\|(.+)\|(.+)\|\s*$", section, re.M):
        link = re.search(r"\]\(([^)]+\.md)\)", where)
        path = TABLE_DOC.parent / link.group(1) if link else None
        if "this document" in where:
            path = TABLE_DOC
        for form in re.findall(r"`([^`]*" + SECTION_SIGN + r"N)`", cited):
            name = form.removesuffix(SECTION_SIGN + "N").strip()
            if name:
                named.append(Citable(name, path))
            else:
                assert path is not None, "a bare citation names a document of the repository"
                bare = path
    assert named, f"{TABLE_DOC}: the table of cited documents is missing"
    assert bare is not None, f"{TABLE_DOC}: the table does not say what a bare citation cites"
    return Table(sorted(named, key=lambda c: -len(c.name)), bare)


def tracked_files(root: Path) -> list[Path]:
    """The repository's text files: tracked, or new and not ignored (every file under root
    but caches and the virtualenv, without git)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
            timeout=10,
        ).stdout.decode()
        paths = [Path(p) for p in listed.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        paths = [
            p.relative_to(root)
            for p in root.rglob("*")
            if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(root).parts)
        ]
    return sorted(p for p in paths if p.suffix in TEXT_SUFFIXES and (root / p).is_file())


def slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "").strip().lower())
    return re.sub(r"\s", "-", text)


class Documents:
    """The repository's Markdown files, each read once, with their headings and sections."""

    def __init__(self, root: Path, files: Iterable[Path]) -> None:
        self.root = root.resolve()
        self.markdown = [f for f in files if f.suffix == ".md"]
        self._text: dict[Path, str] = {}

    def find(self, name: str, beside: Path) -> Path | None:
        """A Markdown file as a citation names it: beside the citing file, from the root, or
        under docs/."""
        for base in (beside.parent, Path(), Path("docs")):
            resolved = (self.root / base / name).resolve()
            if resolved.is_file() and resolved.is_relative_to(self.root):
                return resolved.relative_to(self.root)
        return None

    def named(self, name: str, beside: Path) -> list[Path]:
        """The file a citation names, and when the name has no folder (`README.md`) every
        file so named, since the citation may mean any of them."""
        found = self.find(name, beside)
        alike = [f for f in self.markdown if "/" not in name and f.name == name and f != found]
        return ([found] if found else []) + alike

    def text(self, path: Path) -> str:
        if path not in self._text:
            full = self.root / path
            found = full.read_text(encoding="utf-8") if full.is_file() else ""
            self._text[path] = FENCE.sub("", found)  # a `#` in a code block heads nothing
        return self._text[path]

    @functools.cache  # noqa: B019 - one Documents per run
    def sections(self, path: Path) -> frozenset[str]:
        return frozenset(SECTION_HEADING.findall(self.text(path)))

    @functools.cache  # noqa: B019
    def headings(self, path: Path) -> tuple[str, ...]:
        return tuple(h.replace("`", "").strip() for h in HEADING.findall(self.text(path)))


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def section_errors(path: Path, text: str, table: Table, docs: Documents) -> Iterator[str]:
    """The section-sign citations of one file that do not resolve."""
    own = path if path == table.bare or any(c.path == path for c in table.internal()) else None
    cited: Path | None = own or table.bare
    for ref in REF.finditer(text):
        before = text[max(0, ref.start() - 120) : ref.start()]
        number = ref.group(1)
        where = f"{path}:{_line(text, ref.start())}"
        named = next((c for c in table.named if c.before_section.search(before)), None)
        in_file = FILE_SECTION.search(before)
        unknown = LOOKS_LIKE_A_DOCUMENT.search(before)
        if named is not None:
            cited = named.path
        elif in_file is not None:
            cited = docs.find(in_file.group(2) or in_file.group(1), path)
            if cited is None:  # document_errors names the file; a run it starts is not checked
                continue
        elif CONTINUATION.search(before):
            pass  # the document of the citation it continues
        elif unknown is not None:
            cited = None  # nor is a run it starts
            yield (
                f"{where}: {unknown.group(1)} {SECTION_SIGN}{number}: a document the repository "
                f"lacks (the cited documents are listed in {TABLE_DOC})"
            )
            continue
        else:
            paragraph = text[max(0, text.rfind("\n\n", 0, ref.start())) : ref.start()]
            mentioned = [
                (m.start(), c.path) for c in table.internal() for m in c.mention.finditer(paragraph)
            ]
            cited = max(mentioned, key=lambda m: m[0])[1] if mentioned else own or table.bare
        if cited is not None and number not in docs.sections(cited):
            yield f"{where}: {SECTION_SIGN}{number} of {cited}: no such section"


def document_errors(path: Path, text: str, docs: Documents) -> Iterator[str]:
    """Markdown files named in one file that do not exist, or whose anchor or titled section
    does not. Only lines naming a `.md` file are searched (a title may be on the next line)."""
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if ".md" not in line:
            continue
        where = f"{path}:{number}"
        for mention in MD_MENTION.finditer(line):
            name, anchor = mention.groups()
            found = docs.find(name, path)
            if found is None:
                yield f"{where}: {name}: no such document in the repository"
            elif anchor and anchor[1:] not in map(slug, docs.headings(found)):
                yield f"{where}: {name}{anchor}: no such heading"
        following = lines[number] if number < len(lines) else ""
        for titled in TITLED.finditer(f"{line}\n{following}"):
            candidates = docs.named(titled.group(1), path)
            title = (titled.group(2) or titled.group(3)).replace("`", "").strip().lower()
            headings = (h.lower() for f in candidates for h in docs.headings(f))
            if (
                titled.start() < len(line)
                and candidates
                and not any(h.startswith(title) for h in headings)
            ):
                yield f'{where}: {titled.group(1)}, "{title}": no heading there begins so'


def citation_errors(root: Path, files: Iterable[Path]) -> list[str]:
    files = list(files)
    table = read_table(root)
    docs = Documents(root, files)
    errors: list[str] = []
    for path in files:
        text = (root / path).read_text(encoding="utf-8", errors="replace")
        errors.extend(section_errors(path, text, table, docs))
        errors.extend(document_errors(path, text, docs))
    return errors


def test_every_citation_in_the_repository_resolves() -> None:
    started = time.perf_counter()
    # this module names made-up documents on purpose
    files = [f for f in tracked_files(ROOT) if ROOT / f != Path(__file__).resolve()]

    errors = citation_errors(ROOT, files)

    assert errors == []
    assert len(files) > 100
    assert TABLE_DOC in files
    assert time.perf_counter() - started < 1.0


def test_a_made_up_citation_fails_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    for doc in (ROOT / "docs").glob("*.md"):
        (tmp_path / "docs" / doc.name).write_text(doc.read_text(encoding="utf-8"))
    (tmp_path / "pkg").mkdir()
    s = SECTION_SIGN
    (tmp_path / "pkg" / "module.py").write_text(
        f'"""Sessions (profile {s}5, {s}6; livekit-notes {s}2)."""\n'  # fine
        f"# the rule of design-notes {s}3\n"  # a document the repository lacks
        f"# profile {s}99 and {s}21–{s}30\n"  # sections the profile lacks
        f"# (livekit-notes {s}42)\n"
        "\n"
        f"# as {s}15 says, and A2A {s}3.6 and RFC 9110 {s}5.3\n"  # fine: bare, external
        "# see docs/nowhere.md and [the guide](../docs/protocol.md#no-such-heading)\n"
        "# (docs/protocol.md, Streaming) and (docs/protocol.md, Teleportation)\n"
    )

    errors = citation_errors(tmp_path, [Path("pkg/module.py")])

    assert errors == [
        f"pkg/module.py:2: design-notes {s}3: a document the repository lacks (the cited "
        "documents are listed in docs/profile.md)",
        f"pkg/module.py:3: {s}99 of docs/profile.md: no such section",
        f"pkg/module.py:3: {s}30 of docs/profile.md: no such section",
        f"pkg/module.py:4: {s}42 of docs/livekit.md: no such section",
        "pkg/module.py:7: docs/nowhere.md: no such document in the repository",
        "pkg/module.py:7: ../docs/protocol.md#no-such-heading: no such heading",
        'pkg/module.py:8: docs/protocol.md, "teleportation": no heading there begins so',
    ]
