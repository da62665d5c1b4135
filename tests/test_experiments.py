"""The experiment machinery: data split, evaluation windows, task batches, resume, checkpoints, torchrun."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from posenc import TransformerLM, data
from posenc.experiments import load_checkpoint, run_study, save_checkpoint
from posenc.train import TrainConfig, exact_match, learning_rate, perplexity, task_accuracy, train_model


def test_split_is_by_file_with_no_validation_file_in_training():
    training, validation = data.split_files(600_000, 0.1)
    assert validation and training
    assert not set(training) & set(validation)
    chosen = sorted(training + validation)
    assert validation == chosen[9::10]  # every 10th file, in sorted order
    train_bytes, validation_bytes = data.stdlib_split(600_000, 0.1)
    assert train_bytes.numel() == sum(p.stat().st_size for p in training)
    assert validation_bytes.tolist()[:100] == list(validation[0].read_bytes()[:100])


def test_perplexity_uses_non_overlapping_windows():
    """A model that always predicts uniformly has perplexity = vocabulary size; count the windows used."""
    calls = []

    class Uniform(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))

        def forward(self, tokens):
            calls.append(tokens.clone())
            return torch.zeros(*tokens.shape, 256)

    stream = torch.arange(1000) % 256
    value = perplexity(Uniform(), stream, 100, batch_size=4)
    assert math.isclose(value, 256.0, rel_tol=1e-5)
    windows = torch.cat(calls)
    assert windows.shape == (9, 100)  # (1000 - 1) // 100 windows, each of 100 inputs
    assert torch.equal(windows[:, 0], torch.arange(0, 900, 100) % 256)  # starts 0, 100, 200, ...
    assert perplexity(Uniform(), stream, 100, max_windows=3) == pytest.approx(256.0, rel=1e-5)


def test_task_batches_score_only_the_answer():
    tokens, targets = data.task_batch("reverse", 3, 5, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == targets.shape == (3, 11)
    assert torch.all(tokens[:, 5] == 16)  # separator
    assert torch.equal(tokens[:, 6:], tokens[:, :5].flip(1))  # the answer is the reversed input
    assert torch.equal(targets[:, 5:10], tokens[:, 6:11])  # each position predicts the next token
    assert torch.all(targets[:, :5] == -100) and torch.all(targets[:, 10] == -100)


def test_exact_match_of_a_perfect_and_a_wrong_model():
    class Oracle(torch.nn.Module):
        def __init__(self, shift):
            super().__init__()
            self.shift, self.dummy = shift, torch.nn.Parameter(torch.zeros(1))

        def forward(self, tokens):  # predicts the next token (shift=1) or the current one (shift=0)
            nxt = torch.roll(tokens, -self.shift, dims=1)
            return torch.nn.functional.one_hot(nxt, 17).float()

    batches = lambda g: data.task_batch("copy", 8, 4, generator=g)
    assert exact_match(Oracle(1), batches) == 1.0
    assert exact_match(Oracle(0), batches) < 0.01


def test_token_accuracy_counts_answer_tokens_only():
    class OffByOneAtStart(torch.nn.Module):  # right on every answer token except the first
        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))

        def forward(self, tokens):
            nxt = torch.roll(tokens, -1, dims=1)
            n = (tokens.shape[1] - 1) // 2
            nxt[:, n] = (nxt[:, n] + 1) % data.TASK_VOCAB  # the separator's prediction is wrong
            return torch.nn.functional.one_hot(nxt, 17).float()

    scores = task_accuracy(OffByOneAtStart(), lambda g: data.task_batch("reverse", 8, 5, generator=g))
    assert scores == {"exact_match": 0.0, "token_accuracy": 4 / 5}


def test_warmup_then_cosine():
    config = TrainConfig(steps=100, lr=1.0, warmup=10, min_lr_ratio=0.1)
    assert learning_rate(0, config) == pytest.approx(0.1) and learning_rate(9, config) == pytest.approx(1.0)
    assert learning_rate(10, config) == pytest.approx(1.0)
    assert learning_rate(55, config) == pytest.approx(0.1 + 0.9 * 0.5)
    assert learning_rate(100, config) == pytest.approx(0.1)


def test_training_is_seeded():
    def run():
        torch.manual_seed(0)
        model = TransformerLM(17, 16, 1, 2, position="rope")
        history = train_model(model, lambda g: data.task_batch("copy", 4, 3, generator=g),
                              TrainConfig(steps=5, warmup=1, log_every=5))
        return history, model.head.weight.detach().clone()

    (h1, w1), (h2, w2) = run(), run()
    assert h1 == h2 and torch.equal(w1, w2)


def test_resume_skips_finished_runs_and_checkpoints_load_safely(tmp_path):
    out = tmp_path / "h.json"
    first = run_study("length_generalisation", "tiny", out, methods=["none"], seeds=[0], log=lambda *a: None)
    assert [(r["method"], r["seed"]) for r in first["runs"]] == [("none", 0)]
    messages = []
    second = run_study("length_generalisation", "tiny", out, methods=["none"], seeds=[0], resume=True,
                       log=messages.append)
    assert second["runs"] == first["runs"] and "already done" in messages[0]
    record = json.loads(out.read_text())
    assert record["environment"]["torch"] == torch.__version__ and record["config"]["methods"] == ["none"]
    with pytest.raises(ValueError, match="different configuration"):
        run_study("length_generalisation", "tiny", out, methods=["rope"], seeds=[0], resume=True,
                  log=lambda *a: None)

    model = TransformerLM(17, 16, 1, 2, position="alibi")
    save_checkpoint(model, tmp_path / "m.pt", {"method": "alibi"})
    loaded = load_checkpoint(tmp_path / "m.pt")  # weights_only=True: tensors and plain data only
    assert loaded["meta"]["method"] == "alibi"
    restored = TransformerLM(17, 16, 1, 2, position="alibi")
    restored.load_state_dict(loaded["state_dict"])
    assert torch.equal(restored.head.weight, model.head.weight)


def test_two_process_torchrun_on_cpu(tmp_path):
    """Both processes train; process 0 evaluates and shares each run, so both pick the same sweep winner."""
    out = tmp_path / "ddp.json"
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    result = subprocess.run([torchrun, "--nproc_per_node=2", "--master_port=29517", "-m", "posenc.experiments",
                             "head_to_head", "--preset", "tiny", "--methods", "rope", "--threads", "1",
                             "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["environment"]["world_size"] == 2
    assert [(r["method"], r["seed"]) for r in record["runs"]] == [("rope", 0), ("rope", 0), ("rope", 1)]
    assert all(value["perplexity"] > 1 for value in record["runs"][0]["perplexity"].values())


def test_command_line_of_a_record():
    from posenc.experiments import command_line

    expected = "python -m posenc.experiments head_to_head --preset full"
    assert command_line({"command": "/some/where/posenc/experiments.py head_to_head --preset full"}) == expected
    assert command_line({"command": "python -m posenc.experiments head_to_head --preset full"}) == expected


def test_bits_per_byte():
    from posenc.experiments import bits_per_byte

    assert bits_per_byte(256.0) == pytest.approx(8.0)  # uniform over bytes: 8 bits
    assert bits_per_byte(1.0) == 0.0
    assert 2 ** bits_per_byte(4.33) == pytest.approx(4.33)
    with pytest.raises(ValueError, match="perplexity must be >= 1"):
        bits_per_byte(0.5)




def test_command_line_quotes_method_names_with_spaces():
    import shlex
    from posenc.experiments import command_line
    record = {"command": "python -m posenc.experiments streaming --preset full --methods rope with learned sinks "
                         "--out s.json", "config": {"methods": ["rope", "rope with learned sinks", "alibi"]}}
    shown = command_line(record)
    assert shown == ("python -m posenc.experiments streaming --preset full --methods 'rope with learned sinks' "
                     "--out s.json")
    assert shlex.split(shown)[shlex.split(shown).index("--methods") + 1] == "rope with learned sinks"
    assert command_line({"command": shown, "config": record["config"]}) == shown  # already quoted: unchanged


def test_results_record_the_commit_of_the_code():
    import subprocess
    from pathlib import Path

    import posenc.experiments as experiments

    root = Path(experiments.__file__).resolve().parent.parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    code = experiments.environment()["code"]
    if head.returncode:  # posenc installed outside a checkout
        assert code == {"commit": None}
    else:
        assert code["commit"] == head.stdout.strip() and isinstance(code["dirty"], bool)


def test_load_result_reads_the_committed_file_and_names_the_choices():
    from pathlib import Path
    import json
    import posenc
    from posenc.experiments import load_result
    path = Path(posenc.__file__).parent / "results" / "streaming_full.json"
    assert load_result("streaming_full") == json.loads(path.read_text())
    with pytest.raises(ValueError, match="name must be a committed result.*streaming_full"):
        load_result("streaming_ful")
