"""posenc.tables and rows_frame: the chapters' results tables (cells checked against hand-written ones)
and wrapped provenance lines."""

import shlex
import subprocess
import sys

import pytest

pd = pytest.importorskip("pandas")

from posenc.studies.common import rows_frame  # noqa: E402
from posenc.tables import MISSING, WIDTH, cell, frame, table_bundle, wrap, wrap_command  # noqa: E402


def test_cell_formats_keeps_strings_and_marks_missing():
    assert cell(3.14159, ".2f") == "3.14"
    assert cell(0.0625, ".1%") == "6.2%"
    assert cell(12288, ",") == "12,288"
    assert cell("bias on scores", ".2f") == "bias on scores"
    assert cell(None, ".2f") == MISSING == "--"
    assert cell(2.5, lambda v: f"x{v:g}") == "x2.5"


def test_frame_rows_columns_and_cells():
    table = frame({"rope": {"L": 3.7621, "16L": 31.8}, "learned": {"L": 4.0849}, "alibi": {"16L": 3.93}},
                  ".2f", corner="method")
    assert list(table.index) == ["rope", "learned", "alibi"]
    assert list(table.columns) == ["L", "16L"]  # in order of first appearance
    assert table.columns.name == "method" and table.index.name is None
    assert table.values.tolist() == [["3.76", "31.80"], ["4.08", "--"], ["--", "3.93"]]
    chosen = frame({"rope": {"L": 1.0, "16L": 2.0}}, ".1f", columns=["16L"])
    assert chosen.values.tolist() == [["2.0"]]


def test_frame_with_two_index_levels():
    table = frame({("Gemma 3", "local"): {"base": 1e4}, ("Gemma 3", "global"): {"base": 1e6},
                   ("Llama 3.1", "all"): {"base": 5e5}}, ".3g", index_names=["model", "layer"])
    assert table.index.nlevels == 2 and list(table.index.names) == ["model", "layer"]
    words = [line.split() for line in table.to_string().split("\n")]  # pandas decides the spacing
    assert words == [["base"], ["model", "layer"], ["Gemma", "3", "local", "1e+04"], ["global", "1e+06"],
                     ["Llama", "3.1", "all", "5e+05"]]
    assert '<th rowspan="2" valign="top">Gemma 3</th>' in table_bundle(table)["text/html"]


def test_frame_with_two_header_rows():
    table = frame({"sinusoidal": {("length 32", "accuracy"): "100%", ("length 32", "w(i-1)"): "0.98",
                                  ("length 64", "accuracy"): "44%"}}, corner="encoding")
    assert table.columns.nlevels == 2 and table.columns.names[0] == "encoding"
    html = table_bundle(table)["text/html"]
    assert '<th colspan="2" halign="left">length 32</th>' in html and "<th>w(i-1)</th>" in html
    assert table.loc["sinusoidal", ("length 64", "accuracy")] == "44%"


def test_rows_frame_cells_are_intervals():
    rows = {"none": {128: (7.0412, 6.7049, 7.3891), 2048: (11.876, 11.581, 12.1749)},
            "learned": {128: (4.0812, 4.05, 4.1123), 2048: None},
            "one seed": {128: (5.3, 5.3, 5.3), 2048: (5.333, 5.333, 5.333)}}
    table = rows_frame(rows)
    nbsp = "\u00a0"  # inside the brackets: a narrow column breaks a cell only after the mean
    assert table.values.tolist() == [[f"7.04 [6.70,{nbsp}7.39]", f"11.88 [11.58,{nbsp}12.17]"],
                                     [f"4.08 [4.05,{nbsp}4.11]", "--"],
                                     ["5.30", "5.33"]]
    assert list(table.columns) == [128, 2048]
    three = rows_frame({"alibi": {"256": (0.0024, 0.0012, 0.0036)}}, digits=3, corner="length")
    assert three.values.tolist() == [[f"0.002 [0.001,{nbsp}0.004]"]] and three.columns.name == "length"


def test_table_bundle_html_and_text():
    table = frame({"rope": {"L": 3.7621, "16L": 31.8}, "learned": {"L": 4.08, "16L": None}},
                  ".2f", corner="method")
    bundle = table_bundle(table)
    assert set(bundle) == {"text/html", "text/plain"}
    assert bundle["text/plain"] == ("method      L    16L\n"
                                    "rope     3.76  31.80\n"
                                    "learned  4.08     --")
    html = bundle["text/html"]
    assert html.startswith("<table") and html.rstrip().endswith("</table>")
    for piece in ("<th>method</th>", "<th>16L</th>", "<th>learned</th>", "<td>3.76</td>", "<td>--</td>"):
        assert piece in html, piece
    # nothing that changes from one execution to the next (nbval compares both)
    assert "id=" not in html and "uuid" not in html and " at 0x" not in bundle["text/plain"]
    assert table_bundle(frame({"rope": {"L": 3.7621, "16L": 31.8}, "learned": {"L": 4.08, "16L": None}},
                              ".2f", corner="method")) == bundle


def test_table_bundle_keeps_long_cells_whole():
    long_text = "nearly every open LLM since 2023: Llama 2-4, Qwen, DeepSeek, Gemma, Phi, Mistral, gpt-oss"
    bundle = table_bundle(frame({"rope": {"used by": long_text}}))
    assert f"<td>{long_text}</td>" in bundle["text/html"]  # pandas would cut it at 50 characters
    assert long_text in bundle["text/plain"] and "..." not in bundle["text/plain"]


def test_wrap_breaks_between_words():
    text = ("produced: posenc 0.1.0, torch 2.13.0+cpu, Python 3.11.7, cpu, 1 thread; seeds [0, 1, 2, 3, 4]; "
            "1.8 hours of runs in 2 parallel parts")
    wrapped = wrap(text)
    lines = wrapped.split("\n")
    assert len(lines) == 2 and all(len(line) <= WIDTH for line in lines)
    assert lines[1].startswith("  ") and " ".join(wrapped.split()) == text
    assert wrap("short line") == "short line"


COMMAND = ("python -m posenc.experiments head_to_head --preset hybrid "
           "--methods 'chunked RoPE + NoPE with temperature' --out /tmp/r/hybrid_5.json --resume --threads 1")


def test_wrap_command_by_hand():
    assert wrap_command(COMMAND, width=90) == (
        "python -m posenc.experiments head_to_head --preset hybrid \\\n"
        "    --methods 'chunked RoPE + NoPE with temperature' --out /tmp/r/hybrid_5.json --resume \\\n"
        "    --threads 1")
    assert wrap_command("python -m posenc.experiments merge a.json b.json --out c.json") == (
        "python -m posenc.experiments merge a.json b.json --out c.json")  # short: unchanged
    merge = ("python -m posenc.experiments merge /tmp/r/images_13.json /tmp/r/images_14.json "
             "/tmp/r/images_15.json --out images.json")
    assert wrap_command(merge, width=80) == (  # "-m ... merge FILES" is longer than a line: it fills lines
        "python -m posenc.experiments merge /tmp/r/images_13.json /tmp/r/images_14.json \\\n"
        "    /tmp/r/images_15.json --out images.json")


@pytest.mark.parametrize("width", [60, 80, 100])
def test_wrap_command_pastes_as_the_same_command(width):
    merged = COMMAND + " + " + ("python -m posenc.experiments context_extension --preset full --seeds 3 4 "
                                "--threads 1 --out /work/runs/ce_part_34.json --checkpoints /work/runs/ce_ckpt")
    wrapped = wrap_command(merged, width=width, indent="  ")
    lines = wrapped.split("\n")
    assert all(len(line) <= width for line in lines), lines
    commands = wrapped.replace(" \\\n", " ").split("\n")  # what a shell reads
    assert [shlex.split(c) for c in commands] == [shlex.split(c) for c in merged.split(" + python ", 1)[:1]] + [
        shlex.split("python " + merged.split(" + python ", 1)[1])]
    for line in lines:  # an option's value is never left at the end of the line before it
        assert not line.rstrip(" \\").endswith(("--out", "--methods", "--seeds", "--threads"))


def test_import_posenc_does_not_need_pandas():
    code = "import sys, posenc, posenc.tables, posenc.experiments; print('pandas' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_bench_rows_as_cells_and_notes():
    from posenc import bench

    row = {"operation": "causal ALiBi attention", "baseline": "SDPA causal, no bias",
           "alternative": "SDPA + materialised ALiBi bias",
           "seconds": {"SDPA causal, no bias": 0.149, "SDPA + materialised ALiBi bias": 0.30865,
                       "posenc alibi_attention": 0.20869},
           "max_abs_error_vs_materialised": 4.6e-05,
           "peak_memory_bytes": {"2048": {"SDPA causal, no bias": 18 * 2**20, "posenc alibi_attention": 32 * 2**20}}}
    assert bench.row_cells(row) == {
        "SDPA causal, no bias": {"ms": "149.00", "x baseline": "1.00", "note": "baseline"},
        "SDPA + materialised ALiBi bias": {"ms": "308.65", "x baseline": "2.07", "note": ""},
        "posenc alibi_attention": {"ms": "208.69", "x baseline": "1.40", "note": "1.5x faster than the alternative"}}
    assert bench.row_notes(row) == [
        "max |difference| vs the materialised bias: 4.6e-05",
        "peak memory growth at T=2048: SDPA causal, no bias 18 MiB, posenc alibi_attention 32 MiB"]
    result = {"environment": {"posenc": "0.2.0", "torch": "2.13.0+cpu", "python": "3.11.7", "processor": "x86_64",
                              "cpu_count": 2, "torch_threads": 2}, "rows": [row]}
    assert bench.environment_line(result) == ("posenc 0.2.0, torch 2.13.0+cpu, Python 3.11.7, x86_64, 2 CPUs, "
                                              "2 torch threads, allocator: as the process found it")
    text = bench.format_table(result).split("\n")
    assert text[2] == "causal ALiBi attention"
    assert text[3] == "  SDPA causal, no bias" + " " * 27 + "   149.00 ms  x 1.00  baseline"
    assert text[-1] == "  peak memory growth at T=2048: SDPA causal, no bias 18 MiB, posenc alibi_attention 32 MiB"
