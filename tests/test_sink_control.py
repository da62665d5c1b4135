"""Chapter 17's positive control (posenc.studies.sink_control): the task, the stream readings, the record."""

import math

import pytest
import torch

from posenc.experiments import run_study
from posenc.studies import sink_control as sc

CONFIG = sc.PRESETS["tiny"]


def test_optimal_losses_are_the_bigram_entropy_or_zero_after_a_trigger():
    table = sc.table(CONFIG)
    vocab, triggers = CONFIG["vocab"], CONFIG["triggers"]
    tokens = torch.tensor([[vocab, 5, 0, 5, 7]])  # BOS, 5, a trigger, the copy, 7
    losses = sc.optimal_losses(CONFIG, tokens)
    row = table[5]
    entropy_5 = -sum(float(p) * math.log(float(p)) for p in row if p > 0)
    assert losses[0, 1].item() == pytest.approx(entropy_5, rel=1e-6)
    assert losses[0, 2].item() == 0.0  # after the trigger the next token is certain
    assert triggers == 2 and losses.shape == tokens.shape


def test_the_four_readings_agree_within_L_and_recomputed_rereads_bos_and_the_last_tokens():
    torch.manual_seed(0)
    model = sc.build("rope", CONFIG).eval()
    L = CONFIG["train_len"]
    tokens, targets = sc.sequences(CONFIG, 3, 2 * L, seed=1)
    readings = sc.stream_losses(model, tokens, targets, L)
    assert set(readings) == set(sc.READINGS)
    for name in sc.READINGS[1:]:
        torch.testing.assert_close(readings[name][:, :L], readings["dense"][:, :L], rtol=1e-4, atol=1e-5)
    t = 2 * L - 1  # the last token: BOS and tokens t - L + 2 .. t, L tokens in all
    context = torch.cat([tokens[:, :1], tokens[:, t - L + 2:t + 1]], dim=1)
    assert context.shape[1] == L
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(context)[:, -1], targets[:, t], reduction="none")
    torch.testing.assert_close(readings["recomputed"][:, t], expected)
    # the rolling cache that keeps BOS sees the same L tokens, at the same positions 0 .. L-1
    torch.testing.assert_close(readings["rolling, BOS kept"][:, t], expected, rtol=1e-4, atol=1e-5)


def test_tiny_study_records_shares_sinks_gates_and_streams(tmp_path):
    record = run_study("sink_control", "tiny", tmp_path / "sc.json", log=lambda *a: None)
    runs = {run["method"]: run for run in record["runs"]}
    assert set(runs) == set(sc.KINDS)
    layers, heads = CONFIG["layers"], CONFIG["heads"]
    for run in runs.values():
        for part in ("dormant", "active"):
            assert len(run["first_token"][part]) == layers and len(run["first_token"][part][0]) == heads
        assert set(run["stream"]) == {"optimal", *sc.READINGS}
    assert len(runs["rope with learned sinks"]["sink_logits"][0]) == heads
    gate = runs["rope with output gate"]["gate"]
    assert all(0 < value < 1 for part in ("dormant", "active") for value in gate[part][0])
    L = CONFIG["train_len"]
    assert runs["rope"]["uniform_share"] == pytest.approx(
        sum(1 / i for i in range(CONFIG["skip"] + 1, L + 1)) / (L - CONFIG["skip"]), abs=1e-5)


def test_readers_by_hand():
    def run(kind, seed, dormant, copy_rolling):
        stream = {name: {"within L": 1.0, "copy": 0.1, "bigram": 1.5} for name in sc.READINGS}
        stream["rolling, no BOS"] = {"within L": 1.0, "copy": copy_rolling, "bigram": 1.5}
        stream["optimal"] = {"copy": 0.0, "bigram": 1.4}
        return {"method": kind, "seed": seed, "first_token": {"dormant": [[dormant, 0.0]], "active": [[0.0, 0.0]]},
                "stream": stream}

    record = {"runs": [run("rope", 0, 0.6, 0.3), run("rope", 1, 0.8, 0.5)]}
    table = sc.share_table(record, "rope")
    assert table[0][0][0] == pytest.approx(0.7) and table[0][1][0] == 0.0
    streams = sc.stream_table(record, "rope")
    assert streams["rolling, no BOS"]["copy"][0] == pytest.approx(0.4)
    assert streams["optimal"]["bigram"][0] == pytest.approx(1.4)
    # per seed 0.3 - 0.1 and 0.5 - 0.1: mean 0.3
    assert sc.paired_readings(record, "rope", "rolling, no BOS", "rolling, BOS kept", "copy")[0] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="no runs of 'gated'"):
        sc.share_table(record, "gated")
