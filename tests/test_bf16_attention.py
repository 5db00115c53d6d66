"""The bf16 engine's attention (encode/bf16_attention.py): sdpa's answer within bf16's rounding,
each window's output independent of its batch, padding masked, and anything it does not cover
(fp32, causal, dropout) handed to transformers' sdpa unchanged."""
import pytest
import torch
from hypothesis import given, settings, strategies as st
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ldr.encode.bf16_attention import NAME, use_windowed_attention, windowed_attention


class _Module(torch.nn.Module):
    is_causal = False


def _inputs(rows, heads, n, d, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, heads, n, d, generator=g).bfloat16() for _ in range(3)]


def _mask(lengths, n):
    """sdpa's boolean mask: (rows, 1, n, n), keys past a row's length masked."""
    keep = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    return keep[:, None, None, :].expand(len(lengths), 1, n, n)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=3), heads=st.integers(1, 3),
       d=st.sampled_from([8, 16, 32]), padded=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_windowed_attention_is_sdpa_within_bf16_rounding_and_each_window_its_own(lengths, heads, d, padded, seed):
    n = max(lengths) + (3 if padded else 0)
    q, k, v = _inputs(len(lengths), heads, n, d, seed)
    mask = _mask(lengths, n) if padded or len(set(lengths)) > 1 else None
    got, weights = windowed_attention(_Module(), q, k, v, mask)
    assert weights is None and got.dtype == torch.bfloat16 and got.is_contiguous()
    ref, _ = sdpa_attention_forward(_Module(), q.float(), k.float(), v.float(), mask)
    assert got.shape == ref.shape == (len(lengths), n, heads, d)
    # bf16 keeps 8 bits: scores, probabilities and outputs each round once
    assert (got.float() - ref).abs().max() <= 0.04 * max(1.0, ref.abs().max().item())
    for i, length in enumerate(lengths):      # a window's output does not depend on its company
        alone, _ = windowed_attention(_Module(), q[i:i + 1], k[i:i + 1], v[i:i + 1],
                                      None if mask is None else mask[i:i + 1])
        assert torch.equal(alone[0], got[i]), i
        # and padded keys are not attended to: changing them changes nothing
        if length < n:
            k2, v2 = k[i:i + 1].clone(), v[i:i + 1].clone()
            k2[..., length:, :] = 7.0
            v2[..., length:, :] = -7.0
            moved, _ = windowed_attention(_Module(), q[i:i + 1], k2, v2, mask[i:i + 1])
            assert torch.equal(moved[0, :], got[i]), i


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 24), rows=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_any_other_boolean_mask_is_applied_as_given(n, rows, seed):
    """Right padding is found and filled column-wise; a mask that is not (holes, or one that differs
    per query) is applied as it is: sdpa's answer either way."""
    from ldr.encode.bf16_attention import key_lengths

    g = torch.Generator().manual_seed(seed)
    q, k, v = _inputs(rows, 2, n, 8, seed)
    mask = torch.rand(rows, 1, n, n, generator=g) < 0.7
    mask[..., 0] = True                              # every query sees a key
    lengths = torch.randint(1, n + 1, (rows,), generator=g).tolist()
    padded = _mask(lengths, n)
    assert key_lengths(padded, rows, n) == lengths
    assert key_lengths(padded[:1], rows, n) == lengths[:1] * rows      # one mask for the batch
    assert key_lengths(None, rows, n) == [n] * rows
    holes = padded.clone()
    holes[..., 0] = False
    if any(length > 1 for length in lengths):
        assert key_lengths(holes, rows, n) is None
    for m in (mask, padded):
        got, _ = windowed_attention(_Module(), q, k, v, m)
        ref, _ = sdpa_attention_forward(_Module(), q.float(), k.float(), v.float(), m)
        assert (got.float() - ref).abs().max() <= 0.04 * max(1.0, ref.abs().max().item())


def test_what_it_does_not_cover_goes_to_sdpa_unchanged():
    q, k, v = _inputs(2, 2, 10, 8, 0)
    causal = _Module()
    causal.is_causal = True
    for module, args, kw in ((_Module(), (q.float(), k.float(), v.float()), {}),      # fp32
                             (causal, (q, k, v), {}),                               # causal
                             (_Module(), (q, k, v), {"dropout": 0.0, "is_causal": True})):
        got, _ = windowed_attention(module, *args, None, **kw)
        ref, _ = sdpa_attention_forward(module, *args, None, **kw)
        assert torch.equal(got, ref)


def test_the_bf16_encoders_run_it_and_other_engines_keep_sdpa(monkeypatch):
    from ldr.encode import plain_bert
    from ldr.encode.dense import DenseEncoder, DenseSettings

    enc = DenseEncoder(DenseSettings(device="cpu", max_length=64), bf16=True)
    assert isinstance(enc.hf, plain_bert.PlainBert)         # it calls windowed_attention itself
    monkeypatch.setattr(plain_bert, "plain_folder", lambda path: None)    # a folder it does not cover
    enc = DenseEncoder(DenseSettings(device="cpu", max_length=64), bf16=True)
    assert enc.hf.config._attn_implementation == NAME
    fp32 = DenseEncoder(DenseSettings(device="cpu", max_length=64))
    assert fp32.hf.config._attn_implementation == "sdpa"
    fp32.hf.config._attn_implementation = "eager"        # an extension's or an export's own attention
    assert use_windowed_attention(fp32.hf) is False and fp32.hf.config._attn_implementation == "eager"


if __name__ == "__main__":
    pytest.main([__file__])
