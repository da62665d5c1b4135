import pytest
import torch

from posenc import T5RelativeBias, t5_relative_bucket

# Worked by hand from T5's rule: distances below max_exact get their own bucket; beyond that
# bucket = max_exact + floor(log(d / max_exact) / log(max_distance / max_exact) * (buckets - max_exact)).
BIDIRECTIONAL = {  # num_buckets=32 -> 16 per direction, max_exact=8, max_distance=128
    0: 0, -1: 1, -7: 7, -8: 8, -12: 9, -20: 10, -100: 15, -127: 15, -1000: 15,
    1: 17, 7: 23, 8: 24, 12: 25, 128: 31, 5000: 31,
}
CAUSAL = {  # num_buckets=32, max_exact=16; future keys (positive offsets) all map to bucket 0
    5: 0, 1: 0, 0: 0, -5: 5, -15: 15, -16: 16, -20: 17, -100: 30, -128: 31, -10_000: 31,
}


@pytest.mark.parametrize("bidirectional,table", [(True, BIDIRECTIONAL), (False, CAUSAL)])
def test_hand_worked_buckets(bidirectional, table):
    relative = torch.tensor(list(table))
    got = t5_relative_bucket(relative, bidirectional=bidirectional)
    assert got.dtype == torch.long
    assert got.tolist() == list(table.values())


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", [(True, 32, 128), (False, 32, 128),
                                                                    (True, 8, 20), (False, 16, 64)])
def test_buckets_equal_hugging_face_t5(bidirectional, num_buckets, max_distance):
    from transformers.models.t5 import modeling_t5 as t5  # the reference implementation (pinned in requirements)

    relative = torch.arange(-300, 301)
    expected = t5.T5Attention._relative_position_bucket(relative, bidirectional, num_buckets, max_distance)
    got = t5_relative_bucket(relative, bidirectional=bidirectional, num_buckets=num_buckets,
                             max_distance=max_distance)
    assert torch.equal(got, expected)


def test_bias_module_looks_up_buckets_with_query_offset():
    torch.manual_seed(0)
    module = T5RelativeBias(3, bidirectional=False, num_buckets=8, max_distance=16)
    bias = module(2, 5)  # queries at positions 3 and 4
    assert bias.shape == (3, 2, 5)
    table = module.table.weight.detach()
    for h in range(3):
        for i in range(2):
            for j in range(5):
                bucket = t5_relative_bucket(torch.tensor(j - (i + 3)), bidirectional=False, num_buckets=8,
                                            max_distance=16)
                assert bias[h, i, j].item() == table[bucket, h].item()


def test_a_learned_t5_bias_takes_the_math_kernel_in_training_and_the_fused_one_at_inference():
    # what posenc.bench's T5_TRAINING_NOTE and chapter 5 say: PyTorch's CPU dispatcher refuses a mask that
    # requires grad, so the fused kernel runs only when the bias needs no gradient
    from torch.profiler import ProfilerActivity, profile

    from posenc import TransformerLM

    def kernels(fn):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        return {e.key for e in prof.key_averages() if e.key.startswith("aten::_scaled_dot_product")}

    torch.manual_seed(0)
    x = torch.randint(0, 64, (2, 16))
    for position, in_training in (("t5", "aten::_scaled_dot_product_attention_math"),
                                  ("alibi", "aten::_scaled_dot_product_flash_attention_for_cpu")):
        model = TransformerLM(64, 32, 1, 4, position=position)
        training = kernels(lambda: model(x).sum().backward())
        with torch.no_grad():
            inference = kernels(lambda: model(x[:, :8]))
        assert in_training in training, (position, training)
        assert inference == {"aten::_scaled_dot_product_flash_attention_for_cpu"}, (position, inference)
