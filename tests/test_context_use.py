"""The context-use study (posenc.studies.context_use): the learning-rate rule on hand-made sweep records,
the order of runs, the curriculum, and a tiny run end to end."""

import torch

from posenc import data, tasks
from posenc.experiments import run_study
from posenc.studies import context_use as cu
from posenc.studies.common import task_mixture, task_span


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
    config = dict(cu.PRESETS["tiny"], seeds=[0, 1])
    runs, order = [], []
    while (key := cu.next_run(config, runs)) is not None:
        order.append((key["method"], key["seed"]))
        runs.append({**key, "development": {"control": 1.0, "perplexity": key["lr"]}})
    sweep = config["sweep_seed"]
    assert order[:4] == [("rope", sweep), ("rope", sweep), ("alibi", sweep), ("alibi", sweep)]
    assert order[4:] == [("rope", 0), ("alibi", 0), ("rope", 1), ("alibi", 1)]
    assert all(run["lr"] == 1e-3 for run in runs[4:])  # the lower perplexity in this made-up sweep


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
