"""The diagnostic tasks of issue 28, read back by hand: every scored answer recomputed from the tokens."""

from __future__ import annotations

import pytest
import torch

from posenc import diagnostics as d
from posenc.tasks import BOS


def _text(row) -> str:
    return "".join(chr(int(t)) if t != BOS else "^" for t in row)


def test_flip_flop_reads_return_the_last_written_bit():
    tokens, targets = d.flip_flop(64, 81, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (64, 81) and (tokens[:, 0] == BOS).all()
    reads = 0
    for row, target in zip(tokens, targets):
        text, last = _text(row)[1:], None
        assert text[0] == "w" and text[-2] == "r"  # a write first, a read last
        for k in range(0, 80, 2):
            op, bit = text[k], text[k + 1]
            assert op in "wri" and bit in "01"
            if op == "w":
                last = bit
            scored = int(target[1 + k])
            if op == "r":
                assert bit == last and scored == ord(last)
                reads += 1
            else:
                assert scored == -100
        assert (target[2::2] == -100).all()  # bits are never targets of the bit before
    assert 0.05 < reads / (64 * 40) < 0.15  # p_read = 0.1


def test_selective_copy_repeats_the_scattered_symbols_in_order():
    tokens, targets = d.selective_copy(16, 40, data=5, alphabet=4, generator=torch.Generator().manual_seed(1))
    for row, target in zip(tokens, targets):
        text = _text(row)
        noisy, answer = text[1:].split("|")
        assert noisy.replace(".", "") == answer and len(answer) == 5 and set(answer) <= set("abcd")
        scored = [chr(int(t)) for t in target if t != -100]
        assert "".join(scored) == answer and int((target != -100).nonzero()[0]) == text.index("|")


def test_counting_answers_the_count_in_the_last_segment():
    tokens, targets = d.counting(32, 60, alphabet=3, generator=torch.Generator().manual_seed(2))
    for row, target in zip(tokens, targets):
        text = _text(row)
        body, query = text[:-3], text[-3:]
        assert query[0] == "?" and body.endswith("|")
        last = body[:-1].split("|")[-1]
        assert 4 <= len(last) <= 9 and set(last) <= set("abc")
        assert query[2] == str(last.count(query[1]))
        assert [int(i) for i in (target != -100).nonzero()] == [58] and int(target[58]) == ord(query[2])


@pytest.mark.parametrize("call, message", [
    (lambda: d.flip_flop(2, 10), "length must be odd"),
    (lambda: d.flip_flop(2, 11, p_read=0.5, p_ignore=0.5), "p_read \\+ p_ignore"),
    (lambda: d.flip_flop(2, 3), "length must be an integer >= 5"),
    (lambda: d.selective_copy(2, 10, data=8), "length must be an integer >= 18"),
    (lambda: d.counting(2, 30, segment=(4, 12)), "one digit"),
])
def test_bad_settings_name_the_argument(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_the_tiny_study_scores_every_reading_and_reads_the_gates(tmp_path):
    from posenc.experiments import run_study
    from posenc.studies import diagnostics as study
    record = run_study("diagnostics", "tiny", tmp_path / "d.json", log=lambda *a: None)
    assert {(r["task"], r["method"]) for r in record["runs"]} == {
        (t, m) for t in ("flip_flop", "counting") for m in ("rope", "fox")}
    for run in record["runs"]:
        readings = {"L", "2L", "sparse", "dense"} if run["task"] == "flip_flop" else {"L", "2L"}
        assert set(run["scores"]) == readings == set(run["answers"])
        assert ("gates" in run) == (run["method"] == "fox" and run["task"] == "flip_flop")  # P6-n5
    flip = next(r for r in record["runs"] if r["method"] == "fox" and r["task"] == "flip_flop")
    assert all(n >= 8 for n in flip["answers"].values())  # every sequence ends with a read: >= 1 per row
    assert len(flip["gates"]) == 2 and set(flip["gates"][0]) == {"w", "r", "i", "bit"}
    assert all(len(heads) == 2 and all(0 < g < 1 for g in heads) for heads in flip["gates"][0].values())
    config = study.PRESETS["full"]
    for mix, p_ignore in (("sparse", 0.98), ("dense", 0.1)):
        tokens = study.task_batch(config, "flip_flop", 512, 129, torch.Generator().manual_seed(0), mix)[0]
        ops = tokens[:, 3:-2:2]  # between the first (a write) and the last (a read)
        assert abs(float((ops == ord("i")).float().mean()) - p_ignore) < 0.01  # Liu et al.'s mixes
        reads, writes = float((ops == ord("r")).float().mean()), float((ops == ord("w")).float().mean())
        assert abs(reads - writes) < 0.02 and abs(reads - (1 - p_ignore) / 2) < 0.01


def test_remainder_dropped_preset_is_the_full_preset_with_the_released_convention():
    from posenc.mixers.stick_breaking import StickBreakingAttention
    from posenc.studies import diagnostics as study
    from posenc.studies.common import make_model
    config = study.PRESETS["remainder-dropped"]
    assert {k: v for k, v in config.items() if k != "methods"} == \
        {k: v for k, v in study.PRESETS["full"].items() if k != "methods"}
    assert "stick-breaking" in study.PRESETS["full"]["methods"]  # the convention it is read against
    torch.manual_seed(0)
    dropped = make_model("stick-breaking, remainder dropped", config, 32, 65)
    torch.manual_seed(0)
    own = make_model("stick-breaking", config, 32, 65)
    assert [b.attn.remainder for b in dropped.blocks] == ["drop"] * config["layers"]
    assert all(isinstance(b.attn, StickBreakingAttention) and b.attn.remainder == "own" for b in own.blocks)
    tokens = torch.randint(0, 32, (2, 16))
    with torch.no_grad():  # the same weights; only the remainder differs
        assert not torch.allclose(dropped(tokens), own(tokens))
        for block in dropped.blocks:
            block.attn.remainder = "own"
        torch.testing.assert_close(dropped(tokens), own(tokens))


def test_loss_gap_is_the_largest_difference_between_logged_losses_seed_by_seed():
    from posenc.studies import diagnostics as study

    def record(method, losses_by_seed):
        return {"runs": [{"task": "counting", "method": method, "seed": seed,
                          "history": [[75 * (i + 1), loss] for i, loss in enumerate(losses)]}
                         for seed, losses in losses_by_seed.items()]}

    a = record("a", {0: [4.0, 2.5, 2.0], 1: [4.0, 3.0, 1.0], 2: [1.0, 1.0, 1.0]})
    b = record("b", {0: [4.0, 2.0, 2.1], 1: [4.5, 3.0, 1.0]})  # seed 2 only in a: left out
    gaps = study.loss_gap(a, "a", b, "b", "counting")
    assert gaps.keys() == {0, 1}
    assert gaps[0] == pytest.approx(0.5) and gaps[1] == pytest.approx(0.5)
    assert study.loss_gap(a, "a", a, "a", "counting") == {0: 0.0, 1: 0.0, 2: 0.0}
    b["runs"][0]["history"][1][0] = 151
    with pytest.raises(ValueError, match="seed 0: .* different steps"):
        study.loss_gap(a, "a", b, "b", "counting")


def test_the_readers_count_controls_and_pair_seeds():
    from posenc.studies import diagnostics as study

    def run(task, method, seed, at_l, at_2l):
        return {"task": task, "method": method, "seed": seed, "scores": {"L": at_l, "2L": at_2l},
                "gates": [{"w": [0.1 * seed, 0.2], "i": [0.9, 1.0]}]}

    runs = [run("counting", "a", s, 1.0, 0.5 + 0.1 * s) for s in range(3)]
    runs += [run("counting", "b", s, [0.96, 0.9, 0.99][s], 0.1 * s) for s in range(3)]
    runs += [run("flip_flop", "a", s, 1.0, 1.0) for s in range(3)]
    record = {"config": {"tasks": ["counting", "flip_flop"], "methods": ["a", "b"]}, "runs": runs}
    controls = study.controls(record)["counting"]
    assert controls["a"]["passed"] == 3 and controls["b"]["passed"] == 2  # 0.9 < 0.95
    assert controls["b"]["accuracy"] == [0.96, 0.9, 0.99]
    mean, low, high = study.table(record, "counting")["a"]["2L"]  # 0.5, 0.6, 0.7
    assert mean == pytest.approx(0.6) and high - mean == pytest.approx(4.303 * 0.1 / 3 ** 0.5, rel=1e-3)
    family = study.compare(record, {"a - b": (("counting", "a", "2L"), ("counting", "b", "2L"))})
    low, high = family["a - b"]["interval"][1:]
    assert low == pytest.approx(0.5) == high  # a - b is 0.5 on every seed: no spread
    gates = study.gate_table(record, "a")  # flip-flop's models, read on flip-flop tokens
    assert gates[0]["w"] == pytest.approx([0.1, 0.2]) and gates[0]["i"] == pytest.approx([0.9, 1.0])
    with pytest.raises(ValueError, match="never saw"):  # a counting model never saw flip-flop tokens
        study.gate_table(record, "a", task="counting")
