"""The rebuilt studies (chapters 7 and 10): what they record, and the invariants a record must satisfy.
Expected values are by-hand facts (no scaling at L is the model itself; dynamic NTK does nothing up to
L; the sweep picks the lowest perplexity), not outputs of the code under test."""

import math

import pytest

from posenc.experiments import PRESETS, run_study
from posenc.studies import context_extension, head_to_head
from posenc.studies.context_extension import band_counts, effective_factor, extension_recipe


def test_effective_factors_by_hand():
    assert effective_factor("dynamic NTK", 4, 2048, 512) == 4.0  # s = n / L
    assert effective_factor("dynamic NTK", 4, 256, 512) == 1.0
    assert effective_factor("dynamic NTK, fixed s", 4, 2048, 512) == 13.0  # 4 * 4 - 3 (the review's M2)
    assert effective_factor("dynamic NTK, fixed s", 4, 1024, 512) == 5.0
    assert effective_factor("dynamic NTK, fixed s", 4, 512, 512) == 1.0
    assert effective_factor("YaRN", 4, 512, 512) == 4.0 and effective_factor("none", 4, 2048, 512) == 1.0
    assert extension_recipe("dynamic NTK", 4, 512)["factor"] == 1.0
    assert extension_recipe("YaRN, t = 1", 4, 512)["attention_factor"] == 1.0
    with pytest.raises(ValueError, match="recipe must be one of"):
        extension_recipe("NTK-by-parts", 2.0, 128)


def test_band_counts_of_the_old_model_and_a_llama_2_head():
    # the review computed the old chapter 7 head (d 24, base 1e4, L 128): YaRN ratios
    # [1, .81, .63, .44, .25 x 8]; Llama 3's rule keeps 3 pairs, blends 1 and divides 8
    old = band_counts(24, 10000.0, 128)
    assert old["YaRN"] == {"kept": 1, "ramped": 3, "interpolated": 8}
    assert old["Llama 3"] == {"kept": 3, "ramped": 1, "interpolated": 8}
    assert old["wavelength > L"] == 8
    # a Llama 2 head (d 128, base 1e4, L 4096): wavelength 2 pi 1e4^(2i/128) > 4096 for i >= 46
    llama = band_counts(128, 10000.0, 4096)
    assert llama["wavelength > L"] == sum(2 * math.pi * 1e4 ** (2 * i / 128) > 4096 for i in range(64)) == 18
    assert llama["YaRN"]["interpolated"] == 18


def test_context_extension_tiny_records_every_recipe_and_control(tmp_path):
    record = run_study("context_extension", "tiny", tmp_path / "ce.json", log=lambda *a: None)
    (run,) = record["runs"]
    config = record["config"]
    L, bin_size = config["train_len"], config["curve_bin"]
    assert record["corpus"]["validation"]["files"] and len(record["corpus"]["validation"]["sha256"]) == 64
    assert set(run["zero_shot"]) == set(context_extension.EXTENSION_RECIPES) - {"none"}
    for entry in run["zero_shot"].values():
        assert set(entry["perplexity"]) == {"s=2", "s=4"}
        assert set(entry["perplexity"]["s=4"]) == {str(L), str(4 * L)}
        assert len(entry["curve"]) == 4 * L // bin_size and set(entry["passkey"]) == {"grid", "digits", "effective_length"}
    # dynamic NTK does nothing up to L: at L it is the model without scaling
    assert run["zero_shot"]["dynamic NTK"]["perplexity"]["s=2"][str(L)] == run["no_scaling"]["perplexity"][str(L)]
    # the truncated baseline reads the first L tokens exactly as the full model does
    first = L // bin_size
    assert run["truncated"]["curve"][:first] == pytest.approx(run["no_scaling"]["curve"][:first], abs=2e-4)
    assert set(run["truncated"]["perplexity"]) == {str(2 * L), str(4 * L)}
    for scores in run["no_scaling"]["perplexity"].values():
        assert scores["low"] <= scores["perplexity"] <= scores["high"]
    assert set(run["fine_tuned"]) == set(config["fine_tunes"])
    tuned = run["fine_tuned"]["continued, L"]
    assert tuned["train_length"] == L and tuned["tokens"] == config["fine_tune_steps"] * config["fine_tune_batch"] * 2 * L
    assert set(tuned["truncated"]) == {str(2 * L), str(4 * L)}


def test_head_to_head_sweeps_the_learning_rate_then_runs_the_other_seeds_at_the_winner(tmp_path):
    config = dict(PRESETS["head_to_head"]["tiny"])
    assert head_to_head.next_run(config, []) == {"method": "none", "seed": 0, "lr": 1e-3}

    def run(method, seed, lr, value):
        return {"method": method, "seed": seed, "lr": lr, "perplexity": {str(config["train_len"]): {"perplexity": value}}}

    runs = [run("none", 0, 1e-3, 9.0), run("none", 0, 3e-3, 7.0)]
    assert head_to_head.next_run(config, runs) == {"method": "rope", "seed": 0, "lr": 1e-3}
    runs += [run("rope", 0, 1e-3, 5.0), run("rope", 0, 3e-3, 6.0)]
    assert head_to_head.next_run(config, runs) == {"method": "none", "seed": 1, "lr": 3e-3}
    runs += [run("none", 1, 3e-3, 7.1), run("rope", 1, 1e-3, 5.1)]
    assert head_to_head.next_run(config, runs) is None
    chosen = head_to_head.seed_runs({"config": config, "runs": runs})
    assert sorted((r["method"], r["seed"], r["lr"]) for r in chosen) == [
        ("none", 0, 3e-3), ("none", 1, 3e-3), ("rope", 0, 1e-3), ("rope", 1, 1e-3)]


def test_head_to_head_tiny_records_baselines_and_rope_extensions(tmp_path):
    record = run_study("head_to_head", "tiny", tmp_path / "h.json", methods=["rope"], log=lambda *a: None)
    assert [(r["seed"], r["lr"]) for r in record["runs"]][:2] == [(0, 1e-3), (0, 3e-3)]
    run = record["runs"][0]
    L = record["config"]["train_len"]
    assert set(run["perplexity"]) == {str(L), str(2 * L)} and set(run["truncated"]) == {str(2 * L)}
    assert set(run["rope_extensions"]) == {"YaRN", "dynamic NTK"}
    assert set(run["rope_extensions"]["YaRN"]["perplexity"]) == {str(2 * L)}
    assert run["train_tokens"] == record["config"]["steps"] * record["config"]["batch"] * L


def test_seed_readers_by_hand():
    from posenc.experiments import format_interval, over_seeds, paired_seed_interval, seed_interval

    record = {"runs": [{"method": m, "seed": s, "ppl": {"128": v}}
                       for m, values in (("a", [5.0, 6.0, 7.0]), ("b", [4.0, 5.5, 6.0])) for s, v in enumerate(values)]
              + [{"method": "c", "seed": 0, "ppl": {"128": None}}]}
    assert over_seeds(record, "ppl", 128, method="a") == {0: 5.0, 1: 6.0, 2: 7.0}
    assert over_seeds(record, "ppl", 128, method="c") == {}  # None: cannot run there
    mean, low, high = seed_interval(record, "ppl", "128", method="a")
    half = 4.3027 * 1.0 / math.sqrt(3)  # t(0.975, 2) x sample sd 1 / sqrt(3)
    assert (mean, low, high) == pytest.approx((6.0, 6.0 - half, 6.0 + half), abs=1e-3)
    # paired differences 1.0, 0.5, 1.0: mean 0.8333
    diff = paired_seed_interval(record, ("ppl", "128"), ("ppl", "128"), method_a="a", method_b="b")
    assert diff[0] == pytest.approx(2.5 / 3) and diff[1] > 0  # paired: clearly above 0
    unpaired_low = 6.0 - 5.1667 - 2.776 * math.sqrt((1.0 + 1.0833) / 3)
    assert unpaired_low < 0 < diff[1]  # the same data unpaired would not separate them
    assert format_interval((6.0, 5.5, 6.25)) == "6.00 [5.50, 6.25]"
    with pytest.raises(ValueError, match="two runs of seed"):
        over_seeds(record, "ppl", "128")


def test_merge_records_joins_parts_of_one_study():
    from posenc.experiments import merge_records

    def part(seeds, config_seeds, wall):
        return {"study": "context_extension", "preset": "full", "config": {"steps": 5, "seeds": config_seeds},
                "corpus": {"sha": "x"}, "environment": {"cpu": wall}, "command": f"run {seeds}",
                "wall_seconds": wall, "runs": [{"method": "rope", "seed": s} for s in seeds]}

    merged = merge_records([part([0, 1, 2], [0, 1, 2, 3, 4], 10.0), part([4, 3], [3, 4], 5.0)])
    assert [run["seed"] for run in merged["runs"]] == [0, 1, 2, 3, 4]
    assert merged["config"] == {"steps": 5, "seeds": [0, 1, 2, 3, 4]} and merged["wall_seconds"] == 15.0
    assert [p["seeds"] for p in merged["parts"]] == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError, match="share runs"):
        merge_records([part([0, 1], [0, 1], 1.0), part([1], [1], 1.0)])
    tasks = [part([0], [0], 1.0), part([0], [0], 1.0)]  # the diagnostics study: one run per task
    for record, task in zip(tasks, ("flip_flop", "counting")):
        record["runs"][0]["task"] = task
    assert [run["task"] for run in merge_records(tasks)["runs"]] == ["flip_flop", "counting"]
    other = part([3], [3], 1.0)
    other["config"]["steps"] = 6
    with pytest.raises(ValueError, match="different configurations"):
        merge_records([part([0], [0], 1.0), other])


def test_methods_must_belong_to_the_study(tmp_path):
    with pytest.raises(ValueError, match="not in study 'head_to_head'"):
        run_study("head_to_head", "tiny", tmp_path / "x.json", methods=["rope (randomized)"], log=lambda *a: None)
    from posenc.studies import length_generalisation

    assert "rope (randomized)" in length_generalisation.PRESETS["full"]["methods"]


def test_head_to_head_sweep_extends_past_a_winning_edge():
    config = dict(PRESETS["head_to_head"]["tiny"], lr_grid=[1e-3, 2e-3], lr_extend=2)

    def run(lr, value, seed=0):
        return {"method": "none", "seed": seed, "lr": lr, "perplexity": {str(config["train_len"]): {"perplexity": value}}}

    runs = [run(1e-3, 9.0), run(2e-3, 8.0)]  # the top edge wins: try 4e-3
    assert head_to_head.sweep(config, runs, "none") == [1e-3, 2e-3, 4e-3]
    assert head_to_head.best_lr(config, runs, "none") is None
    assert head_to_head.next_run(config, runs) == {"method": "none", "seed": 0, "lr": 4e-3}
    runs.append(run(4e-3, 7.0))  # the new edge wins again: one more, the last extension allowed
    assert head_to_head.next_run(config, runs) == {"method": "none", "seed": 0, "lr": 8e-3}
    runs.append(run(8e-3, 6.5))  # still the edge, but lr_extend = 2 is spent: the winner stands
    assert head_to_head.best_lr(config, runs, "none") == 8e-3
    runs_low = [run(1e-3, 7.0), run(2e-3, 8.0), run(5e-4, 7.5)]  # the bottom edge won, then lost
    assert head_to_head.sweep(config, runs_low, "none") == [5e-4, 1e-3, 2e-3]
    assert head_to_head.best_lr(config, runs_low, "none") == 1e-3


def _h2h_record():
    """Two methods, two seeds, by hand: rope has a truncated row and a YaRN extension at 2L."""
    config = dict(PRESETS["head_to_head"]["tiny"], lr_grid=[1e-3], seeds=[0, 1], train_len=10,
                  methods=["rope", "alibi"])

    def ppl(value):
        return {"perplexity": value}

    def run(method, seed, at_l, at_2l, truncated, yarn=None, curve=None):
        entry = {"method": method, "seed": seed, "lr": 1e-3, "perplexity": {"10": ppl(at_l), "20": ppl(at_2l)},
                 "truncated": {"20": ppl(truncated)}, "curve": curve, "truncated_curve": [1.0, 1.0]}
        if yarn is not None:
            entry["rope_extensions"] = {"YaRN": {"perplexity": {"20": ppl(yarn)}, "curve": [2.0, 4.0]}}
        return entry

    runs = [run("rope", 0, 4.0, 9.0, 4.1, yarn=5.0, curve=[1.0, 3.0]), run("rope", 1, 4.2, 11.0, 4.3, yarn=6.0,
            curve=[3.0, 5.0]), run("alibi", 0, 5.0, 4.9, 5.1), run("alibi", 1, 5.4, 5.1, 5.3)]
    return {"config": config, "runs": runs}


def test_head_to_head_table_and_paired_by_hand():
    record = _h2h_record()
    rows = head_to_head.table(record, ["rope", "rope, truncated", "rope + YaRN", "alibi"], [10, 20])
    assert rows["rope"][10][0] == pytest.approx(4.1) and rows["rope"][20][0] == pytest.approx(10.0)
    # with two seeds the 95% t-interval is mean +- 12.706 * sd / sqrt(2); sd of (9, 11) is sqrt(2)
    assert rows["rope"][20][1] == pytest.approx(10.0 - 12.706, abs=1e-3)
    assert rows["rope, truncated"][10][0] == pytest.approx(4.1)  # at L the truncated model is the model
    assert rows["rope, truncated"][20][0] == pytest.approx(4.2)
    assert rows["rope + YaRN"][20][0] == pytest.approx(5.5) and rows["alibi"][20][0] == pytest.approx(5.0)
    # ALiBi minus RoPE + YaRN per seed: 4.9 - 5.0 and 5.1 - 6.0, mean -0.5, sd sqrt(0.32)
    mean, low, high = head_to_head.paired(record, "alibi", "rope + YaRN", 20)
    assert mean == pytest.approx(-0.5) and high - mean == pytest.approx(12.706 * 0.4, abs=1e-3)
    assert head_to_head.mean_curve(record, "rope") == [2.0, 4.0]
    assert head_to_head.mean_curve(record, "rope + YaRN") == [2.0, 4.0]
    assert head_to_head.mean_curve(record, "alibi, truncated") == [1.0, 1.0]
    with pytest.raises(ValueError, match="no run has a curve"):
        head_to_head.mean_curve(record, "alibi")
    with pytest.raises(ValueError, match="extension must be one of"):
        head_to_head.perplexity_path("rope + PI", 20, 10)
