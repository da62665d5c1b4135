"""Chapter numbers, and the references between chapters, from one source: the order of _toc.yml.

A chapter's number is its place among the notebooks that _toc.yml lists. Its file name starts with that
number (``notebooks/06_rope.ipynb``) and so does its title ("# 6. Rotary position embedding (RoPE)").

Prose names another chapter with a link to its notebook, which reads the same in the built book, on
GitHub, in Jupyter and in Colab: ``[chapter 6](06_rope.ipynb)`` from a notebook,
``[chapter 6](../notebooks/06_rope.ipynb)`` from ``book/``; a list links each number,
``chapters [6](06_rope.ipynb) and [7](07_context_extension.ipynb)``. The build resolves every link (a
missing target is a warning, and ``make book`` fails on one); ``problems`` finds a link whose text names
another number than its target's, and a number typed after "chapter" with no link.

``python tests/notebook_tools.py renumber`` applies a new order after a chapter is added or moved in
_toc.yml: it renames the notebooks (``git mv``), rewrites their titles and every link's path and text,
maps the chapter numbers typed where a link cannot go (code cells and their outputs, posenc's and the
tests' Python), and adds a redirect from each old page to its new name (``book/redirects.json``, written
into the build by posenc_book).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from notebook_tools import toc_entries  # noqa: E402  (one reader of _toc.yml, shared with the tests)

REDIRECTS = ROOT / "book" / "redirects.json"
# Python files whose chapter numbers are examples of the grammar, not references: renumbering leaves them
GRAMMAR_EXAMPLES = ("tests/test_book_pages.py", "tests/test_chapter_refs.py")

# "chapter 6", "Chapters 1 (the mask), 4 and 6", "chapters (3-9)", "ch. 10"
_KEYWORD = re.compile(r"\b(?:chapters?|ch\.)", re.IGNORECASE)
_GAP = r"[ \t]*(?:\n[ \t]*)?"  # spaces, and at most one line break: never across a paragraph
_NUMBERS = re.compile(rf"{_GAP}(\d+)(?!\d)(?:{_GAP}(?:-|–|to){_GAP}(\d+))?(?:'s)?")
_ASIDE = re.compile(r"\s*\([^()]*\)")
_SEPARATOR = re.compile(rf"{_GAP}(?:,{_GAP}and|,|and|or){_GAP}(?=\d)")
# code, where a link cannot go: fenced code blocks, and inline code and roles ({cite}`...`); a MyST
# directive's fence (```{admonition}, ```{glossary}) holds prose, so it is not code
# (an indented line of four spaces or more is code too: a solution's code inside an admonition)
CODE = re.compile(r"^(`{3,}|~{3,})(?![`~]*\{).*?^\1|`[^`\n]*`|^(?: {4}|\t).*$", re.M | re.S)
# a markdown link to a chapter's notebook, from notebooks/, from book/ or from the repository's root
LINK = re.compile(r"\[(?P<text>[^\[\]]*)\]\((?P<folder>(?:\.\./)?(?:notebooks/)?)(?P<stem>\d+_\w+)\.ipynb"
                  r"(?P<anchor>#[^)\s]*)?\)")
# a numbered list item that opens with a link to a chapter (the intro's chapter map): "6. **[RoPE](06_rope.ipynb)**"
LIST_ITEM = re.compile(r"^(?P<indent>[ \t]*)(?P<number>\d+)\.(?=[ \t]+\*\*\[[^\[\]]*\]\((?:\.\./)?(?:notebooks/)?"
                       r"(?P<stem>\d+_\w+)\.ipynb)", re.M)


def mentions(text: str) -> list[tuple[int, int, int, int]]:
    """Every chapter number typed after "chapter(s)" or "ch.": ``(start, end, first, last)`` of each number
    or range ("13-16": first 13, last 16), where start..end spans its digits only.

    A number counts only in a list that follows the keyword; asides in parentheses after a number are
    skipped, so "Chapter 7 (Llama 3's rule)" names 7 and not 3.
    """
    found = []
    for keyword in _KEYWORD.finditer(text):
        pos = keyword.end()
        opening = re.match(r"\s*\(", text[pos:])  # "the method chapters (3-9)"
        if opening:
            pos += opening.end()
        while (match := _NUMBERS.match(text, pos)) and not _list_item(text, match):
            end = match.end(2) if match[2] else match.end(1)
            found.append((match.start(1), end, int(match[1]), int(match[2] or match[1])))
            pos = match.end()
            if aside := _ASIDE.match(text, pos):
                pos = aside.end()
            if not (separator := _SEPARATOR.match(text, pos)):
                break
            pos = separator.end()
    return found


def _list_item(text: str, match: re.Match) -> bool:
    """A number that starts a line and is followed by ". " numbers a list item, not a chapter."""
    return "\n" in text[match.start():match.start(1)] and text.startswith(". ", match.end(1))


def chapter_numbers(text: str) -> set[int]:
    """The chapter numbers a sentence names, typed or linked: "Chapters 1 (the mask), 4 and 6",
    "chapters (3-9)", "[chapter 6](06_rope.ipynb)", "chapters [6](06_rope.ipynb) and [7](...)"."""
    visible = LINK.sub(lambda m: m["text"], text)
    return {n for _, _, first, last in mentions(visible) for n in range(first, last + 1)}


def numbers(root: Path = ROOT) -> dict[str, int]:
    """``{stem: number}`` for the chapters: the notebooks _toc.yml lists, numbered in its order."""
    names = [name for name in _toc(root) if (root / f"{name}.ipynb").exists()]
    return {name.split("/")[-1]: i for i, name in enumerate(names, start=1)}


def _link_numbers(text: str) -> list[int]:
    """The chapter numbers a link's text names: all of it ("6"), or after the word ("chapter 6's");
    not the 2 of "Learned and 2D encodings"."""
    if text.strip().isdigit():
        return [int(text)]
    return [first for _, _, first, _ in mentions(text)]


def _set_link_number(text: str, number: int) -> str:
    if text.strip().isdigit():
        return text.replace(text.strip(), str(number))
    for start, end, _, _ in reversed(mentions(text)):
        text = text[:start] + str(number) + text[end:]
    return text


def _toc(root: Path) -> list[str]:
    return [name for name, _ in toc_entries(root) if name.startswith("notebooks/")]


def problems(text: str, chapters: dict[str, int]) -> list[str]:
    """What is wrong with the chapter references of ``text`` (markdown), given ``{stem: number}``: a link
    to a notebook that is no chapter, a link whose text names a number other than its target's, and a
    chapter number typed with no link (a list of links may hold no typed number either)."""
    text = CODE.sub(lambda m: re.sub(r"\S", "x", m[0]), text)  # code keeps its typed numbers
    found = []
    for link in LINK.finditer(text):
        target = chapters.get(link["stem"])
        if target is None:
            found.append(f"{link[0]!r}: {link['stem']}.ipynb is not a chapter in _toc.yml")
        elif any(n != target for n in _link_numbers(link["text"])):
            found.append(f"{link[0]!r}: the link's text names another number than chapter {target}")
    for item in LIST_ITEM.finditer(text):
        if item["stem"] in chapters and int(item["number"]) != chapters[item["stem"]]:
            found.append(f"list item {item['number']}. links chapter {chapters[item['stem']]} ({item['stem']})")
    masked = LINK.sub(lambda m: _set_link_number(m["text"], 0), text)  # linked numbers read as 0
    for start, end, first, _ in mentions(masked):
        if first != 0:
            line = masked[:start].count("\n") + 1
            found.append(f"line {line}: {masked[max(0, start - 30):end + 10]!r} types a chapter number with no link")
    return found


def _markdown_sources() -> list[tuple[Path, list[dict] | None]]:
    """(path, cells) of every notebook in notebooks/, and (path, None) of the book's markdown pages and
    the README; the changelog is history, written with the numbers of its day (its renumbering entry maps
    them)."""
    pages = [p for p in sorted((ROOT / "book").glob("*.md")) if p.name != "changelog.md"] + [ROOT / "README.md"]
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    return [(p, json.loads(p.read_text())["cells"]) for p in notebooks] + [(p, None) for p in pages]


def all_problems(chapters: dict[str, int] | None = None) -> dict[str, list[str]]:
    """``problems`` of every notebook's markdown cells, the book's pages and the README, by file."""
    chapters = numbers() if chapters is None else chapters
    out = {}
    for path, cells in _markdown_sources():
        texts = [path.read_text()] if cells is None else \
            ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
        found = [p for text in texts for p in problems(text, chapters)]
        if found:
            out[str(path.relative_to(ROOT))] = found
    return out


# ---- renumbering -----------------------------------------------------------------------------------------

def relink(text: str, chapters: dict[str, int], renamed: dict[str, str]) -> str:
    """``text`` with every chapter link's stem renamed (``renamed``: old stem -> new), the numbers in its
    text set to the target's, and a numbered list item that opens with a chapter link numbered as it."""
    def fix(link):
        stem = renamed.get(link["stem"], link["stem"])
        label = _set_link_number(link["text"], chapters[stem]) if stem in chapters else link["text"]
        return f"[{label}]({link['folder']}{stem}.ipynb{link['anchor'] or ''})"

    def number_item(item):
        stem = renamed.get(item["stem"], item["stem"])
        return f"{item['indent']}{chapters[stem]}." if stem in chapters else item[0]
    return LIST_ITEM.sub(number_item, LINK.sub(fix, text))


def map_typed(text: str, mapping: dict[int, int]) -> str:
    """``text`` with every typed chapter number mapped (old -> new), where a link cannot go: code, comments,
    outputs, Python docstrings. A range is mapped only where it stays a range of the same length."""
    pieces, pos = [], 0
    for start, end, first, last in mentions(text):
        new_first, new_last = mapping.get(first, first), mapping.get(last, last)
        if new_last - new_first != last - first:
            raise ValueError(f"the range {text[start:end]!r} is no range after renumbering: write the chapters out")
        new_numbers = iter([new_first, new_last])
        pieces += [text[pos:start], re.sub(r"\d+", lambda _: str(next(new_numbers)), text[start:end])]
        pos = end
    return "".join(pieces) + text[pos:]


def _git_mv(old: Path, new: Path) -> None:
    subprocess.run(["git", "mv", str(old), str(new)], cwd=old.parent, check=True)


def renumber(root: Path = ROOT) -> dict[str, str]:
    """Apply _toc.yml's order: rename, retitle, relink and remap every chapter; return old stem -> new."""
    order = [name.split("/")[-1] for name in _toc(root)]
    renamed, mapping = {}, {}
    for i, stem in enumerate(order, start=1):
        old_number, slug = stem.split("_", 1)
        new = f"{i:02d}_{slug}"
        mapping[int(old_number)] = i
        if new != stem:
            renamed[stem] = new
    chapters = {renamed.get(s, s): i for i, s in enumerate(order, start=1)}
    tracked = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True, text=True).stdout.split()
    rewritten = {}  # every new text first: a range that breaks stops the renumbering before any change
    for name in tracked:
        path = root / name
        if path.suffix not in (".ipynb", ".md", ".py", ".yml", ".cfg", ".toml", ".txt", "") or not path.is_file():
            continue
        text = new_text = path.read_text()
        for old, new in renamed.items():  # paths and docnames: _toc.yml, tests, links
            new_text = re.sub(rf"\b{old}\b", new, new_text)
        if path.suffix == ".ipynb":
            new_text = _renumber_notebook(new_text, chapters, mapping, renamed.get(path.stem, path.stem))
        elif path.suffix == ".md" and path.name not in ("CHANGELOG.md", "changelog.md"):
            new_text = relink(new_text, chapters, {})
        elif path.suffix == ".py" and not name.startswith("book/_ext/") and name not in GRAMMAR_EXAMPLES:
            try:
                new_text = map_typed(new_text, mapping)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        if new_text != text:
            rewritten[path] = new_text
    for path, text in rewritten.items():
        path.write_text(text)
    for old, new in renamed.items():
        _git_mv(root / "notebooks" / f"{old}.ipynb", root / "notebooks" / f"{new}.ipynb")
    _add_redirects(root, renamed)
    return renamed


def _renumber_notebook(text: str, chapters: dict[str, int], mapping: dict[int, int], stem: str) -> str:
    notebook = json.loads(text)
    before = json.dumps(notebook)
    titled = stem not in chapters
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            source = relink(source, chapters, {})
            if not titled:  # the first heading: "# 6. Rotary position embedding (RoPE)"
                source, titled = re.subn(r"^# \d+\. ", f"# {chapters[stem]}. ", source, count=1, flags=re.M)
        else:
            source = map_typed(source, mapping)
            for output in cell.get("outputs", []):
                if "text" in output:  # a stream's text
                    output["text"] = _lines(map_typed("".join(output["text"]), mapping))
                for mime, value in output.get("data", {}).items():
                    if mime.startswith("text/"):
                        output["data"][mime] = _lines(map_typed("".join(value), mapping))
        cell["source"] = _lines(source)
    if json.dumps(notebook) == before:
        return text  # unchanged: keep the file byte for byte
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _add_redirects(root: Path, renamed: dict[str, str]) -> None:
    """Old docname -> current docname, chained through earlier renames; none from a page that exists now."""
    path = root / REDIRECTS.relative_to(ROOT)
    redirects = json.loads(path.read_text()) if path.exists() else {}
    full = {f"notebooks/{old}": f"notebooks/{new}" for old, new in renamed.items()}
    redirects = {old: full.get(new, new) for old, new in redirects.items()}
    redirects.update(full)
    current = set(_toc(root))
    redirects = {old: new for old, new in sorted(redirects.items()) if old not in current}
    path.write_text(json.dumps(redirects, indent=1) + "\n")
