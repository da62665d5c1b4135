"""``python -m posenc.bench`` runs end to end on tiny sizes and reports what it claims (not timed)."""

import json

import pytest

from posenc import bench


def test_bench_tiny_runs_and_reports_every_operation(tmp_path, capsys):
    out = tmp_path / "bench.json"
    bench.main(["--size", "tiny", "--json", str(out), "--threads", "1"])
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    operations = [row["operation"] for row in result["rows"]]
    assert len(operations) == 4 and all(op in printed for op in operations)
    rope_rows, alibi_row, train_row = result["rows"][:2], result["rows"][2], result["rows"][3]
    for row in rope_rows:
        assert set(row["seconds"]) == {"copy (q.clone())", "rotate_half formula", "posenc apply_rope"}
        assert row["max_abs_error_vs_float64"]["posenc apply_rope"] < 1e-6
    assert alibi_row["max_abs_error_vs_materialised"] < 1e-5
    assert set(alibi_row["peak_memory_bytes"]) == {"32", "64"}
    assert all(value >= 0 for peaks in alibi_row["peak_memory_bytes"].values() for value in peaks.values())
    assert len(train_row["seconds"]) == 6 and all(s > 0 for s in train_row["seconds"].values())
    assert result["environment"]["torch_threads"] == 1


def test_peak_memory_probe_sees_a_quadratic_bias():
    # 8 heads x 1024 x 1024 float32 = 32 MiB of bias: the probe must see at least that for the
    # materialised variant, and far less for the fused one
    materialised = bench.peak_memory_bytes("SDPA + materialised ALiBi bias", 8, 1024, 16)
    fused = bench.peak_memory_bytes("posenc alibi_attention", 8, 1024, 16)
    assert materialised >= 32 * 2**20 > 4 * fused


def test_unknown_size_is_a_clear_error():
    with pytest.raises(ValueError, match="size must be one of"):
        bench.run("huge")
