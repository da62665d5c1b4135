"""The repository URL lives in one place, `_config.yml`'s `repository.url`; every other copy is derived.

    python tests/notebook_tools.py set-repository https://github.com/OWNER/REPO  # set it, rewrite every copy
    python tests/notebook_tools.py set-repository                               # rewrite every copy from _config.yml
    python tests/notebook_tools.py check-repository                             # list disagreeing copies, exit 1

Some copies cannot read _config.yml (a notebook's setup cell runs in Colab, README.md is read on GitHub,
pyproject.toml is read by pip), so they are written out, and COPIES below lists every one of them. The
GitHub Pages URL (https://OWNER.github.io/REPO/) is derived from the repository URL, never typed.
`check-repository` (and tests/test_repository_url.py) also fails on any other file (tests' example inputs
aside) that mentions the repository or its Pages site outside a listed copy, so that a new literal copy
cannot slip in unnoticed.
Edits replace only the URL inside each copy: the rest of every file, a notebook's JSON formatting and
outputs included, stays byte for byte.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY_URL = re.compile(r"https://github\.com/(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)"
                            r"/(?P<repo>[A-Za-z0-9._-]+)")


@dataclass(frozen=True)
class Copy:
    """One derived copy: in `files` (a path or glob), the group `value` of `pattern` must equal `template`."""

    files: str
    pattern: str  # a multi-line regular expression with a group named "value"
    template: str  # formatted with url, owner, repo, branch and pages
    optional_file: bool = False  # the file may be absent (another part of the project adds it)
    min_matches: int = 1  # per existing file


COPIES = (
    # the source itself (set-repository writes it)
    Copy("_config.yml", r"^repository:[ \t]*\n(?:[ \t]+.*\n)*?[ \t]+url:[ \t]*(?P<value>\S+)", "{url}"),
    # a canonical or social-card base URL, if the configuration has one
    Copy("_config.yml", r"^[ \t]*(?:baseurl|html_baseurl|ogp_site_url):[ \t]*[\"']?(?P<value>[^\"'\s#]+)",
         "{pages}", min_matches=0),
    # each chapter's setup cell, as it stands in the notebook's JSON (Colab cannot read _config.yml)
    Copy("notebooks/*.ipynb", r'"POSENC_REPOSITORY = \\"(?P<value>[^"\\]*)\\"', "{url}"),
    Copy("README.md", r"https://colab\.research\.google\.com/github/(?P<value>[^\s`<>()]+?)/notebooks/",
         "{owner}/{repo}/blob/{branch}"),
    Copy("README.md", r"is published at\s+<(?P<value>[^>\s]+)>", "{pages}"),
    Copy("book/intro.md", r"git clone (?P<value>\S+ && cd \S+)", "{url} && cd {repo}"),
    Copy("pyproject.toml", r'^Homepage = "(?P<value>[^"]*)"', "{pages}"),
    Copy("pyproject.toml", r'^Source = "(?P<value>[^"]*)"', "{url}"),
    # top level and preferred-citation (indented two spaces); the references' entries (deeper) are others'
    Copy("CITATION.cff", r"^(?:  )?repository-code:[ \t]*[\"']?(?P<value>[^\"'\s#]+)", "{url}", optional_file=True),
    Copy("CITATION.cff", r"^(?:  )?url:[ \t]*[\"']?(?P<value>[^\"'\s#]+)", "{pages}", optional_file=True),
)


def parse(url: str) -> tuple[str, str]:
    """(owner, repo) of https://github.com/OWNER/REPO; ValueError for anything else."""
    match = REPOSITORY_URL.fullmatch(url)
    if match is None or match["repo"].endswith((".git", ".")):
        raise ValueError(f"not a GitHub repository URL of the form https://github.com/OWNER/REPO: {url!r}")
    return match["owner"], match["repo"]


def pages_url(url: str) -> str:
    """GitHub Pages' address of the repository's site: https://owner.github.io/REPO/ (a user or
    organisation site, a repository named OWNER.github.io, is served at the root)."""
    owner, repo = parse(url)
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if repo.lower() == host else f"https://{host}/{repo}/"


def configured(root: Path = ROOT) -> dict[str, str]:
    """The values the templates are formatted with, from `root`'s _config.yml."""
    import yaml

    repository = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))["repository"]
    url, branch = repository["url"], repository.get("branch", "main")
    owner, repo = parse(url)
    return {"url": url, "owner": owner, "repo": repo, "branch": branch, "pages": pages_url(url)}


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")  # no newline translation: writes keep the file's bytes


def _matches(copy: Copy, text: str) -> list[re.Match]:
    return list(re.finditer(copy.pattern, text, re.MULTILINE))


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _files(copy: Copy, root: Path) -> list[Path]:
    if any(ch in copy.files for ch in "*?["):
        return sorted(root.glob(copy.files))
    return [root / copy.files]


def _project_files(root: Path) -> list[Path]:
    """Files of the project: git's tracked and untracked-but-not-ignored ones, else every file outside
    hidden and build folders."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, text=True)
    if listed.returncode == 0:
        return [root / name for name in listed.stdout.split("\0") if name and (root / name).is_file()]
    skip = {"_build", "build", "dist", "__pycache__"}
    return [p for p in root.rglob("*") if p.is_file()
            and not any(part.startswith(".") or part in skip for part in p.relative_to(root).parts[:-1])]


def check(root: Path = ROOT) -> list[str]:
    """Every copy that disagrees with _config.yml, and every unlisted mention of the repository."""
    try:
        values = configured(root)
    except ValueError as error:
        return [f"_config.yml: repository.url: {error}"]
    problems, spans = [], {}
    for copy in COPIES:
        expected = copy.template.format(**values)
        for path in _files(copy, root):
            name = path.relative_to(root).as_posix()
            if not path.is_file():
                if not copy.optional_file:
                    problems.append(f"{name}: missing (it should hold a copy of the repository URL)")
                continue
            text = _read(path)
            found = _matches(copy, text)
            if len(found) < copy.min_matches:
                problems.append(f"{name}: no copy of the repository URL found (pattern {copy.pattern!r})")
            for match in found:
                spans.setdefault(path, []).append(match.span("value"))
                if match["value"] != expected:
                    problems.append(f"{name}:{_line(text, match.start('value'))}: {match['value']!r} "
                                    f"should be {expected!r} (derived from _config.yml)")
    # any other mention of this repository or its Pages site is an unlisted copy
    owner, repo = re.escape(values["owner"]), re.escape(values["repo"])
    mention = re.compile(rf"(?<=github\.com/){owner}/{repo}(?![\w.-])|(?<=/github/){owner}/{repo}(?![\w.-])"
                         rf"|\b{owner}\.github\.io\b", re.IGNORECASE)
    for path in _project_files(root):
        if path.parent.name == "tests" and path.name.startswith("test_"):
            continue  # a test may take the URL as an example input; it is not a copy a fork must change
        try:
            text = _read(path)
        except (UnicodeDecodeError, OSError):
            continue
        for match in mention.finditer(text):
            if not any(start <= match.start() and match.end() <= end for start, end in spans.get(path, [])):
                problems.append(f"{path.relative_to(root).as_posix()}:{_line(text, match.start())}: "
                                f"{match[0]!r} is a copy of the repository URL that set-repository does not "
                                f"know: derive it, or list it in COPIES in tests/repository_url.py")
    return problems


def set_repository(url: str | None = None, root: Path = ROOT) -> list[Path]:
    """Write `url` (if given) into _config.yml, then rewrite every copy from it; return the changed files."""
    changed = []
    if url is not None:
        parse(url)
        config = root / "_config.yml"
        text = _read(config)
        (match,) = _matches(COPIES[0], text)
        if match["value"] != url:
            config.write_bytes((text[:match.start("value")] + url + text[match.end("value"):]).encode("utf-8"))
            changed.append(config)
    values = configured(root)
    for path in sorted({p for copy in COPIES for p in _files(copy, root) if p.is_file()}):
        text = new = _read(path)
        replacements = [(m.span("value"), copy.template.format(**values))
                        for copy in COPIES if path in _files(copy, root) for m in _matches(copy, text)]
        for (start, end), value in sorted(replacements, reverse=True):
            new = new[:start] + value + new[end:]
        if new != text:
            path.write_bytes(new.encode("utf-8"))
            changed.append(path)
    return sorted(changed)


def main(argv: list[str]) -> int:
    if argv[:1] == ["set-repository"] and len(argv) <= 2:
        try:
            changed = set_repository(argv[1] if len(argv) == 2 else None)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
        for path in changed:
            print(f"rewrote {path.relative_to(ROOT)}")
        values = configured()
        print(f"repository {values['url']} (branch {values['branch']}), GitHub Pages {values['pages']}: "
              f"{len(changed)} file(s) changed")
        problems = check()
    elif argv == ["check-repository"]:
        problems = check()
        if not problems:
            print(f"every copy of the repository URL agrees with _config.yml ({configured()['url']})")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
