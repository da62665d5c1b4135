"""Chapter 17's readers of the streaming study's record. Expected values are computed by hand from a
small fake record (two seeds, two methods), never by the code under test."""

import math

import pytest

from posenc.studies import streaming

T_975_1 = 12.706  # Student t quantile, 1 degree of freedom (two seeds)


def _reading(perplexity, curve):
    return {"summary": {"perplexity": perplexity, "low": perplexity - 0.1, "high": perplexity + 0.1},
            "curve": curve}


def _run(method, seed, ppl, first, sinks=None):
    """``ppl``: {reading: perplexity}; curves are [ppl, 2 * ppl] so their means are easy by hand."""
    run = {"method": method, "seed": seed, "first_token_attention": first,
           "stream": {name: _reading(value, [value, 2 * value]) for name, value in ppl.items()}}
    if sinks is not None:
        run["sink_logits"] = sinks
    return run


def _record():
    readings = streaming.READINGS  # dense, recomputed, rolling sinks, rolling no sinks
    return {"config": {"methods": ["rope", "rope with learned sinks"], "train_len": 4},
            "runs": [
                _run("rope", 0, dict(zip(readings, (10.0, 4.0, 4.0, 5.0))), [0.1, 0.3]),
                _run("rope", 1, dict(zip(readings, (20.0, 6.0, 6.3, 6.0))), [0.3, 0.5]),
                _run("rope with learned sinks", 0, dict(zip(readings, (8.0, 2.0, 2.0, 2.0))), [0.2, 0.2],
                     sinks=[[1.0, 3.0], [0.0, 0.0]]),
                _run("rope with learned sinks", 1, dict(zip(readings, (12.0, 4.0, 4.0, 4.0))), [0.2, 0.4],
                     sinks=[[2.0, 4.0], [-1.0, 1.0]]),
            ]}


def test_uniform_first_token_share_by_hand():
    # queries 1, 2, 3 of a length-4 window see 2, 3, 4 keys: (1/2 + 1/3 + 1/4) / 3
    assert streaming.uniform_first_token_share(4, skip=1) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert streaming.uniform_first_token_share(4, skip=0) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    with pytest.raises(ValueError, match="skip must be in"):
        streaming.uniform_first_token_share(4, skip=4)


def test_first_token_and_sink_logit_tables_by_hand():
    table = streaming.first_token_table(_record())
    # rope layer 0: seeds 0.1, 0.3 -> mean 0.2, sd sqrt(0.02), half-width 12.706 * 0.1
    mean, low, high = table["rope"][0]
    assert mean == pytest.approx(0.2) and high - mean == pytest.approx(T_975_1 * 0.1, rel=1e-4)
    assert table["rope"][1][0] == pytest.approx(0.4)
    assert table["rope with learned sinks"][0] == pytest.approx((0.2, 0.2, 0.2))  # no spread
    # per seed, the mean over heads: layer 0 -> 2 and 3; layer 1 -> 0 and 0
    sinks = streaming.sink_logit_table(_record())
    assert sinks[0][0] == pytest.approx(2.5) and sinks[0][2] - 2.5 == pytest.approx(T_975_1 * 0.5, rel=1e-4)
    assert sinks[1] == pytest.approx((0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="has sink_logits"):
        streaming.sink_logit_table(_record(), method="rope")


def test_stream_table_paired_and_curves_by_hand():
    record = _record()
    table = streaming.stream_table(record)
    assert table["rope"]["dense"][0] == pytest.approx(15.0)
    assert table["rope"]["dense"][1] == pytest.approx(15.0 - T_975_1 * 5.0, rel=1e-4)  # sd of (10, 20) is 5 sqrt 2
    assert table["rope"]["recomputed"][0] == pytest.approx(5.0)
    assert set(table) == {"rope", "rope with learned sinks"}
    # rolling with sinks minus without, per seed: 4 - 5 = -1 and 6.3 - 6 = 0.3; mean -0.35, sd 0.65 sqrt 2
    mean, low, high = streaming.paired(record, ("rope", "rolling, sinks"), ("rope", "rolling, no sinks"))
    assert mean == pytest.approx(-0.35) and high - mean == pytest.approx(T_975_1 * 0.65, rel=1e-4)
    # relative: 100 * (4/5 - 1) = -20 and 100 * (6.3/6 - 1) = 5; mean -7.5, sd 12.5 sqrt 2
    mean, low, high = streaming.paired(record, ("rope", "rolling, sinks"), ("rope", "rolling, no sinks"),
                                       relative=True)
    assert mean == pytest.approx(-7.5) and high - mean == pytest.approx(T_975_1 * 12.5, rel=1e-4)
    # across methods, same reading: learned sinks minus rope, recomputed: 2 - 4 and 4 - 6
    assert streaming.paired(record, ("rope with learned sinks", "recomputed"),
                            ("rope", "recomputed")) == pytest.approx((-2.0, -2.0, -2.0))
    # curves are [ppl, 2 ppl]: the mean over seeds of dense is [15, 30]
    assert streaming.mean_curve(record, "rope", "dense") == pytest.approx([15.0, 30.0])
    assert streaming.mean_curve(record, "rope with learned sinks", "rolling, sinks") == pytest.approx([3.0, 6.0])
    with pytest.raises(ValueError, match="reading must be one of"):
        streaming.mean_curve(record, "rope", "rolling")
    with pytest.raises(ValueError, match="no run of method"):
        streaming.mean_curve(record, "alibi", "dense")
    assert not math.isnan(streaming.stream_table(record, methods=["rope"], readings=["dense"])["rope"]["dense"][0])
