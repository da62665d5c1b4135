"""The chapters' results tables and provenance lines, shaped to fit the book's column.

A results table is a pandas ``DataFrame`` of ready-formatted cells (strings, so every number is
rounded exactly as the chapter chose): ``frame`` builds one from ``{row: {column: value}}``, and
``show`` displays it as an HTML table (text for a terminal), with nothing truncated. Provenance
lines (the command that produced a result, package versions, corpus hashes) are wrapped to
``WIDTH`` characters: ``wrap_command`` breaks a shell command between arguments with `` \\``
continuations, so that it can still be pasted into a shell; ``wrap`` breaks prose.

pandas is imported inside the functions that need it: ``import posenc`` does not need it.

    >>> table = frame({"rope": {"L": 3.7621, "16L": 31.8}, "learned": {"L": 4.08, "16L": None}},
    ...               ".2f", corner="method")
    >>> print(table.to_string())
    method      L    16L
    rope     3.76  31.80
    learned  4.08     --
"""

from __future__ import annotations

import re
import textwrap

WIDTH = 100  # characters of printed output that fit the book's column without a scroll bar
MISSING = "--"  # the cell of a value that does not exist (a learned table beyond its length, say)


def cell(value, fmt="") -> str:
    """One table cell: ``value`` formatted with ``fmt`` (a format spec such as ``".2f"``, or a function
    of the value returning a string); strings are kept as they are, ``None`` becomes ``MISSING``."""
    if value is None:
        return MISSING
    if isinstance(value, str):
        return value
    return fmt(value) if callable(fmt) else format(value, fmt)


def frame(rows: dict, fmt="", *, corner: str | None = None, columns: list | None = None,
          index_names: list | None = None):
    """A ``pandas.DataFrame`` of formatted cells from ``{row label: {column label: value}}``.

    Rows keep the dict's order; columns are ``columns`` or every label in order of first appearance; a
    row without a column gets ``MISSING``. Cells go through ``cell(value, fmt)``. ``corner`` names the
    columns (shown above the row labels). The row labels are the index, unnamed; tuples as row labels
    make one index level per element (a model and its layer, say), named by ``index_names``, and tuples
    as column labels make a header of several rows (``("length 32", "accuracy")``, say).
    """
    import pandas as pd

    if columns is None:
        columns = list(dict.fromkeys(label for values in rows.values() for label in values))
    data = [[cell(values.get(label), fmt) for label in columns] for values in rows.values()]
    table = pd.DataFrame(data, index=_index(list(rows)), columns=_index(columns), dtype=object)
    if table.columns.nlevels == 1:
        table.columns.name = corner
    else:
        table.columns.names = [corner] + [None] * (table.columns.nlevels - 1)
    if index_names is not None:
        table.index.names = index_names
    return table


def _index(labels: list):
    """Labels as a pandas index: tuples of labels make one level per element (a ``MultiIndex``)."""
    import pandas as pd

    if labels and all(isinstance(label, tuple) for label in labels):
        return pd.MultiIndex.from_tuples(labels)
    return pd.Index(labels, dtype=object)


def table_bundle(table) -> dict:
    """The ``{mime type: text}`` that ``show`` displays: ``text/html`` (a plain ``<table>``, no
    ids, nothing truncated) and ``text/plain`` (aligned text, wrapped at ``WIDTH``). Both depend on
    the table only, so a re-executed notebook reproduces them exactly."""
    html = table.to_html(border=0, na_rep=MISSING)
    plain = table.to_string(na_rep=MISSING, line_width=WIDTH)
    return {"text/html": html, "text/plain": plain}


def show(table) -> None:
    """Display ``table`` (a ``DataFrame``) in a notebook: an HTML table in the book and in Jupyter, the
    aligned text where HTML is not shown."""
    from IPython.display import display

    display(table_bundle(table), raw=True)


def wrap(text: str, width: int = WIDTH, indent: str = "  ") -> str:
    """``text`` broken between words into lines of at most ``width`` characters (a word longer than
    that stays whole); lines after the first are indented by ``indent``."""
    return textwrap.fill(text, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


# a shell word: unquoted characters and quoted strings, glued together
_SHELL_WORD = re.compile(r"""(?:[^\s'"]+|'[^']*'|"(?:\\.|[^"\\])*")+""")


def wrap_command(command: str, width: int = WIDTH, indent: str = "") -> str:
    """A shell command broken into lines of at most ``width`` characters, each line but the last ending
    in `` \\`` and the continuation lines indented four more spaces than ``indent``, so that the text
    pastes into a shell as one command. Lines break before an option (``--out``), keeping it with its
    values where they fit, and never inside a quoted word. Several commands joined by `` + `` (a result
    record merged from parts) come out one after the other.
    """
    lines = []
    for part in re.split(r" \+ (?=python )", command.strip()):
        groups = []  # the words up to the first option, then each option with its values
        for word in _SHELL_WORD.findall(part):
            if word.startswith("-") or not groups:
                groups.append([word])
            else:
                groups[-1].append(word)
        line = indent + " ".join(groups[0])
        for group in groups[1:]:
            text = " ".join(group)
            if len(line) + len(text) + 3 <= width:  # room for " text" and the " \\" after it
                line += " " + text
            elif len(indent) + 4 + len(text) + 2 <= width:  # the option starts the next line
                lines.append(line + " \\")
                line = indent + "    " + text
            else:  # longer than a line: its words fill this line and the next ones
                for word in group:
                    if len(line) + len(word) + 3 > width:
                        lines.append(line + " \\")
                        line = indent + "    " + word
                    else:
                        line += " " + word
        lines.append(line)
    return "\n".join(lines)
