"""Readers of the image-positions study (chapter 18), against values computed by hand from a small fake
record: which runs count, the sweep, intervals over seeds, paired differences and the chance level; and the
grid model's class head."""

import math

import pytest
import torch

from posenc import TransformerLM
from posenc.studies import image_positions as ip

T_975_DF2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom (3 seeds)


def accuracy(both, above=None, left=None):
    return {"both": both, "above": both if above is None else above, "left": 1.0 if left is None else left}


def fake_record():
    """Two methods, sizes 2x2 (training) and 2x3, seeds 0-2; seed 0 tried two rates."""
    config = {"methods": ["2D RoPE", "1D RoPE"], "train_size": [2, 2], "test_sizes": [[2, 2], [2, 3]],
              "lr_grid": [0.001, 0.01], "seeds": [0, 1, 2]}

    def run(method, seed, lr, at_2x2, at_2x3):
        return {"method": method, "seed": seed, "lr": lr,
                "accuracy": {"2x2": accuracy(at_2x2), "2x3": accuracy(*at_2x3)}}

    runs = [
        # seed 0 sweep: 2D RoPE is best at 0.01 (0.9 > 0.7), 1D RoPE at 0.001 (1.0 > 0.5)
        run("2D RoPE", 0, 0.001, 0.7, (0.1,)),
        run("2D RoPE", 0, 0.01, 0.9, (0.9, 0.95, 0.85)),
        run("1D RoPE", 0, 0.001, 1.0, (0.5, 0.6, 0.9)),
        run("1D RoPE", 0, 0.01, 0.5, (0.2,)),
        run("2D RoPE", 1, 0.01, 1.0, (1.0, 1.0, 1.0)),
        run("1D RoPE", 1, 0.001, 1.0, (0.6, 0.6, 0.95)),
        run("2D RoPE", 2, 0.01, 0.8, (0.8, 0.85, 0.95)),
        run("1D RoPE", 2, 0.001, 1.0, (0.4, 0.6, 0.85)),
    ]
    return {"config": config, "runs": runs}


def test_chance_accuracy_by_hand():
    assert ip.chance_accuracy(4) == {"both": 9 / 16, "above": 3 / 4, "left": 3 / 4}
    assert ip.chance_accuracy(2) == {"both": 1 / 4, "above": 1 / 2, "left": 1 / 2}
    with pytest.raises(ValueError, match="colors"):
        ip.chance_accuracy(1)


def test_chance_accuracy_matches_the_task():
    # the constant guess "class 0" (neither neighbour matches) on many random grids
    import torch

    generator = torch.Generator().manual_seed(0)
    _, targets = ip.neighbour_batch(512, 8, 8, 4, generator)
    scored = targets[targets >= 0]
    assert abs((scored == 0).float().mean().item() - 9 / 16) < 0.01


def test_seed_runs_and_sweep_by_hand():
    record = fake_record()
    chosen = [(run["method"], run["seed"], run["lr"]) for run in ip.seed_runs(record)]
    assert chosen == [("2D RoPE", 0, 0.01), ("1D RoPE", 0, 0.001), ("2D RoPE", 1, 0.01),
                      ("1D RoPE", 1, 0.001), ("2D RoPE", 2, 0.01), ("1D RoPE", 2, 0.001)]
    assert ip.sweep(record, "2D RoPE") == {0.001: 0.7, 0.01: 0.9}
    assert ip.sweep(record, "1D RoPE", "left") == {0.001: 1.0, 0.01: 1.0}


def test_accuracy_table_by_hand():
    table = ip.accuracy_table(fake_record())
    assert list(table) == ["2D RoPE", "1D RoPE"] and list(table["2D RoPE"]) == ["2x2", "2x3"]
    # 2D RoPE at 2x2 over seeds: 0.9, 1.0, 0.8 -> mean 0.9, sd 0.1
    mean, low, high = table["2D RoPE"]["2x2"]
    half = T_975_DF2 * 0.1 / math.sqrt(3)
    assert mean == pytest.approx(0.9) and low == pytest.approx(0.9 - half) and high == pytest.approx(0.9 + half)
    # 1D RoPE at 2x2: 1.0 on every seed -> a point
    assert table["1D RoPE"]["2x2"] == pytest.approx((1.0, 1.0, 1.0))
    # 1D RoPE on 2x3, the "left" bit: 0.9, 0.95, 0.85 -> mean 0.9, sd 0.05
    mean, low, high = ip.accuracy_table(fake_record(), "left", methods=["1D RoPE"], sizes=["2x3"])["1D RoPE"]["2x3"]
    half = T_975_DF2 * 0.05 / math.sqrt(3)
    assert (mean, low, high) == pytest.approx((0.9, 0.9 - half, 0.9 + half))
    with pytest.raises(ValueError, match="metric"):
        ip.accuracy_table(fake_record(), "diagonal")
    with pytest.raises(ValueError, match="no run"):
        ip.accuracy_table(fake_record(), sizes=["3x3"])


def test_paired_accuracy_by_hand():
    record = fake_record()
    # 2D RoPE - 1D RoPE on 2x3 ("both"), seed by seed: 0.9-0.5, 1.0-0.6, 0.8-0.4 = 0.4 each: a point
    assert ip.paired_accuracy(record, ("2D RoPE", "2x3"), ("1D RoPE", "2x3")) == pytest.approx((0.4, 0.4, 0.4))
    # "above" bit, 2D - 1D on 2x3: 0.95-0.6, 1.0-0.6, 0.85-0.6 = 0.35, 0.4, 0.25 -> mean 1/3
    diffs = [0.35, 0.4, 0.25]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    half = T_975_DF2 * sd / math.sqrt(3)
    got = ip.paired_accuracy(record, ("2D RoPE", "2x3", "above"), ("1D RoPE", "2x3", "above"))
    assert got == pytest.approx((mean, mean - half, mean + half))
    # one method, two sizes: 1D RoPE "both" at 2x2 minus 2x3 = 0.5, 0.4, 0.6 -> mean 0.5, sd 0.1
    half = T_975_DF2 * 0.1 / math.sqrt(3)
    got = ip.paired_accuracy(record, ("1D RoPE", "2x2"), ("1D RoPE", "2x3"))
    assert got == pytest.approx((0.5, 0.5 - half, 0.5 + half))
    # one method, two metrics on one size: 1D RoPE left - above on 2x3 = 0.3, 0.35, 0.25 -> mean 0.3
    half = T_975_DF2 * 0.05 / math.sqrt(3)
    got = ip.paired_accuracy(record, ("1D RoPE", "2x3", "left"), ("1D RoPE", "2x3", "above"))
    assert got == pytest.approx((0.3, 0.3 - half, 0.3 + half))
    with pytest.raises(TypeError, match="method, size"):
        ip.paired_accuracy(record, "2D RoPE", ("1D RoPE", "2x3"))


def _final_hidden(model, tokens, height, width):
    # the hidden state the output layer reads: ln_final's output, caught by a hook
    seen = {}
    hook = model.lm.ln_final.register_forward_hook(lambda module, args, out: seen.update(hidden=out))
    logits = model(tokens, height, width)
    hook.remove()
    return logits, seen["hidden"]


def test_grid_model_class_head_tied_by_default_or_separate():
    # review P5-m9: the committed run scored class k with colour k's input embedding (the tied head)
    config = dict(ip.PRESETS["tiny"])
    tokens, _ = ip.neighbour_batch(2, 4, 4, 4, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    tied = ip.GridModel("2D RoPE", config)
    torch.manual_seed(0)  # the default draws the very weights the committed runs started from
    plain = TransformerLM(4, config["dim"], config["layers"], config["heads"], position="rope", causal=False)
    assert all(torch.equal(a, b) for a, b in zip(tied.lm.state_dict().values(), plain.state_dict().values()))
    with torch.no_grad():
        logits, hidden = _final_hidden(tied, tokens, 4, 4)
        colours = tied.lm.token_embedding.weight[:4]  # [4 colours, dim]
        torch.testing.assert_close(logits, hidden @ colours.T)
        separate = ip.GridModel("2D RoPE", dict(config, class_head="separate"))
        assert separate.lm.head.weight.shape == (4, config["dim"])
        assert separate.lm.head.weight.data_ptr() != separate.lm.token_embedding.weight.data_ptr()
        logits, hidden = _final_hidden(separate, tokens, 4, 4)
        torch.testing.assert_close(logits, hidden @ separate.lm.head.weight.T + separate.lm.head.bias)
    with pytest.raises(ValueError, match="class_head"):
        ip.GridModel("2D RoPE", dict(config, class_head="untied"))
