"""``python -m posenc.bench`` runs end to end on tiny sizes and reports what it claims (not timed)."""

import json
import subprocess
import sys

import pytest
import torch

from posenc import bench


def test_bench_tiny_runs_and_reports_every_operation(tmp_path, capsys):
    out = tmp_path / "bench.json"
    bench.main(["--size", "tiny", "--json", str(out), "--threads", "1"])
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    operations = [row["operation"] for row in result["rows"]]
    assert len(operations) == 10 and all(op in printed for op in operations)
    rope_rows, partial_rows = result["rows"][:2], result["rows"][2:4]
    alibi_row, window_row, sink_row, curve_row, layer_row, train_row = result["rows"][4:]
    for row in rope_rows:
        assert set(row["seconds"]) == {"copy (q.clone())", "rotate_half formula", "posenc apply_rope"}
    for row, rotary_dim in zip(partial_rows, (2, 4)):  # head_dim 8 at the tiny size: a quarter, a half
        assert f"rotary_dim {rotary_dim} of 8" in row["operation"]
        assert set(row["seconds"]) == {"copy (q.clone())", row["alternative"], "posenc apply_rope"}
        assert row["alternative"] == f"cat(rope_formula(q[..., :{rotary_dim}]), q[..., {rotary_dim}:])"
    for row in rope_rows + partial_rows:
        assert row["max_abs_error_vs_float64"]["posenc apply_rope"] < 1e-6
    assert alibi_row["max_abs_error_vs_materialised"] < 1e-5
    assert set(alibi_row["peak_memory_bytes"]) == {"32", "64"}
    assert all(value >= 0 for peaks in alibi_row["peak_memory_bytes"].values() for value in peaks.values())
    # FlexAttention's rows only where it has a compiled kernel (not on a CPU without AVX2, nor in make
    # test-portable, which sets ATEN_CPU_CAPABILITY=default)
    compiled = bench._has_compiler()
    extra = {"window": {bench.BLOCK_SPARSE}, "sink": {bench.BLOCK_SPARSE, "posenc block_sparse, causal, no sinks"}}
    extra = extra if compiled else {"window": set(), "sink": set()}
    for row, posenc_name, kind in ((window_row, "posenc window mask + SDPA", "window"),
                                   (sink_row, "posenc sink_attention", "sink")):
        assert row["baseline"] == "SDPA causal (full, no sinks)" and row["alternative"].startswith("eager")
        assert set(row["seconds"]) == {row["baseline"], row["alternative"], posenc_name} | extra[kind]
        assert row["max_abs_error_vs_float64"][posenc_name] < 1e-6
    assert ({"block_sparse window", "block_sparse chunk"} <= set(curve_row["seconds"])) == compiled
    assert curve_row["seq"] == 64
    assert layer_row["baseline"] == "layer, full causal" and len(layer_row["seconds"]) == 3
    goals = {goal["goal"]: goal for goal in result["goals"]}
    assert len(goals) == len(bench.GOALS) and "goals (ratio measured" in printed
    sinks = goals["sinks, x the same attention without sinks"]  # measured at every size: ratio of two rows
    if compiled:
        expected = sink_row["seconds"][bench.BLOCK_SPARSE] / sink_row["seconds"]["posenc block_sparse, causal, no sinks"]
        assert sinks["ratio"] == pytest.approx(expected) and sinks["met"] == (expected <= 1.2)
    else:
        assert sinks["ratio"] is None
    assert goals["sliding window 128 at T=8192, x full causal SDPA"]["ratio"] is None  # not at this size
    assert "window 8" in window_row["operation"]
    assert len(train_row["seconds"]) == 6 and all(s > 0 for s in train_row["seconds"].values())
    assert result["environment"]["torch_threads"] == 1


def test_eager_formulations_the_bench_times_against_are_right():
    # the alternatives are the reader's formulas; check them against values worked out by hand in float64
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    sinks = torch.tensor([0.5, -1.0], dtype=torch.float64)
    visible = torch.ones(5, 5, dtype=torch.bool).tril() & ~torch.ones(5, 5, dtype=torch.bool).tril(-2)  # window 2
    scores = q @ k.transpose(-2, -1) / 2.0  # head_dim 4
    for head in range(2):
        for i in range(5):
            logits = [scores[0, head, i, j].item() for j in range(5) if visible[i, j]]
            weights = torch.tensor(logits + [sinks[head].item()], dtype=torch.float64).softmax(0)[:-1]
            keys = [j for j in range(5) if visible[i, j]]
            want = sum(w * v[0, head, j] for w, j in zip(weights, keys))
            got = bench._eager_attention(q, k, v, visible, sinks)[0, head, i]
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    plain = bench._eager_attention(q, k, v, visible)
    torch.testing.assert_close(plain, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible),
                               rtol=0, atol=1e-12)


def test_pin_fresh_pages_runs_in_a_fresh_process():
    # it lasts for the whole process, so try it in a child: applied on Linux, reported in the environment
    code = ("from posenc import bench; applied = bench.pin_fresh_pages(); "
            "print(applied, bench.environment()['allocator'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    if sys.platform.startswith("linux"):
        assert done.stdout.strip() == "True fresh pages above 128 KiB (pinned)"


def test_peak_memory_probe_sees_a_quadratic_bias():
    # 8 heads x 1024 x 1024 float32 = 32 MiB of bias: the probe must see at least that for the
    # materialised variant, and far less for the fused one
    materialised = bench.peak_memory_bytes("SDPA + materialised ALiBi bias", 8, 1024, 16)
    fused = bench.peak_memory_bytes("posenc alibi_attention", 8, 1024, 16)
    assert materialised >= 32 * 2**20 > 4 * fused


def test_unknown_size_is_a_clear_error():
    with pytest.raises(ValueError, match="size must be one of"):
        bench.run("huge")


def _curve_row(seq, seconds, excluded=()):
    row = {"operation": f"mask cost curve: window / chunk 128, 8 heads, T={seq}, head_dim 64, fp32",
           "seconds": seconds, "baseline": "SDPA causal (full, no sinks)", "alternative": None, "seq": seq}
    return {**row, "excluded": {name: "ran uncompiled" for name in excluded}} if excluded else row


def test_cost_curves_and_goals_leave_out_what_ran_another_kernel():
    full, window = "SDPA causal (full, no sinks)", "block_sparse window"
    result = {"rows": [{"operation": "apply_rope half-split", "seconds": {"copy": 1.0}},
                       _curve_row(2048, {full: 4.0, window: 1.0}),
                       _curve_row(8192, {full: 64.0, window: 32.0}, excluded=[window])]}
    assert bench.cost_curves(result) == {full: {2048: 4.0, 8192: 64.0}, window: {2048: 1.0}}
    goals = {goal["goal"]: goal for goal in bench.goals(result)}
    at_2048 = goals["sliding window 128 at T=2048, x full causal SDPA"]
    assert at_2048["ratio"] == 0.25 and at_2048["met"] is True  # 1 / 4, at most 0.5
    at_8192 = goals["sliding window 128 at T=8192, x full causal SDPA"]
    assert at_8192["ratio"] is None and at_8192["met"] is None  # the excluded 0.5 is not a measurement


def test_committed_records_mark_the_gpu_rows_that_ran_uncompiled():
    from importlib import resources

    gpu = json.loads(resources.files("posenc").joinpath("results/bench_cuda_bf16.json").read_text())
    curves = bench.cost_curves(gpu)
    assert set(curves["block_sparse chunk"]) == {2048, 4096}  # 21 ms at 8,192: FlexAttention uncompiled
    assert set(curves["block_sparse window"]) == {2048, 4096, 8192}
    assert [goal["ratio"] for goal in gpu["goals"]] == [goal["ratio"] for goal in bench.goals(gpu)]


def test_cost_curve_plot_draws_each_variant_in_ms_with_guides_through_the_first_point():
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    from posenc.plot import cost_curves

    fig, ax = plt.subplots()
    cost_curves(ax, {"full": {4096: 0.016, 2048: 0.004}, "window": {2048: 0.001, 4096: 0.002}})
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["full"].get_xdata()) == [2048, 4096] and list(lines["full"].get_ydata()) == [4.0, 16.0]
    assert list(lines["window"].get_ydata()) == [1.0, 2.0]
    assert list(lines["~ T^2"].get_ydata()) == [4.0, 16.0] and list(lines["~ T"].get_ydata()) == [4.0, 8.0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and ax.get_ylabel() == "ms per call"
    plt.close(fig)
