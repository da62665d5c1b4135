"""The context-use study (posenc.studies.context_use): the learning-rate rule on hand-made sweep records,
the order of runs, the curriculum, and a tiny run end to end."""

import math

import pytest
import torch

from posenc import data, tasks
from posenc.experiments import run_study
from posenc.studies import context_use as cu
from posenc.studies.common import copy_by_distance, task_mixture, task_span


def sweep_run(method, lr, control, perplexity, config):
    return {"method": method, "seed": config["sweep_seed"], "lr": lr,
            "development": {"control": control, "perplexity": perplexity}}


def test_best_lr_prefers_passing_the_control_then_perplexity():
    config = dict(cu.PRESETS["tiny"], lr_grid=[1e-3, 3e-3, 1e-2])
    runs = [sweep_run("rope", 1e-3, 0.99, 3.1, config), sweep_run("rope", 3e-3, 0.97, 3.0, config),
            sweep_run("rope", 1e-2, 0.50, 2.5, config),  # best perplexity, but fails the control
            sweep_run("alibi", 1e-3, 0.40, 3.0, config), sweep_run("alibi", 3e-3, 0.60, 3.5, config)]
    assert cu.best_lr(config, runs, "rope") == 3e-3
    assert cu.best_lr(config, runs, "alibi") is None  # 1e-2 has not run
    runs.append(sweep_run("alibi", 1e-2, 0.10, 2.0, config))
    assert cu.best_lr(config, runs, "alibi") == 3e-3  # none passes: the highest control accuracy


def test_next_run_sweeps_every_method_on_the_sweep_seed_first():
    config = dict(cu.PRESETS["tiny"], seeds=[0, 1], lr_grid=[1e-3, 2e-3, 4e-3])
    runs, order = [], []
    while (key := cu.next_run(config, runs)) is not None:
        order.append((key["method"], key["seed"]))
        runs.append({**key, "development": {"control": 1.0, "perplexity": abs(key["lr"] - 2e-3)}})
    sweep = config["sweep_seed"]
    assert order[:6] == [("rope", sweep)] * 3 + [("alibi", sweep)] * 3
    assert order[6:] == [("rope", 0), ("alibi", 0), ("rope", 1), ("alibi", 1)]
    assert all(run["lr"] == 2e-3 for run in runs[6:])  # the lowest perplexity in this made-up sweep


def test_curriculum_doubles_the_task_span_and_tasks_stay_inside_it():
    config = dict(cu.PRESETS["full"], curriculum_steps=10)
    assert [task_span(config, 128, step) for step in (0, 9, 10, 19, 20, 1000)] == [32, 32, 64, 64, 128, 128]
    train = data.stdlib_corpus(300_000)
    batch_fn = task_mixture(train, dict(config, mixture={"copy": 0.5, "recall": 0.5}), 64, 128)
    generator = torch.Generator().manual_seed(0)
    for step in range(25):
        tokens, targets = batch_fn(generator)
        assert (tokens[:, 0] == tasks.BOS).all()
        last_planted = max(int(row.nonzero().max()) for row in tokens >= 128 if row.any())
        assert last_planted < task_span(config, 128, step)
        assert ((targets != -100).sum(dim=1) > 0).all()


def test_a_longer_curriculum_starts_shorter_and_can_shorten_the_windows_too():
    config = dict(cu.PRESETS["full"], curriculum_steps=10, curriculum_phases=5, curriculum_windows=True,
                  mixture={"copy": 0.5, "recall": 0.5}, tasks_first=True)
    assert [task_span(config, 512, step) for step in (0, 10, 20, 30, 40, 49, 50, 999)] == \
        [32, 64, 128, 256, 512, 512, 512, 512]
    batch_fn = task_mixture(data.stdlib_corpus(300_000), config, 4, 512)
    generator = torch.Generator().manual_seed(0)
    widths = [batch_fn(generator)[0].shape[1] for _ in range(55)]
    assert widths[:41:10] == [32, 64, 128, 256, 512] and set(widths[50:]) == {512}


def test_probes_put_each_length_beyond_the_shorter_ones():
    config = cu.PRESETS["full"]
    validation = data.stdlib_corpus(300_000)
    for task in ("copy", "passkey"):
        assert cu.distance_range(config, 1, task)[1] < 128
        for factor in (2, 4):
            tokens, targets = cu.probe_batch(dict(config, probe_rows=16), validation, task, factor)
            low, high = cu.distance_range(config, factor, task)
            assert low > factor * 64 and high < factor * 128 and tokens.shape == (16, factor * 128)
            scored = (targets != -100).nonzero()[:, 1]
            assert scored.min() >= factor * 128 - 20  # the answer ends the window


def test_tiny_study_records_controls_retrieval_and_throughput(tmp_path):
    record = run_study("context_use", "tiny", tmp_path / "cu.json", log=lambda *a: None)
    reported = cu.seed_runs(record)
    assert {run["method"] for run in reported} == {"rope", "alibi"} and all(run["seed"] == 0 for run in reported)
    for run in reported:
        assert set(run["positive_control"]) == {"accuracy", "exact_match", "max_distance"}
        assert run["positive_control"]["max_distance"] == 48 - 8 - 1
        assert set(run["retrieval"]) == {"copy", "passkey", "recall", "copy, truncated", "passkey, truncated"}
        assert set(run["retrieval"]["copy"]) == {"48", "96"} and set(run["retrieval"]["copy, truncated"]) == {"96"}
        assert run["tokens_per_second"] > 0 and len(run["load_average"]) == 2
        assert set(run["long_short"]) == {"96"} and "icl" in run
    assert set(reported[0]["rope_extensions"]) == {"YaRN", "dynamic NTK"}
    assert set(cu.controls(record)) == {"rope", "alibi"}
    table = cu.retrieval_table(record)
    assert table["rope"][96] is not None and len(table["rope"][96]) == 3
    rope = next(run for run in reported if run["method"] == "rope")
    ppl = cu.perplexity_table(record, ["rope", "rope, truncated"], [48, 96])
    assert ppl["rope, truncated"][48][0] == rope["perplexity"]["48"]["perplexity"]  # at L: the model itself
    assert ppl["rope, truncated"][96][0] == rope["truncated"]["96"]["perplexity"]
    assert ppl["rope"][96][0] == rope["perplexity"]["96"]["perplexity"]
    assert cu.long_short_table(record)["rope"][96][0] == rope["long_short"]["96"]["mean"]


def test_llama3_with_yarns_temperature_keeps_llama3s_bands_and_scales_cos_sin():
    import math

    from posenc.rope import rope_frequencies
    from posenc.studies import context_extension as ce

    plain, plain_scale = rope_frequencies(32, base=1000.0, scaling=ce.extension_recipe("Llama 3", 4.0, 512))
    warm, warm_scale = rope_frequencies(32, base=1000.0, scaling=ce.extension_recipe("Llama 3, YaRN's t", 4.0, 512))
    _, yarn_scale = rope_frequencies(32, base=1000.0, scaling=ce.extension_recipe("YaRN", 4.0, 512))
    assert torch.equal(plain, warm) and plain_scale == 1.0
    assert warm_scale == yarn_scale == math.log(4.0) * 0.1 + 1  # YaRN's sqrt(1/t) = 0.1 ln s + 1


def test_context_extension_tasks_preset_records_controls_and_retrieval(tmp_path):
    record = run_study("context_extension", "tasks-tiny", tmp_path / "ce.json", log=lambda *a: None)
    run = record["runs"][0]
    assert set(run["positive_control"]) == {"accuracy", "exact_match", "max_distance"}
    assert set(run["no_scaling"]["retrieval"]["copy"]) == {"48", "96", "192"}
    assert set(run["no_scaling"]["retrieval"]["copy, truncated"]) == {"96", "192"}
    assert set(run["zero_shot"]) == {"YaRN", "YaRN, t = 1", "Llama 3, YaRN's t"}
    assert set(run["zero_shot"]["Llama 3, YaRN's t"]["retrieval"]["s=4"]["copy"]) == {"48", "192"}
    assert all("retrieval" in entry and "passkey" not in entry for entry in run["fine_tuned"].values())
    assert set(run["context_use"]["long_short"]) == {"96", "192"}


def test_one_learning_rate_needs_no_sweep():
    config = dict(cu.PRESETS["ci"])
    runs = []
    while (key := cu.next_run(config, runs)) is not None:
        runs.append(key)
    assert runs == [{"method": m, "seed": 0, "lr": config["lr_grid"][0]} for m in config["methods"]]


def test_span_losses_are_the_per_span_means_behind_the_perplexity():
    import math

    from posenc.studies.common import score_lengths
    torch.manual_seed(0)
    model = cu.build("rope", dict(cu.PRESETS["tiny"]))
    validation = data.stdlib_corpus(50_000)
    config = dict(cu.PRESETS["tiny"], span_losses=True, eval_tokens=384)
    out = score_lengths(model, validation, config, [48, 96], bos=tasks.BOS)
    for n in ("48", "96"):
        spans = out["perplexity"][n]["span_losses"]
        assert len(spans) == 384 // 96  # spans of the longest length (2L)
        assert math.exp(sum(spans) / len(spans)) == pytest.approx(out["perplexity"][n]["perplexity"], rel=1e-4)
    assert out["perplexity"]["48"]["span_losses"] != out["perplexity"]["96"]["span_losses"]


def test_sweep_steps_past_a_winning_edge():
    config = dict(cu.PRESETS["tiny"], lr_grid=[5e-4, 1e-3, 2e-3])
    runs = [sweep_run("sinusoidal", 5e-4, 0.70, 14.6, config), sweep_run("sinusoidal", 1e-3, 0.24, 11.4, config),
            sweep_run("sinusoidal", 2e-3, 0.10, 11.0, config)]
    # none passes, the lowest rate does best: try half of it before choosing
    assert cu.sweep_rates(config, runs, "sinusoidal") == [2.5e-4, 5e-4, 1e-3, 2e-3]
    assert cu.best_lr(config, runs, "sinusoidal") is None
    runs.append(sweep_run("sinusoidal", 2.5e-4, 0.96, 16.0, config))
    # 2.5e-4 passes now, and is again an edge: one more step, the last one allowed
    assert cu.sweep_rates(config, runs, "sinusoidal") == [1.25e-4, 2.5e-4, 5e-4, 1e-3, 2e-3]
    assert cu.best_lr(config, runs, "sinusoidal") is None
    runs.append(sweep_run("sinusoidal", 1.25e-4, 0.97, 18.0, config))
    assert cu.best_lr(config, runs, "sinusoidal") == 2.5e-4  # both pass; the lower perplexity wins
    # a winner inside the grid stops the extension
    inside = [sweep_run("rope", lr, 0.99, ppl, config) for lr, ppl in ((5e-4, 9.1), (1e-3, 8.8), (2e-3, 9.5))]
    assert cu.sweep_rates(config, inside, "rope") == [5e-4, 1e-3, 2e-3] and cu.best_lr(config, inside, "rope") == 1e-3


def _reported_record():
    """Two methods, one rate each (no sweep), three seeds, copy accuracy at 2L whole and truncated, and
    RoPE read with YaRN: numbers chosen by hand."""
    config = dict(cu.PRESETS["tiny"], lr_grid=[1e-3], seeds=[0, 1, 2], train_len=4, factors=[1, 2])
    copy = {"rope": [0.30, 0.50, 0.40], "alibi": [0.90, 0.80, 0.85]}
    runs = []
    for method, values in copy.items():
        for seed, value in enumerate(values):
            control = 0.90 if (method, seed) == ("rope", 1) else 0.99  # RoPE's seed 1 fails it
            run = {"method": method, "seed": seed, "lr": 1e-3, "positive_control": {"accuracy": control},
                   "retrieval": {"copy": {"8": {"token_accuracy": value}},
                                 "copy, truncated": {"8": {"token_accuracy": 0.01 * seed}}}}
            if method == "rope":
                run["rope_extensions"] = {"YaRN": {"8": {"retrieval": {"copy": {"8": {"token_accuracy": value + 0.2}}}}}}
            runs.append(run)
    return {"config": config, "runs": runs}


def test_compare_gives_paired_intervals_and_holm_over_the_family():
    from posenc.stats import paired_interval, paired_p_value
    record = _reported_record()
    at = cu.retrieval_path
    tests = {"alibi - rope": (("alibi", at("copy", 8)), ("rope", at("copy", 8))),
             "rope - truncated": (("rope", at("copy", 8)), ("rope", at("copy, truncated", 8))),
             "yarn - rope": (("rope", at("copy, YaRN", 8)), ("rope", at("copy", 8)))}
    out = cu.compare(record, tests)
    a, b = {0: 0.90, 1: 0.80, 2: 0.85}, {0: 0.30, 1: 0.50, 2: 0.40}
    assert out["alibi - rope"]["interval"] == pytest.approx(paired_interval(a, b))
    assert out["alibi - rope"]["p"] == pytest.approx(paired_p_value(a, b))
    assert out["yarn - rope"]["interval"][0] == pytest.approx(0.2) and out["yarn - rope"]["p"] == 0.0
    # differences 0.6, 0.3, 0.45 (t = 5.2, p = 0.035) and 0.3, 0.49, 0.38 (p = 0.0095): three tests,
    # Holm compares the smallest p with 0.05 / 3, the next with 0.05 / 2, the last with 0.05
    assert [out[k]["holm"] for k in ("yarn - rope", "rope - truncated", "alibi - rope")] == [True, True, True]
    assert not cu.compare(record, tests, level=0.02)["alibi - rope"]["holm"]


def test_beyond_l_family_tests_a_method_against_its_truncated_reading_and_its_fade():
    from posenc.stats import paired_interval
    record = _reported_record()
    rows, results = cu.beyond_l_family(record, "rope", only_passing=True)
    assert list(results) == ["copy - truncated, 2L"]  # one length beyond L: no fade test
    assert rows["copy"][8][0] == pytest.approx(0.35) and rows["copy, truncated"][8][0] == pytest.approx(0.01)
    # seeds 0 and 2 (seed 1 fails its control): 0.30 - 0.00 and 0.40 - 0.02
    assert results["copy - truncated, 2L"]["interval"] == pytest.approx(
        paired_interval({0: 0.30, 2: 0.40}, {0: 0.0, 2: 0.02}))
    for run in record["runs"]:  # a third length, 4L = 16: the copy halves there
        copy = run["retrieval"]["copy"]["8"]["token_accuracy"]
        run["retrieval"]["copy"]["16"] = {"token_accuracy": copy / 2}
        run["retrieval"]["copy, truncated"]["16"] = {"token_accuracy": 0.0}
    record["config"]["factors"] = [1, 2, 4]
    _, results = cu.beyond_l_family(record, "alibi")
    assert list(results) == ["copy - truncated, 2L", "copy - truncated, 4L", "copy 2L - copy 4L"]
    assert results["copy 2L - copy 4L"]["interval"][0] == pytest.approx((0.90 + 0.80 + 0.85) / 6)


def test_retrieval_family_is_chapter_10s_eighteen_tests():
    config = dict(cu.PRESETS["tiny"], train_len=128, factors=[1, 2, 4, 8, 16])
    family = cu.retrieval_family({"config": config}, ["none", "rope", "alibi"])
    assert len(family) == 3 * 4 + 3 * 2
    assert family["rope - truncated, 2048"] == (("rope", ("retrieval", "copy", "2048", "token_accuracy")),
                                                ("rope", ("retrieval", "copy, truncated", "2048", "token_accuracy")))
    assert family["none - alibi, 512"] == (("none", ("retrieval", "copy", "512", "token_accuracy")),
                                           ("alibi", ("retrieval", "copy", "512", "token_accuracy")))
    assert "none - rope, 1024" not in family


def test_extension_table_reads_rope_with_each_recipe_beyond_l():
    table = cu.extension_table(_reported_record())
    assert table["rope"][8][0] == pytest.approx(0.40) and table["rope, YaRN"][8][0] == pytest.approx(0.60)
    assert table["rope, truncated"][8][0] == pytest.approx(0.01)
    assert table["rope, dynamic NTK"][8] is None


def test_sweep_table_marks_the_chosen_rate():
    config = dict(cu.PRESETS["tiny"], lr_grid=[1e-3, 3e-3, 1e-2], methods=["rope"])
    runs = [sweep_run("rope", 1e-3, 0.99, 3.1, config), sweep_run("rope", 3e-3, 0.97, 3.0, config),
            sweep_run("rope", 1e-2, 0.50, 2.5, config)]
    assert cu.sweep_table({"config": config, "runs": runs}) == {
        "rope": {1e-3: "0.990 / 3.10", 3e-3: "0.970 / 3.00*", 1e-2: "0.500 / 2.50"}}


def test_throughput_splits_runs_by_the_load_around_them():
    runs = [{"tokens_per_second": s, "load_average": load} for s, load in
            [(23000, [2.0, 2.1]), (22000, [1.9, 2.4]), (9000, [3.9, 2.9]), (24000, [2.0, 2.0])]]
    record = {"runs": runs}
    assert cu.throughput(record, max_load=2.5) == "23,000 (22,000-24,000), 3 runs"
    assert cu.throughput(record, min_load=2.5) == "9,000 (9,000-9,000), 1 runs"
    assert cu.throughput(record, min_load=5) == "no runs"


def test_only_passing_drops_the_runs_that_fail_the_control_and_unpairs_their_seed():
    record = _reported_record()
    assert len(cu.seed_runs(record)) == 6 and len(cu.seed_runs(record, only_passing=True)) == 5
    table = cu.retrieval_table(record, only_passing=True)
    assert table["rope"][8][0] == pytest.approx((0.30 + 0.40) / 2)  # seeds 0 and 2
    at = cu.retrieval_path
    tests = {"alibi - rope": (("alibi", at("copy", 8)), ("rope", at("copy", 8)))}
    diff = cu.compare(record, tests, only_passing=True)["alibi - rope"]["interval"][0]
    assert diff == pytest.approx(((0.90 - 0.30) + (0.85 - 0.40)) / 2)  # seed 1 unpaired
    for run in record["runs"]:
        run["perplexity"] = {"4": {"perplexity": 10.0 + run["seed"]}}
    assert cu.perplexity_table(record, ["rope"], [4])["rope"][4][0] == pytest.approx(11.0)
    assert cu.perplexity_table(record, ["rope"], [4], only_passing=True)["rope"][4][0] == pytest.approx(11.0)
    assert cu.perplexity_table(record, ["alibi"], [4], only_passing=True)["alibi"][4][0] == pytest.approx(11.0)
    record["runs"][2]["perplexity"]["4"]["perplexity"] = 30.0  # RoPE's seed 2
    assert cu.perplexity_table(record, ["rope"], [4], only_passing=True)["rope"][4][0] == pytest.approx(20.0)
    assert cu.perplexity_table(record, ["rope"], [4])["rope"][4][0] == pytest.approx(17.0)  # seed 1 counted


def test_a_row_below_four_passing_seeds_is_labelled_with_its_count():
    record = _reported_record()  # rope: seed 1 fails its control (2 of 3); alibi: 3 of 3
    controls = cu.controls(record)
    assert cu.control_label("RoPE", controls["rope"]) == "RoPE (2 of 3)"
    assert cu.control_label("RoPE", controls["rope"], bar=2) == "RoPE"
    assert cu.control_label("ALiBi", controls["alibi"], bar=3) == "ALiBi"
    assert cu.control_label("ALiBi", {"passed": 4, "seeds": 5}) == "ALiBi"  # the book's bar: four


def test_retrieval_intervals_stay_within_zero_and_one():
    record = _reported_record()
    for run in record["runs"]:
        if run["method"] == "alibi":  # 0.99, 0.10, 0.98: a t-interval over three runs past both ends
            run["retrieval"]["copy"]["8"]["token_accuracy"] = {0: 0.99, 1: 0.10, 2: 0.98}[run["seed"]]
    mean, low, high = cu.retrieval_table(record)["alibi"][8]
    assert mean == pytest.approx(2.07 / 3) and low == 0.0 and high == 1.0


def test_mean_curve_averages_the_seeds_at_the_longest_length():
    record = _reported_record()  # train_len 4, factors [1, 2]: the longest window is 8 tokens
    record["config"] = dict(record["config"], curve_bin=4)
    for run in record["runs"]:
        run["curve"] = [1.0 + run["seed"], 2.0]  # two bins of 4 tokens
        run["truncated_curve"] = [1.0, 1.0]
    assert cu.mean_curve(record, "rope") == pytest.approx([2.0, 2.0])
    assert cu.mean_curve(record, "rope", truncated=True) == pytest.approx([1.0, 1.0])
    for run in record["runs"]:
        if run["method"] == "alibi":
            run["curve"] = [1.0]  # a window of L only, as the learned table's
    assert cu.mean_curve(record, "alibi") is None


def _extension_record():
    """A hand-made chapter-7 tasks record: L = 128, four seeds, seed 1 failing the positive control."""
    runs = []
    for seed, control, plain, yarn in ((0, 0.99, 0.30, 0.60), (1, 0.50, 0.90, 0.90), (2, 0.97, 0.20, 0.50),
                                       (3, 0.96, 0.25, 0.55)):
        runs.append({"seed": seed, "positive_control": {"accuracy": control},
                     "no_scaling": {"retrieval": {"copy": {"128": {"token_accuracy": 1.0}, "256": {"token_accuracy": plain}},
                                                  "copy, truncated": {"256": {"token_accuracy": 0.01}}}},
                     "zero_shot": {"YaRN": {"retrieval": {"s=2": {"copy": {"256": {"token_accuracy": yarn}}}}}},
                     "fine_tuned": {}})
    return {"config": {"train_len": 128}, "runs": runs}


def test_context_extension_readers_keep_the_passing_seeds_and_cut_rates_to_zero_one():
    from posenc.studies import context_extension as ce
    record = _extension_record()
    assert [run["seed"] for run in ce.passing_runs(record)] == [0, 2, 3]
    assert ce.retrieval_path("truncated", 256, 128) == ("no_scaling", "retrieval", "copy, truncated", "256",
                                                        "token_accuracy")
    assert ce.retrieval_path("truncated", 128, 128) == ce.retrieval_path("no scaling", 128, 128)
    assert ce.retrieval_path("YaRN", 256, 128)[:4] == ("zero_shot", "YaRN", "retrieval", "s=2")
    table = ce.retrieval_table(record, ["no scaling", "YaRN", "truncated"], [("L", 128, None), ("2L", 256, None)])
    assert table["no scaling"]["L"] == (1.0, 1.0, 1.0) and table["YaRN"]["L"] is None
    mean, low, high = table["YaRN"]["2L"]  # 0.6, 0.5, 0.55: sd 0.05, t(0.975, 2) = 4.3027
    assert mean == pytest.approx(0.55) and high - mean == pytest.approx(4.3027 * 0.05 / 3 ** 0.5, abs=1e-4)
    assert table["truncated"]["2L"] == pytest.approx((0.01, 0.01, 0.01))
    every = ce.retrieval_table(record, ["no scaling"], [("2L", 256, None)], runs=record["runs"])
    assert every["no scaling"]["2L"][0] == pytest.approx(0.4125) and every["no scaling"]["2L"][2] <= 1.0
    result = ce.compare(record, {"YaRN - none": (ce.retrieval_path("YaRN", 256, 128),
                                                 ce.retrieval_path("no scaling", 256, 128)),
                                 "none - none": (ce.retrieval_path("no scaling", 128, 128),
                                                 ce.retrieval_path("no scaling", 128, 128))})
    assert result["YaRN - none"]["interval"] == pytest.approx((0.3, 0.3, 0.3))  # the failing seed left out
    assert result["YaRN - none"]["holm"] and not result["none - none"]["holm"]
    assert result["none - none"]["p"] == 1.0


def test_training_tokens_count_the_short_windows_of_the_curriculum():
    from posenc.studies import context_extension as ce
    from posenc.studies.common import training_tokens
    config = ce.PRESETS["tasks"]  # 5 phases of 400 steps from 32 bytes, then 1,500 steps at 512, batch 16
    assert training_tokens(config, 512) == 16 * (400 * (32 + 64 + 128 + 256 + 512) + 1500 * 512)
    assert training_tokens(cu.PRESETS["full"], 128) == 3000 * 16 * 128  # full windows throughout


def test_chapter_9_probe_readers_by_hand():
    config = {"methods": ["none", "rope"], "lr_grid": [1e-3], "seeds": [0, 1], "sweep_seed": 100,
              "train_len": 4, "control_threshold": 0.9}

    def run(method, seed, trained, untrained, ratio, without_bos, ppl):
        probes = {"trained": {"position": {"linear": trained}}, "untrained": {"position": {"linear": untrained}},
                  "first_token_ratio": ratio, "untrained_first_token_ratio": [[1.0]],
                  "perplexity_without_bos": without_bos}
        return {"method": method, "seed": seed, "lr": 1e-3, "positive_control": {"accuracy": 1.0},
                "perplexity": {"4": {"perplexity": ppl}}, "probes": probes}

    record = {"config": config, "runs": [
        run("none", 0, [0.0, 0.5], [0.0, 0.2], [[2.0]], 11.0, 10.0),
        run("none", 1, [0.0, 0.7], [0.0, 0.2], [[4.0]], 12.0, 10.0),
        run("rope", 0, [0.0, 0.1], [0.0, 0.2], [[1.0]], 10.0, 10.0),
        run("rope", 1, [0.0, 0.1], [0.0, 0.2], [[1.0]], 10.0, 10.0)]}
    table = cu.probe_table(record)
    assert table["none"][1][0] == pytest.approx(0.6) and table["rope"][1][0] == pytest.approx(0.1)
    assert cu.probe_table(record, part="untrained")["none"][1][0] == pytest.approx(0.2)
    near_one = {**record, "runs": [run("none", s, [0.0, r2], [0.0, 0.2], [[1.0]], 10.0, 10.0)
                                   for s, r2 in ((0, 0.95), (1, 0.99))]}
    mean, low, high = cu.probe_table(near_one)["none"][1]
    assert mean == pytest.approx(0.97) and high == 1.0 and low < 0.97  # the t-interval's 1.2 cut at R^2's ceiling
    gain = cu.probe_gain(record, "none")
    assert gain[1][0] == pytest.approx(0.4) and gain[0][0] == 0.0
    assert cu.probe_gain(record, "rope")[1][0] == pytest.approx(-0.1)
    assert cu.first_token_ratios(record, "none") == [[[2.0, 4.0]]]
    assert cu.sink_head_counts(record, "none", threshold=3.0) == [[0, 1]]  # seed 0: 2.0, seed 1: 4.0
    # without BOS: +10% and +20% for none, 0% for rope
    dependence = cu.bos_dependence(record)
    assert dependence["none"][0] == pytest.approx(15.0) and dependence["rope"][0] == pytest.approx(0.0)


def test_bos_stream_readers_by_hand():
    import math
    config = {"methods": ["alibi"], "lr_grid": [1e-3], "seeds": [0, 1], "sweep_seed": 100, "train_len": 4}
    runs = [{"method": "alibi", "seed": seed, "lr": 1e-3,
             "probes": {"stream": {"recomputed": 1.0, "rolling, no BOS": 1.0 + extra}}}
            for seed, extra in ((0, math.log(1.2)), (1, math.log(1.4)))]
    record = {"config": config, "runs": runs}
    table = cu.bos_stream_table(record)
    assert table["alibi"]["recomputed"][0] == pytest.approx(math.e)
    # +20% and +40%: mean +30%
    assert cu.bos_stream_paired(record, "alibi", "rolling, no BOS", "recomputed")[0] == pytest.approx(30.0)


def test_position_readings_on_a_tiny_run():
    # the nope preset's readings, end to end on the tiny preset: probes for the trained and the untrained
    # model, head ratios, the perplexity without BOS and the four stream readings
    from posenc import data
    config = dict(cu.PRESETS["tiny"], position_probes=4)
    torch.manual_seed(0)
    model = cu.build("none", config)
    initial = cu.build("none", config)
    _, _, validation = data.stdlib_splits(config["max_bytes"])
    readings = cu.position_readings(model, initial, validation, config)
    layers = config["layers"] + 1  # the embeddings and every block
    for part in ("trained", "untrained"):
        for target in ("position", "log position"):
            assert {len(readings[part][target][p]) for p in ("linear", "mlp")} == {layers}
    assert len(readings["first_token_ratio"]) == config["layers"]
    assert len(readings["first_token_ratio"][0]) == config["heads"]
    assert readings["perplexity_without_bos"] > 1
    assert set(readings["stream"]) == {"dense", "recomputed", "rolling, BOS kept", "rolling, no BOS"}
    # one layer: a cache that keeps BOS computes what re-reading BOS and the last L - 1 tokens computes
    assert readings["stream"]["rolling, BOS kept"] == pytest.approx(readings["stream"]["recomputed"], abs=1e-4)


def test_copy_by_distance_puts_each_bin_s_sources_inside_it():
    config = dict(cu.PRESETS["hybrid"], probe_rows=32)
    validation = torch.randint(0, 128, (20_000,))
    seen = {}

    class Spy(torch.nn.Module):  # records the rows it is asked to read; predicts nothing
        def __init__(self):
            super().__init__()
            self.unused = torch.nn.Parameter(torch.zeros(1))

        def forward(self, tokens):
            first = (tokens >= tasks.COPY_SYMBOLS[0]).float().argmax(1)  # the block's first symbol
            again = [int((row == row[i]).nonzero()[-1]) for row, i in zip(tokens, first)]
            seen.setdefault(len(seen), torch.tensor(again) - first)
            return torch.zeros(*tokens.shape, data.VOCAB_SIZE)

    scores = copy_by_distance(Spy(), validation, config)
    assert list(scores) == ["8-16", "17-32", "33-64", "65-119"]
    for (low, high), distances in zip([(8, 16), (17, 32), (33, 64), (65, 119)], seen.values()):
        assert low <= int(distances.min()) and int(distances.max()) <= high, (low, high, distances)
        assert int(distances.max()) > (low + high) // 2  # drawn across the bin, not at one edge


def test_hybrid_preset_builds_the_families_plans_at_each_window():
    config = cu.PRESETS["hybrid"]
    assert len(config["methods"]) == 7 and config["lr_grid"] == [1e-3]
    local_global = cu.build("local RoPE + global NoPE, W 4", config).plan
    assert [(spec.position, spec.window) for spec in local_global] == [("rope", 4)] * 3 + [("none", None)]
    chunked = cu.build("chunked RoPE + NoPE with temperature, W 16", config).plan
    assert [spec.chunk for spec in chunked] == [16, 16, 16, None]
    assert [spec.window for spec in cu.build("local RoPE only, W 16", config).plan] == [16] * 4
    same = {k: v for k, v in config.items() if k not in ("methods", "lr_grid", "position_probes", "distance_edges")}
    assert same == {k: v for k, v in cu.PRESETS["nope"].items() if k in same}  # same batches as the nope runs


def test_hybrid_tiny_records_copy_by_distance(tmp_path):
    record = run_study("context_use", "hybrid-tiny", tmp_path / "h.json", log=lambda *a: None)
    assert {run["method"] for run in record["runs"]} == set(cu.PRESETS["hybrid-tiny"]["methods"])
    for run in record["runs"]:
        assert set(run["copy_by_distance"]) == {"8-16", "17-32"}
        assert 0 <= run["copy_by_distance"]["17-32"]["token_accuracy"] <= 1


def test_mixers_preset_builds_each_layer_kind_and_records_the_readings(tmp_path):
    config = cu.PRESETS["mixers"]
    same = {k: v for k, v in config.items() if k not in ("methods", "lr_grid", "position_probes", "distance_edges")}
    assert same == {k: v for k, v in cu.PRESETS["nope"].items() if k in same}  # pairs with the nope runs by seed
    kinds = {method: [(s.mixer, s.position, s.conv) for s in cu.build(method, config).plan] for method in config["methods"]}
    assert kinds["decay 3:1 attention"] == [("decay", "none", 4)] * 3 + [("attention", "none", None)]
    assert kinds["none + conv"] == [("attention", "none", 4)] * 4
    assert kinds["cope"] == [("cope", "none", None)] * 4 and cu.build("cope", config).plan[0].cope_positions == 128
    record = run_study("context_use", "mixers-tiny", tmp_path / "m.json", log=lambda *a: None)
    assert {run["method"] for run in record["runs"]} == set(config["methods"])
    assert all(0 <= run["positive_control"]["accuracy"] <= 1 for run in record["runs"])


def _hybrid_record(values: dict, methods, lr=1e-3):
    config = dict(cu.PRESETS["hybrid"], methods=list(methods), factors=[1, 2])
    runs = []
    for (method, seed), (near, far) in values.items():
        runs.append({"method": method, "seed": seed, "lr": lr,
                     "copy_by_distance": {b: {"token_accuracy": near} for b in ("8-16", "17-32", "33-64", "65-119")},
                     "retrieval": {"copy": {"256": {"token_accuracy": far}}}})
    return {"config": config, "runs": runs}


def test_distance_table_and_references_by_hand():
    local = cu.hybrid_method("local RoPE only", 16)
    record = _hybrid_record({(local, s): (0.5 + 0.1 * s, 0.0) for s in range(3)}, [local])
    nope = dict(cu.PRESETS["nope"], seeds=[0, 1, 2, 100], factors=[1, 2])
    references = {"config": nope, "runs": _hybrid_record({("rope", s): (1.0, 0.2 * s) for s in range(3)}, ["rope"])["runs"]}
    both = cu.with_references(record, references, ["rope"])
    assert both["config"]["methods"] == ["rope", local]
    table = cu.distance_table(both)
    assert list(table[local]) == ["8-16", "17-32", "33-64", "65-119", 256]
    mean, low, high = table[local]["65-119"]
    assert mean == pytest.approx(0.6) and low < 0.6 < high <= 1
    assert table["rope"][256][0] == pytest.approx(0.2) and table["rope"]["8-16"] == (1.0, 1.0, 1.0)
    diff = cu.compare(both, {"d": ((local, cu.distance_path("65-119")), ("rope", cu.distance_path("65-119")))})
    assert diff["d"]["interval"][0] == pytest.approx(-0.4)
    with pytest.raises(ValueError, match="differ in \\['steps'\\]"):
        cu.with_references(record, {"config": dict(nope, steps=1), "runs": []}, ["rope"])


def test_training_copies_are_placed_with_a_left_skew():
    """common.copy_placement: every copy fits its span, and the share of copies from beyond half the span
    matches the integral of its two draws (end log-uniform, distance uniform over what fits)."""
    from posenc.studies import common
    block, span, n = 8, 128, 400_000
    end, distance = common.copy_placement(block, span, n, torch.Generator().manual_seed(0))
    assert int(end.min()) >= 2 * block + 2 and int(end.max()) <= span
    assert bool((distance >= block).all()) and bool((end - block - distance >= 1).all())
    # P(distance > span / 2) = E over end of (end - block - span/2) / (end - 2 block), where positive
    ends = torch.linspace(math.log(2 * block + 2), math.log(span + 1), 200_001, dtype=torch.float64).exp()
    weight = torch.clamp((ends - block - span / 2) / (ends - 2 * block), min=0)
    expected = float(weight.mean())  # the grid is uniform in log(end): the mean is the expectation
    assert float((distance > span / 2).double().mean()) == pytest.approx(expected, abs=0.01)
    assert expected < 0.15  # far copies are rare: the left skew


def test_the_search_variants_keep_their_initialisation_and_blocks():
    config = cu.PRESETS["mixers-search"]
    torch.manual_seed(0)
    fox = cu.build("fox, forget bias 4", config)
    x = torch.zeros(2, 10, config["dim"])  # no input: the gate is its bias alone
    for block in fox.blocks:  # TransformerLM's init zeroes every Linear bias; the variant's comes after it
        gates = block.attn.forget_gates(x)
        assert gates.shape == (2, config["heads"], 10)
        assert torch.allclose(gates, torch.full_like(gates, 1 / (1 + math.exp(-4.0))), rtol=1e-6)
    pro = cu.build("fox + conv + gate", config)
    assert all(spec.conv == 4 and spec.gate and spec.mixer == "forgetting" for spec in pro.plan)
    assert cu.build("fox", cu.PRESETS["mixers"]).blocks[0].attn.forget.bias.abs().max() == 0  # the paper's zero
    assert [spec.mixer for spec in cu.build("stick-breaking + conv", config).plan] == ["stick_breaking"] * 4
    assert not set(cu.PRESETS["mixers-search"]["methods"]) & set(cu.PRESETS["mixers"]["methods"])
    for method, position in (("rope + conv", "rope"), ("alibi + conv", "alibi")):  # review P6-M1's controls
        plan = cu.build(method, cu.PRESETS["conv-controls"]).plan
        assert all(spec.position == position and spec.conv == 4 and spec.mixer == "attention" for spec in plan)
    assert {k: v for k, v in cu.PRESETS["conv-controls"].items() if k != "methods"} == \
        {k: v for k, v in cu.PRESETS["mixers"].items() if k != "methods"}  # the same preset as none + conv


@pytest.mark.parametrize("preset, base, changed", [
    ("t5-lower-rate", "full", {"methods", "lr_grid"}),
    ("hybrid-search", "hybrid", {"methods", "lr_grid"}),
    ("tables-longer", "full", {"methods", "lr_grid", "steps", "warmup", "curriculum_steps"}),
    ("decay-longer", "mixers", {"methods", "steps", "warmup", "curriculum_steps"}),
    ("kimi-lower-rate", "mixers", {"methods", "lr_grid"})])
def test_issue_40_search_presets_change_only_what_they_name(preset, base, changed):
    """Each search step is its base preset with the named changes and nothing else, so that its runs read
    beside the base's; a longer schedule keeps the base's proportions (warm-up and curriculum scale with
    the steps), and every searched method or plan is one the base ran and failed with."""
    config, reference = cu.PRESETS[preset], cu.PRESETS[base]
    assert {key for key in config.keys() | reference.keys() if config.get(key) != reference.get(key)} == changed
    for key in ("warmup", "curriculum_steps"):
        assert config[key] / config["steps"] == reference[key] / reference["steps"]
    assert set(config["methods"]) <= set(reference["methods"]) | {"decay + conv + gate"}
    assert all(lr < 1e-3 for lr in cu.lr_grid(config, config["methods"][0])) or "steps" in changed
