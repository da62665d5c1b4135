"""posenc.studies.real_model (issue 39): the pieces of the real-model study, checked without the model."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from posenc import TransformerLM, evaluate
from posenc.rope.scaling import rope_frequencies
from posenc.studies import real_model as rm


class Characters:
    """A stand-in tokenizer: one id per character."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) % 5000 for c in text]


def test_an_induction_probe_repeats_one_random_segment_at_the_distance_in_the_documents_text():
    ids = list(range(100, 1100))
    tokens, copy = rm.induction_probe(ids, 300, 20, seed=3, vocab=49152, prefix=50)
    assert tokens.shape == (1, 50 + 300 + 20) and copy == 350
    segment = tokens[0, 50:70]
    assert torch.equal(tokens[0, 350:], segment)  # ids: exact
    assert ((segment >= 1000) & (segment < 40000)).all()
    assert tokens[0, :50].tolist() == ids[:50] and tokens[0, 70:350].tolist() == ids[70:350]  # the text around
    again, _ = rm.induction_probe(ids, 300, 20, seed=3, vocab=49152, prefix=50)
    other, _ = rm.induction_probe(ids, 300, 20, seed=4, vocab=49152, prefix=50)
    assert torch.equal(again, tokens) and not torch.equal(other[0, 50:70], segment)  # seeded, new per seed
    with pytest.raises(ValueError, match="fewer than"):
        rm.induction_probe(ids, 2000, 20, seed=0, vocab=49152)


def test_probe_accuracy_scores_the_copy_after_its_first_token():
    tokens = torch.tensor([[5, 1, 2, 3, 9, 1, 2, 3]])

    class Oracle(torch.nn.Module):  # predicts the true next token everywhere except at position 6
        def forward(self, x):
            target = torch.cat([tokens[0, 1:], tokens[0, :1]])[: x.shape[1]].clone()
            target[6] = 0
            return torch.nn.functional.one_hot(target, 10).float()[None]

    # copy starts at 5: tokens 6 and 7 are scored, guessed at positions 5 (right) and 6 (wrong)
    assert rm.probe_accuracy(Oracle(), tokens, 5) == 0.5


def test_pair_sizes_are_each_pairs_rms_norm_by_layer():
    torch.manual_seed(0)
    model = TransformerLM(50, 32, 2, 4, position="rope", n_kv_heads=2, bias=False, norm="rms", mlp="swiglu").eval()
    ids = torch.randint(0, 50, (1, 12))
    sizes = rm.pair_sizes(model, ids)
    assert len(sizes["q"]) == 2 and len(sizes["q"][0]) == 4 and len(sizes["k"][0]) == 4  # head_dim 8: 4 pairs
    with torch.no_grad():  # layer 0 by hand, float64: q = W_q ln(x), pair i = features (i, i + 4)
        x = model.blocks[0].ln_attn(model.token_embedding(ids)).double()[0]  # [12, 32]
        w_q = model.blocks[0].attn.qkv.weight.double()[:32]  # [4 heads x 8, 32]
        q = (x @ w_q.T).view(12, 4, 8)
        expected = (q[..., :4] ** 2 + q[..., 4:] ** 2).mean(dim=(0, 1)).sqrt()
    torch.testing.assert_close(torch.tensor(sizes["q"][0], dtype=torch.float64), expected, rtol=1e-5, atol=1e-6)


def test_documents_alternate_code_and_prose_and_keep_their_provenance():
    found = rm.documents(Characters(), 3, 2000)
    assert [d["kind"] for d in found] == ["code", "prose", "code"]
    assert found[0]["source"] == "_pydecimal.py" and found[2]["source"] == "tkinter/__init__.py"
    assert all(len(d["ids"]) == 2000 and d["available_tokens"] >= 2000 and len(d["sha256"]) == 64 for d in found)
    assert found[1]["source"].startswith("pydoc_data/topics.py: topics ")
    second = rm.documents(Characters(), 4, 2000, prose_tokens=1500)[3]
    assert len(second["ids"]) == 1500
    assert second["sha256"] != found[1]["sha256"]  # the next stretch of topics, not the same one


def test_a_passkey_stands_the_distance_before_its_answer_and_its_negative_leaves_it_out():
    tokenizer, ids = Characters(), [ord("a") + i % 26 for i in range(3000)]
    tokens, start = rm.passkey_probe(tokenizer, ids, 500, seed=2, prefix=40)
    text = "".join(chr(t) for t in tokens[0].tolist())
    key = text[start:]
    assert len(key) == 5 and key.isdigit()
    assert text[start - 500:start - 495] == key  # the needle's key, exactly the distance before the answer
    assert text.startswith("<|im_start|>user\n" + rm.PASSKEY_INTRO)
    assert text.endswith("What is the pass key?<|im_end|>\n<|im_start|>assistant\n The pass key is " + key)
    intro = len(tokenizer.encode("<|im_start|>user\n" + rm.PASSKEY_INTRO))
    assert tokens[0, intro:intro + 40].tolist() == ids[:40]  # the document's start, then the needle
    assert text.count(key) == 3  # twice in the needle, once as the answer
    negative, where = rm.passkey_probe(tokenizer, ids, 500, seed=2, prefix=40, present=False)
    assert where == start and negative.shape == tokens.shape
    assert "".join(chr(t) for t in negative[0].tolist()).count(key) == 1  # only the answer
    assert negative[0, intro:start - 100].tolist() == ids[:start - 100 - intro]  # document text in its place
    plain, _ = rm.passkey_probe(tokenizer, ids, 500, seed=2, prefix=40, chat=False)
    assert "im_start" not in "".join(chr(t) for t in plain[0].tolist())
    other, _ = rm.passkey_probe(tokenizer, ids, 500, seed=3, prefix=40)
    assert "".join(chr(t) for t in other[0, -5:].tolist()) != key  # seeded
    with pytest.raises(ValueError, match="distance must be at least"):
        rm.passkey_probe(tokenizer, ids, 30, seed=0)
    with pytest.raises(ValueError, match="fewer than"):
        rm.passkey_probe(tokenizer, ids, 2990, seed=0)


def test_a_passkey_run_scores_the_five_digits_of_every_document():
    torch.manual_seed(0)
    model = TransformerLM(5000, 16, 1, 2, position="rope", n_kv_heads=1, bias=False, norm="rms", mlp="swiglu").eval()
    config = dict(rm.PRESETS["tiny"], documents=2, doc_tokens=600, prose_tokens=600)
    rm._LOADED.clear()
    key = {"part": "retrieval", "recipe": "none", "distance": 200, "probe": "passkey"}
    out = rm.measure(model, Characters(), config, key)
    expected = []
    for d in range(2):
        ids = rm._document_of(config, d, Characters())["ids"]
        tokens, start = rm.passkey_probe(Characters(), ids, 200, seed=config["probe_seed"] + d)
        right = [int(model(tokens[:, :start + i])[0, -1].argmax()) == int(tokens[0, start + i]) for i in range(5)]
        expected.append(sum(right) / 5)  # each digit guessed from the true ones before it
    assert out["accuracy"] == pytest.approx(expected) and out["probe_tokens"] == 5
    assert out["copy_starts_at"] == start - 1
    rm._LOADED.clear()


def test_the_runs_come_cheapest_first_and_resume_where_they_stopped():
    config = dict(rm.PRESETS["full"])
    first = rm.next_run(config, [])
    assert first == {"part": "frequencies"}
    keys = rm._keys(config)
    assert len(keys) == len({tuple(sorted(k.items())) for k in keys})  # no run twice
    parts = [k["part"] for k in keys]
    assert parts.index("sinks") < parts.index("far_context") < parts.index("streaming") < parts.index("extension")
    done = [dict(key, result=0.0) for key in keys[:5]]
    assert rm.next_run(config, done) == keys[5]
    assert rm.next_run(config, [dict(key) for key in keys]) is None
    long_runs = [k for k in keys if k["part"] == "extension" and k["length"] == 32768]
    assert {k["recipe"] for k in long_runs} == {"none", "PI x4", "YaRN x4", "dynamic NTK x2"}
    assert len(long_runs) == 4 * config["documents"] // 2  # the code files only
    extension = [(k["document"], k["length"]) for k in keys if k["part"] == "extension"]
    assert extension == sorted(extension)  # each document to its longest length before the next


def test_the_retrieval_control_within_the_trained_length_comes_before_the_expensive_runs():
    keys = rm._keys(dict(rm.PRESETS["full"]))
    retrieval = [k for k in keys if k["part"] == "retrieval" and k["recipe"] == "none"]
    within = [k["distance"] for k in retrieval if k["distance"] + 320 <= rm.TRAINED_LENGTH
              and "control" not in k and "probe" not in k and "prefix" not in k]
    # the position control: distance 1,024 with its repeat where the longest distance's is
    assert {"part": "retrieval", "recipe": "none", "distance": 1024, "prefix": 256 + 7808 - 1024} in keys
    assert {"part": "retrieval", "recipe": "none", "distance": 1024, "prefix": 256 + 7808 - 1024,
            "probe": "passkey"} in keys  # and the passkey's
    assert within == [256, 1024, 2048, 4096, 6144, 7808]
    text = [k["distance"] for k in retrieval if k.get("probe") == "text" and "control" not in k]
    assert text == within  # the same distances with natural text, and its own negative control
    assert {"part": "retrieval", "recipe": "none", "distance": 256, "probe": "text", "control": "negative"} in keys
    assert {"part": "retrieval", "recipe": "none", "distance": 256, "control": "negative"} in keys
    passkey = [k["distance"] for k in retrieval if k.get("probe") == "passkey" and "control" not in k]
    assert passkey[:len(within)] == within
    assert {"part": "retrieval", "recipe": "none", "distance": 256, "probe": "passkey", "control": "negative"} in keys
    first_stream = keys.index(next(k for k in keys if k["part"] == "streaming"))
    assert all(keys.index(k) < first_stream for k in retrieval
               if k["distance"] in within and k.get("prefix", 0) + k["distance"] <= rm.TRAINED_LENGTH)
    # beyond L only the passkey (the probe whose control passes): 1,024 back (a distance it retrieves from)
    # with the question beyond 8,192; at 12,288 before the hours of extension runs, at 16,000 after them
    beyond = [k for k in keys if k["part"] == "retrieval" and k.get("prefix", 0) + k["distance"] > rm.TRAINED_LENGTH]
    first_extension = min(i for i, k in enumerate(keys) if k["part"] == "extension")
    last_16k = max(i for i, k in enumerate(keys) if k["part"] == "extension" and k["length"] == 16384)
    assert beyond and all(k.get("probe") == "passkey" and k["distance"] == 1024 for k in beyond)
    assert all(keys.index(k) < first_extension for k in beyond
               if k["prefix"] == 12288 - 1024 and not k["recipe"].startswith("PI"))
    assert all(last_16k < keys.index(k) for k in beyond if k["prefix"] == 16000 - 1024 or k["recipe"].startswith("PI"))
    order = [(k["recipe"], k.get("prefix")) for k in keys[keys.index(beyond[0]):] if k["part"] == "retrieval"]
    assert order[:3] == [("none", 11264), ("YaRN x2", None), ("YaRN x2", 11264)]  # unscaled first, then each
    # each recipe with its own control early, then all at 16,000, then the two temperature arms' controls
    assert len(order) == 1 + 7 * 2 + 8 + 2
    assert order[-10][0] == "none" and {prefix for _, prefix in order[-10:-2]} == {16000 - 1024}


def test_each_recipes_effective_length_is_probed_once_its_early_passkey_is_in():
    """After a recipe's passkey 1,024 back early in the window: the longer distances within L when it
    retrieves there (does it move the effective length?), the shorter ones when it does not; dynamic NTK never
    (within L it is the unscaled model); these before the passkey asked at 16,000."""
    config = dict(rm.PRESETS["full"])
    passkey = {"part": "retrieval", "distance": 1024, "probe": "passkey"}
    assert not rm._passkey_within(config, [])
    runs = [dict(passkey, recipe="YaRN x2", accuracy=[1.0] * 8), dict(passkey, recipe="PI x2", accuracy=[0.6] * 8),
            dict(passkey, recipe="dynamic NTK x2", accuracy=[1.0] * 8),
            dict(passkey, recipe="YaRN x4", accuracy=[1.0] * 7 + [0.8])]  # 7 of 8 keys whole: below 0.95
    keys = rm._passkey_within(config, runs)
    assert [(k["recipe"], k["distance"]) for k in keys] == [
        ("YaRN x4", 256), ("PI x2", 256), ("YaRN x2", 2048), ("YaRN x2", 4096), ("YaRN x2", 6144),
        ("YaRN x2", 7808)]
    assert all(k == dict(passkey, recipe=k["recipe"], distance=k["distance"]) for k in keys)
    order = rm._keys(config, runs)
    far = min(i for i, k in enumerate(order) if k.get("prefix") == 16000 - 1024)
    assert all(order.index(k) < far for k in keys)


def test_the_passkey_is_asked_at_16000_only_under_recipes_that_keep_their_early_keys():
    """A recipe that loses its keys 1,024 back early in the window (PI) has nothing to lose further out; the
    others, and a recipe whose early run is not in yet, stay planned at 16,000."""
    config = dict(rm.PRESETS["full"])
    passkey = {"part": "retrieval", "distance": 1024, "probe": "passkey"}
    runs = [dict(passkey, recipe="PI x2", accuracy=[0.0] * 8), dict(passkey, recipe="YaRN x2", accuracy=[1.0] * 8),
            dict(passkey, recipe="PI x4", accuracy=[1.0] * 7 + [0.4])]  # 7 of 8 whole: below 0.95
    at_16k = {k["recipe"] for k in rm._keys(config, runs) if k.get("prefix") == 16000 - 1024}
    assert at_16k == set(config["recipes"]) - {"PI x2", "PI x4"}
    assert len({k["recipe"] for k in rm._keys(config) if k.get("prefix") == 16000 - 1024}) == 8


def test_passkey_reach_reads_each_recipes_length_against_the_unscaled_one_paired_by_document():
    def run(recipe, distance, right, **extra):  # the first ``right`` of 8 documents retrieve the key whole
        return {"part": "retrieval", "recipe": recipe, "distance": distance, "probe": "passkey",
                "accuracy": [1.0] * right + [0.4] * (8 - right), **extra}
    unscaled = {256: 8, 1024: 8, 2048: 6, 4096: 7, 6144: 5, 7808: 0}
    runs = [run("none", d, k) for d, k in unscaled.items()] + [run("none", 256, 0, control="negative")]
    runs += [run("YaRN x2", d, k) for d, k in {1024: 8, 2048: 8, 4096: 8, 6144: 8, 7808: 8}.items()]
    runs += [run("PI x2", d, k) for d, k in {256: 2, 1024: 0}.items()]
    runs += [run("NTK-aware x2", 1024, 8), run("NTK-aware x2", 1024, 8, prefix=11264)]  # one distance only
    record = {"config": {"recipes": ["none", "YaRN x2", "PI x2", "NTK-aware x2"]}, "runs": runs}
    reach = rm.passkey_reach(record)
    assert set(reach) == {"none", "YaRN x2", "PI x2"}
    assert reach["none"]["effective"] == 1024  # 6 of 8 at 2,048 is below 85% of 8 of 8
    assert reach["YaRN x2"]["effective"] == 7808 and reach["PI x2"]["effective"] is None  # 2 of 8: no control
    # paired by document: 8 keys the unscaled model misses at 7,808, none the reverse: p = 2 / 2^8
    assert reach["YaRN x2"]["paired"][7808] == (8, 0, pytest.approx(2 / 256))
    assert reach["YaRN x2"]["paired"][2048][:2] == (2, 0)
    assert reach["PI x2"]["paired"][1024] == (0, 8, pytest.approx(2 / 256))
    # beyond the unscaled 1,024, keys per document at 2,048-7,808: YaRN 4 each, unscaled 3,3,3,3,3,2,1,0
    differences = [1, 1, 1, 1, 1, 2, 3, 4]
    half = 2.364624 * statistics.stdev(differences) / 8 ** 0.5  # t quantile, 7 degrees of freedom
    assert reach["YaRN x2"]["beyond"]["interval"] == pytest.approx((1.75, 1.75 - half, 1.75 + half), rel=1e-5)
    assert reach["YaRN x2"]["beyond"]["p"] == 2 / 256  # exact: only all + and all - reach the sum 14
    assert reach["YaRN x2"]["beyond"]["holm"] and reach["PI x2"]["beyond"] is None  # PI: not asked there


def test_the_temperature_arms_change_only_the_attention_temperature_of_their_parent():
    """YaRN x2 without its temperature (cos and sin scaled by 1), Llama 3 x2 with YaRN's (0.1 ln 2 + 1 =
    1.0693147...): each arm's frequencies are its parent's."""
    for arm, expected in (("YaRN x2, t = 1", 1.0), ("Llama 3 x2, YaRN's t", 1.0693147180559945)):
        parent = rm.ARM_PARENTS[arm]
        ours, scale = rope_frequencies(64, base=100_000.0, scaling=rm.TEMPERATURE_ARMS[arm])
        theirs, parent_scale = rope_frequencies(64, base=100_000.0, scaling=rm.RECIPES[parent])
        # exact on any CPU: both tables come from the same operations on the same inputs in this process
        # (the arm changes only attention_factor, which the frequency computation never reads)
        assert torch.equal(ours, theirs) and scale == pytest.approx(expected, rel=1e-12)
        assert parent_scale == pytest.approx({"YaRN x2": 1.0693147180559945, "Llama 3 x2": 1.0}[parent])


def test_the_arms_are_asked_the_passkey_early_then_their_reach_after_every_other_run():
    config = dict(rm.PRESETS["full"])
    keys = rm._keys(config)
    arms = [k for k in keys if k.get("recipe") in rm.TEMPERATURE_ARMS]
    assert keys[-2:] == arms == [{"part": "retrieval", "recipe": arm, "distance": 1024, "probe": "passkey"}
                                 for arm in rm.TEMPERATURE_ARMS]
    assert not any(k["part"] == "extension" and k["recipe"] in rm.TEMPERATURE_ARMS for k in keys)
    runs = [{**arms[0], "accuracy": [1.0] * 8}, {**arms[1], "accuracy": [1.0] * 7 + [0.8]}]  # 7 of 8: below 0.95
    for arm in rm.TEMPERATURE_ARMS:  # every distance within L all the same: each is read against its parent
        reach = [k["distance"] for k in rm._keys(config, runs) if k.get("recipe") == arm]
        assert reach == [256, 2048, 4096, 6144, 7808, 1024]


def test_an_arm_is_read_against_its_parent_document_by_document():
    def run(recipe, distance, right):  # the first ``right`` of 8 documents retrieve the key whole
        return {"part": "retrieval", "recipe": recipe, "distance": distance, "probe": "passkey",
                "accuracy": [1.0] * right + [0.4] * (8 - right)}
    runs = [run("none", d, k) for d, k in {256: 8, 1024: 8, 2048: 6, 4096: 7}.items()]
    runs += [run(r, d, k) for r in ("YaRN x2", "Llama 3 x2") for d, k in {1024: 8, 2048: 8, 4096: 8}.items()]
    runs += [run("YaRN x2, t = 1", d, k) for d, k in {1024: 8, 2048: 8, 4096: 2}.items()]
    record = {"config": {"recipes": ["none", "YaRN x2", "Llama 3 x2"]}, "runs": runs}
    contrasts = rm.arm_contrasts(record)
    assert set(contrasts) == {"YaRN x2, t = 1"}  # the Llama 3 arm is not in yet
    # beyond the unscaled 1,024: keys per document at 2,048 and 4,096, arm 2,2,1,1,1,1,1,1 vs parent 2 each
    differences = [0, 0, -1, -1, -1, -1, -1, -1]
    half = 2.364624 * statistics.stdev(differences) / 8 ** 0.5
    row = contrasts["YaRN x2, t = 1"]
    assert row["parent"] == "YaRN x2"
    assert row["interval"] == pytest.approx((-0.75, -0.75 - half, -0.75 + half), rel=1e-5)
    assert row["p"] == pytest.approx(2 / 64)  # 6 nonzero differences, all of one sign: 2 of 2^6 flips
    assert row["holm"]  # one arm read: its own family


def test_the_four_runs_read_as_a_two_by_two_of_frequencies_and_temperature():
    def run(recipe, distance, right):  # the first ``right`` of 8 documents retrieve the key whole
        return {"part": "retrieval", "recipe": recipe, "distance": distance, "probe": "passkey",
                "accuracy": [1.0] * right + [0.4] * (8 - right)}
    runs = [run("none", d, k) for d, k in {256: 8, 1024: 8, 2048: 6, 4096: 7}.items()]
    beyond = {"YaRN x2": (8, 8), "YaRN x2, t = 1": (8, 6), "Llama 3 x2": (6, 4), "Llama 3 x2, YaRN's t": (8, 4)}
    for recipe, (at_2048, at_4096) in beyond.items():
        runs += [run(recipe, 1024, 8), run(recipe, 2048, at_2048), run(recipe, 4096, at_4096)]
    record = {"config": {"recipes": ["none", "YaRN x2", "Llama 3 x2"]}, "runs": runs}
    assert rm.arm_grid({**record, "runs": runs[:-3]}) == {}  # one of the four missing
    grid = rm.arm_grid(record)
    # keys per document (2,048 and 4,096): YaRN 2 each; YaRN t = 1 2 (documents 0-5), 1; Llama 3 2 (0-3),
    # 1 (4, 5), 0; Llama 3 + t 2 (0-3), 1
    yarn, yarn_t1 = [2] * 8, [2] * 6 + [1] * 2
    llama, llama_t = [2] * 4 + [1] * 2 + [0] * 2, [2] * 4 + [1] * 4
    expected = {"YaRN x2 - Llama 3 x2": [a - b for a, b in zip(yarn, llama)],
                "frequencies, t = 1": [a - b for a, b in zip(yarn_t1, llama)],
                "frequencies, YaRN's t": [a - b for a, b in zip(yarn, llama_t)],
                "frequencies": [(a - b + c - d) / 2 for a, b, c, d in zip(yarn_t1, llama, yarn, llama_t)],
                "temperature": [(a - b + c - d) / 2 for a, b, c, d in zip(yarn, yarn_t1, llama_t, llama)]}
    assert set(grid) == set(expected)
    for name, d in expected.items():
        half = 2.364624 * statistics.stdev(d) / 8 ** 0.5
        assert grid[name]["interval"] == pytest.approx((statistics.fmean(d), statistics.fmean(d) - half,
                                                        statistics.fmean(d) + half), rel=1e-5, abs=1e-9)
    assert grid["YaRN x2 - Llama 3 x2"]["p"] == pytest.approx(2 / 16)  # 4 nonzero, all positive
    assert grid["temperature"]["p"] == pytest.approx(2 / 4)  # documents 6 and 7 gain 1 each, the rest 0


def test_the_negative_probe_has_no_earlier_copy_of_the_segment():
    ids = list(range(100, 1100))
    tokens, copy = rm.induction_probe(ids, 300, 20, seed=3, vocab=49152, prefix=50, repeat=False)
    assert not torch.equal(tokens[0, copy:], tokens[0, 50:70])  # integer token ids: exact
    assert tokens[0, 70:copy].tolist() == ids[70:copy]


def _record(runs, **config):
    return {"config": dict(truncations=[256], bin=1024, cache_tokens=1024, context_tokens=8192,
                           extension_tokens=16384, recipes=["none", "PI x2"], **config), "runs": runs}


def test_far_context_rows_are_the_mean_difference_over_documents_with_holm():
    differences = [0.30, 0.25, 0.35, 0.28]
    record = _record([{"part": "far_context", "last 256, per-token difference": d} for d in differences])
    row = rm.far_context_rows(record)["last 256"]
    mean = sum(differences) / 4
    sd = (sum((d - mean) ** 2 for d in differences) / 3) ** 0.5
    half = 3.182446305284263 * sd / 2  # t(0.975, 3 df), from tables
    assert row["interval"] == pytest.approx((mean, mean - half, mean + half), rel=1e-6)
    assert row["holm"] and row["p"] < 0.001


def test_the_effective_length_is_the_last_distance_before_the_first_failure():
    # NoLiMa's rule: a distance fails when its mean falls below 85% of the shortest distance's (0.85 x 0.9)
    rows = {256: (0.9, 0.8, 1.0), 1024: (0.77, 0.55, 0.85), 2048: (0.76, 0.4, 0.9), 4096: (0.8, 0.7, 0.9),
            "no earlier copy": (0.0, 0.0, 0.0)}
    assert rm.effective_length(rows) == 1024
    assert rm.effective_length({256: (0.4, 0.3, 0.5)}) == 256 and rm.effective_length({}) is None


def test_extension_rows_pair_the_recipes_by_document_with_the_truncated_reading_as_a_row():
    runs = []
    for doc, loss in (("a", 1.0), ("b", 2.0)):
        runs.append({"part": "extension", "recipe": "none", "length": 16384, "doc": {"name": doc},
                     "losses": [loss] * 8 + [loss + 1] * 8, "last 8192": [loss] * 16})
        runs.append({"part": "extension", "recipe": "PI x2", "length": 16384, "doc": {"name": doc},
                     "losses": [loss + 0.5] * 16})
    record = _record(runs)
    rows = rm.extension_rows(record)
    assert rows["none"]["8192-12288"][0] == pytest.approx((math.exp(2.0) + math.exp(3.0)) / 2)
    assert rows["none, last 8192 at once"]["8192-12288"][0] == pytest.approx((math.exp(1.0) + math.exp(2.0)) / 2)
    assert rows["PI x2"]["0-8192"][0] == pytest.approx((math.exp(1.5) + math.exp(2.5)) / 2)
    pairs = rm.extension_pairs(record, (8192, 16384), "none, last 8192 at once")
    # per document: exp(mean of 8 losses of loss + 1) against exp(loss): e - 1 relative, in per cent
    assert pairs["none"]["interval"][0] == pytest.approx(100 * (math.e - 1))
    assert pairs["PI x2"]["interval"][0] == pytest.approx(100 * (math.exp(0.5) - 1))
    assert list(rm.extension_pairs(record, (0, 8192), "none", readings=["PI x2"])) == ["PI x2"]
    curves = rm.extension_curves(record)  # the mean loss per bin over both documents, as perplexity
    assert curves["none"] == pytest.approx([math.exp(1.5)] * 8 + [math.exp(2.5)] * 8)
    assert curves["none, last 8192 at once"] == pytest.approx([math.exp(1.5)] * 16)
    assert rm.extension_curves(_record([])) == {}
    assert rm.extension_documents(record) == ["a", "b"]
    by_doc = rm.extension_by_document(record, (8192, 16384))
    assert by_doc["none"] == pytest.approx({"a": math.exp(2.0), "b": math.exp(3.0)})
    assert rm.extension_documents(_record(runs[:3])) == ["a"]  # b not yet read by PI x2
    assert rm.extension_pairs(_record(runs[:3]), (0, 8192), "none") == {}  # one shared document
    extra = dict(runs[0], doc={"name": "c"}, losses=[9.0] * 16)  # c read by none only: left out
    again = rm.extension_pairs(_record(runs + [extra]), (8192, 16384), "none, last 8192 at once")
    assert again["PI x2"]["interval"] == pytest.approx(pairs["PI x2"]["interval"])
    with pytest.raises(ValueError, match="against"):
        rm.extension_pairs(record, (0, 8192), "YaRN x9")


def test_own_truncated_pairs_set_each_recipe_against_itself_read_8192_at_a_time():
    runs = []
    for doc, loss, gain in (("a", 1.0, 0.10), ("b", 2.0, 0.20), ("c", 1.5, 0.15)):
        runs.append({"part": "extension", "recipe": "none", "length": 16384, "doc": {"name": doc},
                     "losses": [loss] * 16, "last 8192": [loss] * 16})
        runs.append({"part": "extension", "recipe": "PI x2", "length": 16384, "doc": {"name": doc},
                     "losses": [loss] * 15 + [loss - gain]})  # the last bin: better in one pass
        runs.append({"part": "extension", "recipe": "PI x2", "length": 16384, "doc": {"name": doc},
                     "control": "own truncated", "last 8192": [loss + 9] * 15 + [loss]})
    record = _record(runs)
    pairs = rm.own_truncated_pairs(record)  # the last 1,024 positions: exp(-gain) - 1, in per cent
    expected = [100 * (math.exp(-g) - 1) for g in (0.10, 0.20, 0.15)]
    assert pairs["PI x2"]["interval"][0] == pytest.approx(sum(expected) / 3)
    assert list(pairs) == ["PI x2"]  # no own truncated reading of none: not a row
    assert rm.own_truncated_by_document(record)["PI x2"] == pytest.approx(dict(zip("abc", expected)))
    assert rm.own_truncated_pairs(record, span=(0, 1024))["PI x2"]["interval"][0] == pytest.approx(-100 * (1 - math.exp(-9)))
    cost = rm.own_truncated_cost(record, span=(0, 1024))  # own truncated loss + 9 where unscaled reads loss
    assert cost["PI x2"] == pytest.approx(dict.fromkeys("abc", 100 * (math.exp(9) - 1)))
    assert rm.own_truncated_cost(record)["PI x2"] == pytest.approx(dict.fromkeys("abc", 0.0), abs=1e-9)
    plain = [run for run in runs if "control" not in run]  # the own readings change no other reader
    assert rm.extension_rows(record) == rm.extension_rows(_record(plain))
    assert rm.own_truncated_pairs(_record(runs[:3])) == {}  # one document is not a pair


def test_the_own_truncated_run_reads_the_recipe_at_most_the_trained_length_at_a_time():
    config = dict(rm.PRESETS["tiny"], documents=1, doc_tokens=600)
    torch.manual_seed(0)
    model = TransformerLM(5000, 16, 1, 2, position="rope", n_kv_heads=1, bias=False, norm="rms", mlp="swiglu").eval()
    rm._LOADED.clear()
    key = {"part": "extension", "recipe": "YaRN x2", "document": 0, "length": 256, "control": "own truncated"}
    out = rm.measure(model, Characters(), config, key)
    ids = torch.tensor(rm._document_of(config, 0, Characters())["ids"][:256])
    expected = evaluate.truncated_token_losses(model, ids, 255, 128, n_windows=1, stride=64, batch_size=1)[0]
    assert "losses" not in out and out["last 128"] == pytest.approx(rm._binned(expected, 64), rel=1e-5)
    rm._LOADED.clear()


class Small(Characters):
    """Character ids below 60, for the 60-token stream models."""

    def encode(self, text):
        return [ord(c) % 60 for c in text]


def _stream_setup(streams: int):
    """A small Llama-like model and a config with streams of 40 tokens, a cache of 16 and 2 sinks."""
    torch.manual_seed(0)
    model = TransformerLM(60, 16, 1, 2, position="rope", n_kv_heads=1, bias=False, norm="rms", mlp="swiglu").eval()
    return model, dict(rm.PRESETS["tiny"], stream_tokens=40, cache_tokens=16, sink_count=2, bin=8, doc_tokens=100,
                       streams=streams, prose_tokens=50)


def test_streaming_reads_every_stream_of_every_document_as_one_batch():
    model, config = _stream_setup(2)
    rm._LOADED.clear()
    out = rm.measure(model, Small(), config, {"part": "streaming"})
    docs = [rm._document_of(config, d, Small()) for d in range(2)]
    # 100 code tokens hold two streams of 40 (39 inputs + the last target); 50 prose tokens one
    assert [(s["doc"], s["start"]) for s in out["streams"]] == [(docs[0]["name"], 0), (docs[0]["name"], 39),
                                                              (docs[1]["name"], 0)]
    assert len(out["dense"]) == 3 and len(out["dense"][0]) == 5  # 39 positions in bins of 8
    second = evaluate.token_losses(model, torch.tensor(docs[0]["ids"][39:79]), 39, n_windows=1)[0]
    assert out["dense"][1][0] == pytest.approx(float(second[:8].mean()), rel=1e-5)
    prose = torch.tensor(docs[1]["ids"][:40])  # the batched rolling cache equals decoding the stream alone
    alone = evaluate.streaming_token_losses(model, prose, 39, sink_tokens=2, window=14, n_windows=1)[0]
    assert out["rolling, sinks"][2][-1] == pytest.approx(float(alone[32:].mean()), rel=1e-5)
    rm._LOADED.clear()


def test_the_sink_readings_put_each_first_token_before_the_documents_text():
    torch.manual_seed(0)
    model = TransformerLM(5000, 16, 1, 2, position="rope", n_kv_heads=1, bias=False, norm="rms", mlp="swiglu").eval()
    config = dict(rm.PRESETS["tiny"], doc_tokens=200, prose_tokens=100, sink_tokens_read=40)

    class Backend:
        def token_to_id(self, token):
            return {"<|endoftext|>": 4999}[token]

    class Small(Characters):
        backend = Backend()

        def decode(self, ids):
            return "".join(chr(i) for i in ids)

    rm._LOADED.clear()
    out = rm.measure(model, Small(), config, {"part": "sinks", "document": 0})
    ids = rm._document_of(config, 0, Small())["ids"]
    chat = Small().encode("<|im_start|>user\n")
    expected = {"document start (no BOS)": ids[:40], "after <|endoftext|>": [4999] + ids[:39],
                "from the middle": ids[len(ids) // 2:len(ids) // 2 + 40],
                "after <|im_start|>user": chat + ids[:40 - len(chat)]}
    assert list(out["first_token_share"]) == list(expected)
    for name, read in expected.items():
        share = evaluate.first_token_attention(model, torch.tensor([read]), skip=16, by_head=True)
        assert torch.allclose(torch.tensor(out["first_token_share"][name]), torch.tensor(share), rtol=1e-6)
    assert out["first_tokens"]["after <|im_start|>user"] == "<"
    rm._LOADED.clear()


def test_a_resumed_streaming_run_reads_back_the_readings_it_kept(tmp_path, monkeypatch):
    model, config = _stream_setup(1)
    rm._LOADED.clear()
    first = rm.measure(model, Small(), config, {"part": "streaming"}, tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 4  # one file per reading
    calls, rolling = [], rm.evaluate.rolling_cache_losses
    monkeypatch.setattr(rm.evaluate, "rolling_cache_losses", lambda *a, **k: calls.append(a) or rolling(*a, **k))
    again = rm.measure(model, Small(), config, {"part": "streaming"}, tmp_path)
    assert calls == [] and again == first  # nothing recomputed
    rm._LOADED.clear()
    rm.measure(model, Small(), dict(config, sink_count=4), {"part": "streaming"}, tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.glob("*.pt"))) == 8  # another setting is not read back
    rm._LOADED.clear()


def test_a_text_probe_copies_a_given_segment_and_its_negative_plants_it_only_at_the_end():
    ids = list(range(100, 1100))
    segment = list(range(5000, 5020))
    tokens, copy = rm.induction_probe(ids, 300, 20, seed=0, vocab=49152, prefix=50, segment=segment)
    assert tokens[0, 50:70].tolist() == segment and tokens[0, copy:].tolist() == segment
    alone, _ = rm.induction_probe(ids, 300, 20, seed=0, vocab=49152, prefix=50, segment=segment, repeat=False)
    assert alone[0, :copy].tolist() == ids[:copy] and alone[0, copy:].tolist() == segment
    assert rm.text_segment(list(range(100)), 10) == list(range(50, 60))
    record = {"runs": [{"part": "retrieval", "recipe": "none", "distance": 256, "accuracy": [0.5, 0.7]},
                       {"part": "retrieval", "recipe": "none", "distance": 256, "probe": "text",
                        "accuracy": [0.9, 1.0]}]}
    assert rm.retrieval_rows(record)[256][0] == pytest.approx(0.6)
    assert rm.retrieval_rows(record, probe="text")[256][0] == pytest.approx(0.95)


def test_stream_rows_and_pairs_read_every_stream_of_every_run():
    def run(name, starts, values):  # values: {reading: per-stream constant loss}
        return {"part": "streaming", "streams": [{"doc": name, "start": start} for start in starts],
                **{r: [[v] * 4 for v in values[r]] for r in rm.STREAM_READINGS}}

    losses = {"rolling, sinks": [1.0, 2.0], "rolling, no sinks": [1.5, 2.5], "recomputed": [1.0, 2.0],
              "dense": [3.0, 3.0]}
    record = _record([run("a", [0, 4095], losses),
                      run("b", [0], {r: [v[0] + 0.1] for r, v in losses.items()})])
    rows = rm.stream_rows(record)
    assert rows["rolling, sinks"][0] == pytest.approx((math.exp(1.0) + math.exp(2.0) + math.exp(1.1)) / 3)
    pairs = rm.stream_pairs(record, {"no sinks vs sinks": ("rolling, no sinks", "rolling, sinks")})
    expected = [100 * (math.exp(x + 0.5) / math.exp(x) - 1) for x in (1.0, 2.0, 1.1)]
    assert pairs["no sinks vs sinks"]["interval"][0] == pytest.approx(sum(expected) / 3)
    assert rm.stream_rows(record, span=(0, 1024))["dense"][0] == pytest.approx(math.exp(3.0) * 2 / 3 + math.exp(3.1) / 3)
    assert rm.stream_count(record) == 3 and rm.stream_count(_record([])) == 0
    per_stream = rm.stream_perplexities(record, (0, None))["recomputed"]
    assert sorted(per_stream.values()) == pytest.approx(sorted(math.exp(x) for x in (1.0, 2.0, 1.1)))
    # the curve: the mean loss over the three streams per bin, as perplexity
    assert rm.stream_curves(record)["rolling, sinks"] == pytest.approx([math.exp((1.0 + 2.0 + 1.1) / 3)] * 4)
    assert rm.stream_curves(_record([])) == {}


def _toy_runs() -> list[dict]:
    """The runs every toy-claims test needs: frequencies, sinks, far context and two retrieval distances."""
    fast = [1.0] * 32
    fast[3] = 5.0  # a layer whose largest pair turns within 8,192 (pair 3: wavelength ~ 18 tokens)
    slow = [1.0] * 32
    slow[25] = 5.0
    return [{"part": "frequencies", "q": [slow, fast], "k": [slow, slow]},
            *[{"part": "sinks", "first_token_share": {"document start (no BOS)": [[0.001] * 9, [0.001] * 9]}}
              for _ in range(3)],
            *[{"part": "far_context", "last 256, per-token difference": d} for d in (0.3, 0.31, 0.29, 0.3)],
            {"part": "retrieval", "recipe": "none", "distance": 256, "accuracy": [0.9, 0.92, 0.88]},
            {"part": "retrieval", "recipe": "none", "distance": 4096, "accuracy": [0.5, 0.52, 0.48]}]


def test_toy_claims_read_each_conclusion_by_its_rule():
    runs = _toy_runs()
    claims = rm.toy_claims(_record(runs, sink_tokens_read=512))
    verdict = {claim: row["verdict"] for claim, row in claims.items()}
    assert verdict["the slow pairs carry the largest queries and keys (Barbero et al.)"] == "does not hold"
    assert verdict["without a BOS token no first-token sink forms"] == "holds"  # no layer above 20x even
    assert verdict["text gains nothing from context beyond a few hundred tokens"] == "does not hold"
    assert verdict["copying falls short of the trained length (an induction-copy range)"] == "holds"
    assert verdict["sink tokens change nothing measurable in a rolling cache"] == "not run yet"
    assert "1 of 2 layers" in claims["the slow pairs carry the largest queries and keys (Barbero et al.)"][
        "on SmolLM2-135M"]


@pytest.mark.parametrize("recipe_minus_truncated, verdict", [
    ((0.05, 0.06, 0.04), "holds"),  # worse on every document: it cannot be 1% better
    ((-0.30, -0.32, -0.31), "does not hold"),  # resolved better
    ((0.02, -0.03, 0.0), "not resolved")])  # neither: its interval reaches 1% better
def test_no_recipe_beats_the_truncated_reading_needs_evidence_not_its_absence(recipe_minus_truncated, verdict):
    runs = []
    for doc, loss, delta in zip("abc", (1.0, 2.0, 1.5), recipe_minus_truncated):
        late = [loss] * 15 + [loss + 0.2]  # the truncated reading; the last bin is LAST_BIN
        runs.append({"part": "extension", "recipe": "none", "length": 16384, "doc": {"name": doc},
                     "losses": [loss] * 8 + [loss + 3] * 8, "last 8192": late})
        runs.append({"part": "extension", "recipe": "PI x2", "length": 16384, "doc": {"name": doc},
                     "losses": [v + delta for v in late]})
    row = rm.toy_claims(_record(_toy_runs() + runs, sink_tokens_read=512))[
        "no recipe beats the truncated reading on text beyond L"]
    assert row["verdict"] == verdict and "3 documents" in row["on SmolLM2-135M"]


@pytest.mark.parametrize("long_minus_truncated, verdict", [
    ((0.05, 0.06, 0.04), "holds"),  # 4L as 2L: worse on every document
    ((-0.30, -0.32, -0.31), "does not hold"),  # resolved better at 4L, though not at 2L
    ((0.02, -0.03, 0.0), "not resolved"),  # 4L's interval reaches 1% better
    ((-0.30,), "holds")])  # one document at 4L: not read yet, so 2L decides
def test_no_recipe_beats_the_truncated_reading_is_read_at_each_length(long_minus_truncated, verdict):
    runs = []
    for doc, loss in zip("abc", (1.0, 2.0, 1.5)):  # at 2L: PI x2 worse than truncated on every document
        late = [loss] * 15 + [loss + 0.2]
        runs.append({"part": "extension", "recipe": "none", "length": 16384, "doc": {"name": doc},
                     "losses": [loss] * 16, "last 8192": late})
        runs.append({"part": "extension", "recipe": "PI x2", "length": 16384, "doc": {"name": doc},
                     "losses": [v + 0.05 for v in late]})
    for doc, loss, delta in zip("abc", (1.0, 2.0, 1.5), long_minus_truncated):
        late = [loss] * 31 + [loss + 0.2]  # the truncated reading to 32,768; its last bin is the one read
        runs.append({"part": "extension", "recipe": "none", "length": 32768, "doc": {"name": doc},
                     "losses": [loss] * 32, "last 8192": late})
        runs.append({"part": "extension", "recipe": "YaRN x4", "length": 32768, "doc": {"name": doc},
                     "losses": [v + delta for v in late]})
    record = _record(_toy_runs() + runs, sink_tokens_read=512, long_tokens=32768,
                     long_recipes=["none", "YaRN x4"])
    row = rm.toy_claims(record)["no recipe beats the truncated reading on text beyond L"]
    assert row["verdict"] == verdict
    evidence = row["on SmolLM2-135M"]
    assert "of 16,384, 3 documents" in evidence
    assert ("of 32,768, 3 documents" in evidence) == (len(long_minus_truncated) == 3)


def _streamed(per_stream: dict) -> dict:
    """A streaming run whose readings have one constant loss per stream (``{reading: [loss, ...]}``)."""
    starts = range(len(next(iter(per_stream.values()))))
    return {"part": "streaming", "streams": [{"doc": "a", "start": 100 * s} for s in starts],
            **{r: [[v] * 16 for v in per_stream[r]] for r in rm.STREAM_READINGS}}


@pytest.mark.parametrize("sinks_minus_recomputed, verdict", [
    (-0.05, "not resolved"),  # the cache better: recomputation saw fewer tokens, so not a refutation
    (+0.05, "does not hold"),  # the cache worse, though it saw more
    (+0.001, "holds")])  # within +-1% on every stream
def test_a_cache_that_beats_recomputation_does_not_refute_that_they_match(sinks_minus_recomputed, verdict):
    recomputed = [2.0, 2.2, 2.1]
    run = _streamed({"recomputed": recomputed, "rolling, sinks": [x + sinks_minus_recomputed for x in recomputed],
                     "rolling, no sinks": [x + 0.5 for x in recomputed], "dense": [x + 1 for x in recomputed]})
    row = rm.toy_claims(_record(_toy_runs() + [run], sink_tokens_read=512))["a rolling cache with sinks matches recomputation"]
    assert row["verdict"] == verdict
    assert ("recomputation saw 769 to 1,024 tokens" in row["on SmolLM2-135M"]) == (sinks_minus_recomputed < 0)


def test_the_shuffled_control_joins_chunks_of_different_documents():
    config = dict(rm.PRESETS["tiny"], documents=2, doc_tokens=600, context_tokens=128)
    rm._LOADED.clear()
    ids, described = rm._shuffled(config, 0, Characters(), chunk=32)
    docs = [rm._document_of(config, d, Characters())["ids"] for d in range(2)]
    assert len(ids) == 128 and described["kind"] == "shuffled"
    for j in range(4):  # chunk j from document j % 2, at offset 32 j: neighbours from other documents
        assert ids[32 * j:32 * (j + 1)] == docs[j % 2][32 * j:32 * (j + 1)]
    rm._LOADED.clear()


@pytest.mark.parametrize("unscaled_far, recipe_far, verdict", [
    (None, None, "not run yet"),  # no passkey beyond L recorded
    (0.1, None, "not run yet"),  # unscaled fails; no recipe read yet
    (0.1, 0.9, "holds"),  # unscaled fails, PI x2 keeps 0.9 / 1.0 of its own early score
    (0.1, 0.5, "does not hold"),  # the only recipe keeps less than 85%
    (0.95, 0.9, "does not hold")])  # unscaled retrieves there itself
def test_the_beyond_l_claim_reads_the_passkey_asked_beyond_l(unscaled_far, recipe_far, verdict):
    def passkey(recipe, share, prefix=None):  # keys retrieved whole: a share of 20 probes
        key = {"part": "retrieval", "recipe": recipe, "distance": 1024, "probe": "passkey",
               "accuracy": [1.0] * round(20 * share) + [0.8] * (20 - round(20 * share))}
        return key if prefix is None else {**key, "prefix": prefix}

    runs = [passkey("none", 1.0)]
    runs += [passkey("none", unscaled_far, 11264)] if unscaled_far is not None else []
    runs += [passkey("PI x2", 1.0), passkey("PI x2", recipe_far, 11264)] if recipe_far is not None else []
    record = _record(_toy_runs() + runs, sink_tokens_read=512, passkey_distance=1024, passkey_far=[12288])
    row = rm.toy_claims(record)["unscaled, a RoPE model cannot copy from beyond L; the recipes can"]
    assert row["verdict"] == verdict
    if recipe_far is not None:
        assert f"PI x2 {recipe_far:.2f} (1.00 early)" in row["on SmolLM2-135M"]
    # a digit right is not a key right: 0.8 of the digits is a key missed
    assert rm.retrieval_rows(record, probe="passkey")[1024][0] == 1.0
    if unscaled_far is not None:
        late = rm.retrieval_rows(record, probe="passkey")["1024, needle after 11264"]
        assert late[0] == pytest.approx(unscaled_far) and late[1] <= late[0] <= late[2]
        digits = rm.retrieval_rows(record, probe="passkey", digits=True)["1024, needle after 11264"]
        assert digits[0] == pytest.approx(unscaled_far + 0.8 * (1 - unscaled_far))
