"""What the chapters show fits the book's column (issue 16): no printed line is wider than
``posenc.tables.WIDTH`` characters (wrap a provenance line with ``posenc.tables.wrap`` or
``wrap_command``; show a table with ``posenc.tables.show``), and every HTML table is one that
``posenc.tables.show`` wrote, the same on every execution."""

import json
import re

import pytest

from notebook_tools import toc_notebooks
from posenc.tables import WIDTH

NOTEBOOKS = toc_notebooks()


def shown_text(output: dict) -> str:
    """The text a reader sees for one output: a stream, or a result shown only as plain text."""
    if output["output_type"] == "stream":
        return "".join(output.get("text", ""))
    data = output.get("data", {})
    if "text/plain" in data and not any(key.startswith(("image/", "text/html")) for key in data):
        return "".join(data["text/plain"])
    return ""


def code_cells(path):
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_printed_lines_fit_the_column(path):
    long = [line for cell in code_cells(path)[1:]  # the setup cell is folded, its output ignored
            for output in cell.get("outputs", []) for line in shown_text(output).splitlines()
            if len(line) > WIDTH]
    assert not long, f"{len(long)} printed lines over {WIDTH} characters, the first: {long[0]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_tables_are_plain_html_tables(path):
    for cell in code_cells(path):
        for output in cell.get("outputs", []):
            html = "".join(output.get("data", {}).get("text/html", ""))
            if "<table" not in html:
                continue
            assert html.startswith('<table class="dataframe">'), "show tables with posenc.tables.show"
            assert not re.search(r"\bid=|uuid|T_[0-9a-f]{5}", html), "a table with a random id"
