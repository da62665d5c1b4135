"""The readers chapter 15 adds to posenc.studies.head_to_head, checked on a small record computed by hand."""

import pytest

from posenc.studies import head_to_head as h2h


def _run(method, seed, lr, grid, digits, effective, curve=(0.0, 0.0), truncated_curve=(0.0, 0.0)):
    return {"method": method, "seed": seed, "lr": lr, "perplexity": {"4": {"perplexity": 2.0}},
            "passkey": {"grid": grid, "digits": digits, "effective_length": effective},
            "curve": list(curve), "truncated_curve": list(truncated_curve)}


@pytest.fixture
def record():
    config = {"methods": ["a", "b"], "train_len": 4, "lr_grid": [1e-3], "seeds": [0, 1],
              "passkey_lengths": [4, 8]}
    runs = [
        _run("a", 0, 1e-3, {"4": {"0.0": 1.0, "1.0": 0.0}, "8": {"0.0": 0.0, "1.0": 0.0}},
             {"4": {"0.0": 1.0, "1.0": 0.4}, "8": {"0.0": 0.2, "1.0": 0.0}}, 4,
             curve=(1.0, 2.0), truncated_curve=(1.0, 1.0)),
        _run("a", 1, 1e-3, {"4": {"0.0": 1.0, "1.0": 1.0}, "8": {"0.0": 0.0, "1.0": 1.0}},
             {"4": {"0.0": 1.0, "1.0": 1.0}, "8": {"0.0": 0.6, "1.0": 1.0}}, 8,
             curve=(3.0, 4.0), truncated_curve=(1.0, 2.0)),
        # a learning rate outside the sweep: not one of the seed runs, so never read
        _run("a", 1, 5e-4, {"4": {"0.0": 0.0, "1.0": 0.0}, "8": {"0.0": 0.0, "1.0": 0.0}},
             {"4": {"0.0": 0.0, "1.0": 0.0}, "8": {"0.0": 0.0, "1.0": 0.0}}, 0,
             curve=(9.0, 9.0)),
        # "b" has no grid at 8 (as the learned table has none beyond L)
        _run("b", 0, 1e-3, {"4": {"0.0": 0.0, "1.0": 0.0}}, {"4": {"0.0": 0.1, "1.0": 0.3}}, 0),
    ]
    return {"config": config, "runs": runs}


def test_passkey_summary_averages_depths_and_seeds(record):
    summary, effective = h2h.passkey_summary(record, "a")
    # exact at 4: (1 + 0 + 1 + 1) / 4; at 8: (0 + 0 + 0 + 1) / 4
    assert summary[4][0] == pytest.approx(0.75) and summary[8][0] == pytest.approx(0.25)
    # digits at 4: (1 + 0.4 + 1 + 1) / 4 = 0.85; at 8: (0.2 + 0 + 0.6 + 1) / 4 = 0.45
    assert summary[4][1] == pytest.approx(0.85) and summary[8][1] == pytest.approx(0.45)
    assert effective == [4, 8]


def test_passkey_summary_skips_missing_lengths_and_parts(record):
    summary, effective = h2h.passkey_summary(record, "b")
    assert list(summary) == [4] and summary[4] == (0.0, pytest.approx(0.2)) and effective == [0]
    with pytest.raises(ValueError):
        h2h.passkey_summary(record, "a", part="truncated_passkey")


def test_curve_excess_is_whole_minus_truncated_over_seeds(record):
    # whole: mean of (1, 2) and (3, 4) = (2, 3); truncated: mean of (1, 1) and (1, 2) = (1, 1.5)
    assert h2h.curve_excess(record, "a") == pytest.approx([1.0, 1.5])


def test_chunk_halves_reads_the_first_and_second_half_of_each_chunk():
    # chunks of 4 tokens, bins of 2: a curve over 8 positions is 4 bins, two chunks of (first, second)
    config = {"methods": ["a"], "train_len": 4, "lr_grid": [1e-3], "seeds": [0, 1], "window": 4, "curve_bin": 2}
    ppl = {"4": {"perplexity": 2.0}}
    runs = [{"method": "a", "seed": 0, "lr": 1e-3, "perplexity": ppl, "curve": [5.0, 1.0, 3.0, 2.0]},
            {"method": "a", "seed": 1, "lr": 1e-3, "perplexity": ppl, "curve": [1.0, 1.0, 1.0, 1.0]}]
    record = {"config": config, "runs": runs}
    halves = h2h.chunk_halves(record, "a", 0, 8)
    assert halves[0] == pytest.approx((4.0, 1.5)) and halves[1] == pytest.approx((1.0, 1.0))
    assert h2h.chunk_halves(record, "a", 4, 8)[0] == pytest.approx((3.0, 2.0))
    with pytest.raises(ValueError, match="multiples of the chunk"):
        h2h.chunk_halves(record, "a", 2, 8)


def test_paired_can_leave_out_a_seed():
    config = {"methods": ["a", "b"], "train_len": 4, "lr_grid": [1e-3], "seeds": [0, 1, 2]}
    runs = [{"method": m, "seed": s, "lr": 1e-3, "perplexity": {"4": {"perplexity": value}}}
            for m, s, value in (("a", 0, 3.0), ("b", 0, 1.0), ("a", 1, 2.0), ("b", 1, 1.5),
                                ("a", 2, 2.0), ("b", 2, 1.0))]
    record = {"config": config, "runs": runs}
    # differences 2.0, 0.5, 1.0: mean 7/6; without seed 0: 0.5, 1.0, mean 0.75
    assert h2h.paired(record, "a", "b", 4)[0] == pytest.approx(7 / 6)
    assert h2h.paired(record, "a", "b", 4, leave_out=(0,))[0] == pytest.approx(0.75)
