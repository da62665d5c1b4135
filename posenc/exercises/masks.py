"""Masks and the layers that read order from them: the causal mask (chapter 1), position from the causal
mask (chapter 9), the sliding window (chapter 15), the Forgetting Transformer's bias (chapter 16),
learned sinks (chapter 17), Llama 4's chunked mask (chapter 19) and its attention temperature (chapter 20)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..masks import causal_mask, chunked_mask, sliding_window_mask
from ..mixers.forgetting import forget_bias
from ..sinks import sink_attention
from ..temperature import attention_temperature
from ._common import ExerciseFailed, _as_tensor, _close, _diagnose, _passed, _check_mask


def check_causal_mask(fn) -> bool:
    """``fn(seq) -> bool [seq, seq]``, True where key j <= query i."""
    for seq in (5, 17, 1):
        expected = causal_mask(seq, seq)
        _check_mask(f"causal mask ({seq})", fn(seq), expected,
                    {"a query must see itself: the diagonal is visible": causal_mask(seq, seq) & ~torch.eye(seq, dtype=torch.bool),
                     "this is the transpose: query i (row) sees keys j <= i (columns)": expected.T})
    return _passed("causal mask")



# ---- chapter 9: position from the causal mask ----------------------------------------------------------

def _counting_layer(tokens: torch.Tensor, bos: int, *, causal: bool = True) -> torch.Tensor:
    """Kazemnejad et al.'s construction, ``[seq]`` float64: uniform attention over the keys each query may
    see, values 1 at the BOS token and 0 elsewhere, read out as ``1 / share - 1``."""
    seq = tokens.shape[0]
    visible = causal_mask(seq, seq) if causal else torch.ones(seq, seq, dtype=torch.bool)
    weights = visible.double() / visible.sum(dim=-1, keepdim=True)  # every score 0: even weights
    share = weights @ (tokens == bos).double()  # BOS's share of each output
    return 1 / share - 1



def check_counting_layer(fn) -> bool:
    """``fn(tokens[seq], bos) -> [seq]``: the position each token reads off one causal attention layer with
    zero queries and values marking the BOS token, ``1 / share - 1``."""
    generator = torch.Generator().manual_seed(0)
    ordinary = torch.randint(1, 256, (59,), generator=generator)
    for tokens, bos in ((torch.cat([torch.tensor([0]), ordinary[:39]]), 0), (torch.tensor([7]), 7),
                        (torch.tensor([5, 1, 5, 2, 3]), 5),  # a BOS that comes again (exercise 1)
                        (torch.cat([torch.tensor([0]), ordinary[:9], torch.tensor([0]), ordinary[9:]]), 0)):
        expected = _counting_layer(tokens, bos)
        answer = _as_tensor("the positions", fn(tokens, bos), expected.shape)
        if not _close(answer, expected, 1e-6):
            known = {"one too large: 1 / share counts the tokens up to i, 1 .. i + 1; the position is "
                     "1 / share - 1": expected + 1,
                     "this is BOS's share of the output, 1 / (i + 1); the position read from it is "
                     "1 / share - 1": 1 / (expected + 1),
                     "every query sees every key: with the causal mask query i averages tokens 0 .. i only":
                         _counting_layer(tokens, bos, causal=False),
                     "this is arange(seq), not what the layer computes: with a second BOS token the share "
                     "doubles from there on (chapter 9's exercise 1)": torch.arange(len(tokens)).double()}
            _diagnose(f"counting layer ({len(tokens)} tokens, BOS {bos})", answer, expected, known, 1e-6)
    return _passed("counting layer")



def check_sliding_window_mask(fn) -> bool:
    """``fn(seq, window) -> bool [seq, seq]``: causal and ``i - j < window`` (the query itself included)."""
    for seq, window in ((10, 3), (16, 1), (7, 7), (20, 5)):
        expected = sliding_window_mask(seq, seq, window)
        wider = sliding_window_mask(seq, seq, window + 1) if window < seq else expected
        _check_mask(f"sliding window ({seq}, window {window})", fn(seq, window), expected,
                    {f"each query sees {window + 1} tokens: with window w a query sees itself and the w - 1 before "
                     f"it (i - j < w), Hugging Face's convention": wider})
    return _passed("sliding-window mask")



def check_forget_bias(fn) -> bool:
    """``fn(log_f[..., seq]) -> [..., seq, seq]``: ``sum_{t=j+1..i} log f_t`` on and below the diagonal, ``-inf``
    above it."""
    generator = torch.Generator().manual_seed(1)
    log_f = torch.nn.functional.logsigmoid(torch.randn(2, 3, 9, generator=generator, dtype=torch.float64))
    expected = forget_bias(log_f)
    answer = _as_tensor("the bias", fn(log_f), expected.shape)
    finite = torch.isfinite(expected)
    # float32 answers are fine: about 1e-7 relative is float32's rounding (review P6-m5)
    if not (torch.equal(torch.isfinite(answer), finite) and _close(answer[finite], expected[finite], 1e-6, 1e-5)):
        c = log_f.cumsum(-1)
        inclusive = (c[..., :, None] - c[..., None, :] + log_f[..., None, :]).masked_fill(~finite, -math.inf)
        known = {"the sum includes the key's own gate (t = j); it runs from t = j + 1, so a token's gate charges "
                 "only the keys before it": inclusive,
                 "the future is not masked: above the diagonal the bias should be -inf":
                     (c[..., :, None] - c[..., None, :]),
                 "the sign is flipped: log f <= 0 is added, so older keys lose score": -expected}
        for mistake, wrong in known.items():
            if torch.equal(torch.isfinite(answer), torch.isfinite(wrong)) and \
                    _close(answer[torch.isfinite(wrong)], wrong[torch.isfinite(wrong)], 1e-6, 1e-5):
                raise ExerciseFailed(f"forget bias: {mistake}")
        raise ExerciseFailed("forget bias: differs from posenc.mixers.forgetting.forget_bias (compare one row by hand)")
    return _passed("forget bias")



# ---- chapter 17: learned sinks -------------------------------------------------------------------------

def check_sink_attention(fn) -> bool:
    """``fn(q, k, v, sinks[heads], mask) -> [batch, heads, q_len, head_dim]``: ``softmax([q k^T / sqrt(d),
    sink])`` with the sink's column dropped, times v; ``mask`` is boolean ``[q_len, k_len]``, True where
    query i may see key j. Compared in float64 with ``posenc.sink_attention``."""
    generator = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(3, 2, 3, 7, 8, generator=generator, dtype=torch.float64).unbind(0)
    for q_len, logits in ((7, [-1.0, 0.0, 2.0]), (2, [0.5, 3.0, -2.0]), (7, [8.0, 8.0, 8.0])):
        sinks, mask, query = torch.tensor(logits, dtype=torch.float64), causal_mask(q_len, 7), q[:, :, -q_len:]
        expected = sink_attention(query, k, v, sinks, mask=mask)
        answer = _as_tensor("the output", fn(query.clone(), k.clone(), v.clone(), sinks.clone(), mask.clone()),
                            expected.shape)
        if not _close(answer, expected, 1e-6, 1e-5):  # float32 answers pass (review P6-m5)
            known = {"this is plain attention: the sink changes nothing (left out, added to every score, or the "
                     "weights renormalised after its column is dropped); it is one more column of the scores, "
                     "dropped after the softmax": F.scaled_dot_product_attention(query, k, v, attn_mask=mask),
                     "the scores are not scaled by 1 / sqrt(head_dim) (the sink logit is not scaled)":
                         sink_attention(query, k, v, sinks, mask=mask, scale=1.0),
                     "the sink logit has the wrong sign: a larger sink takes more of the weight":
                         sink_attention(query, k, v, -sinks, mask=mask)}
            _diagnose(f"sink attention (q_len {q_len}, sinks {logits})", answer, expected, known, 1e-6, 1e-5)
    return _passed("sink attention")



# ---- chapter 19: chunked attention ---------------------------------------------------------------------

def check_chunked_mask(fn) -> bool:
    """``fn(seq, chunk) -> bool [seq, seq]``: causal, and query and key in the same block of ``chunk`` tokens
    (Llama 4's chunked attention), as ``posenc.chunked_mask``."""
    for seq, chunk in ((12, 4), (10, 3), (5, 5), (7, 1), (6, 8)):
        expected = chunked_mask(seq, seq, chunk)
        i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
        _check_mask(f"chunked mask ({seq}, chunk {chunk})", fn(seq, chunk), expected,
                    {"this is a sliding window (i - j < chunk); chunks restart at every multiple of chunk: query "
                     "i sees the keys j <= i with j // chunk == i // chunk": sliding_window_mask(seq, seq, chunk),
                     "a query sees the later keys of its chunk: within a chunk the mask is still causal":
                         i // chunk == j // chunk,
                     "the chunk boundaries are one token early (positions counted from 1): token i, counted "
                     "from 0, is in chunk i // chunk":
                         (j <= i) & ((i + 1) // chunk == (j + 1) // chunk)})
    return _passed("chunked mask")



# ---- chapter 20: Llama 4's attention temperature -------------------------------------------------------

def check_attention_temperature(fn) -> bool:
    """``fn(positions, floor_scale, scale)`` -> factors shaped like ``positions``:
    ``1 + scale * ln(1 + floor((p + 1) / floor_scale))``, as ``posenc.attention_temperature``."""
    edges = torch.tensor([0, 1, 8190, 8191, 8192, 16382, 16383, 16384, 100_000, 1_000_000])
    for positions, floor_scale, scale in ((edges, 8192, 0.1), (torch.arange(40).view(2, 20), 8, 0.5)):
        expected = attention_temperature(positions, floor_scale=floor_scale, scale=scale).double()
        answer = _as_tensor("the factors", fn(positions.clone(), floor_scale, scale), positions.shape)
        if not _close(answer, expected, 1e-5):
            p = positions.double()
            known = {"the steps come one position late: floor(p / floor_scale) is Mistral's form; Llama 4's "
                     "is floor((p + 1) / floor_scale)": 1 + scale * torch.log1p(torch.floor(p / floor_scale)),
                     "the factor grows smoothly; Llama 4's is a staircase, floor((p + 1) / floor_scale)":
                         1 + scale * torch.log1p((p + 1) / floor_scale),
                     "the factor starts at 0; it is 1 + scale * ln(...), exactly 1 for the first "
                     "floor_scale - 1 positions": scale * torch.log1p(torch.floor((p + 1) / floor_scale))}
            _diagnose(f"attention temperature (floor_scale {floor_scale}, scale {scale})", answer, expected,
                      known, 1e-5)
    return _passed("attention temperature")

