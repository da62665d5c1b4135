"""posenc.studies.real_model (issue 39): the pieces of the real-model study, checked without the model."""

from __future__ import annotations

import pytest
import torch

from posenc import TransformerLM
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
