"""Each context-extension method against its defining property (tiny random models)."""
import math

import numpy as np
import pytest
import torch

from ldr.encode import extend
from ldr.encode.chunking import passages, pcw_chunks
from ldr.encode.dense import DenseEncoder, DenseSettings
from ldr.errors import ConfigError
from tiny_models import make

TEXT = "the quick brown fox jumps over the lazy dog " * 3          # ~27 tokens, inside 64
LONG = "alpha beta gamma delta epsilon zeta eta theta iota kappa " * 20  # ~200 tokens, beyond 64


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("tiny")
    return {k: str(make(k, base / k)) for k in ("bert", "modernbert", "qwen3")}


def enc(path, strategy="truncate", **kw):
    return DenseEncoder(DenseSettings(model=path, strategy=strategy, device="cpu", **kw))


# -- pure position mappings ------------------------------------------------------------------
def test_ape_position_maps():
    assert extend.ape_position_ids("gp", 10, 4, 3).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert extend.ape_position_ids("rp", 10, 4, 3).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert extend.ape_position_ids("pi", 4, 4, 3).tolist() == [0, 3, 6, 9]      # fits: original rows
    assert extend.ape_position_ids("pi", 6, 4, 3).tolist() == [0, 1, 2, 3, 4, 5]


def test_pi_table_interpolation_points_equal_original_rows():
    w = torch.randn(8, 5)
    t = extend.interpolate_table(w, 4)
    assert t.shape == (32, 5)
    assert torch.equal(t[::4], w)
    assert torch.allclose(t[1], 0.75 * w[0] + 0.25 * w[1])
    assert torch.allclose(t[2], 0.5 * (w[0] + w[1]))


def test_chunking():
    ids = list(range(10))
    assert pcw_chunks(ids, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [6, 7, 8, 9]]   # last chunk full
    assert pcw_chunks(ids[:3], 4) == [[0, 1, 2]]
    assert passages(ids, 4, 2) == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]]
    assert passages(ids, 4, 3) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]


# -- APE (BERT) ------------------------------------------------------------------------------
def test_ape_pi_short_inputs_encode_exactly_as_before(models):
    plain = enc(models["bert"])
    pi = enc(models["bert"], "pi", target_length=256)
    assert pi.hf.embeddings.position_embeddings.num_embeddings == 256
    assert np.allclose(plain.encode_documents([TEXT])[0], pi.encode_documents([TEXT])[0], atol=1e-6)
    v, owner = pi.encode_documents([LONG])       # 4x the trained window in one pass
    assert v.shape == (1, 64) and np.isfinite(v).all() and owner.tolist() == [0]


@pytest.mark.parametrize("method", ["gp", "rp"])
def test_ape_gp_rp_encode_beyond_the_window(models, method):
    e = enc(models["bert"], method, target_length=256)
    seen = []
    e.hf.embeddings.position_embeddings.register_forward_hook(lambda m, inp, out: seen.append(inp[0][0].tolist()))
    v, _ = e.encode_documents([LONG])
    n = len(seen[0])
    assert n > 64
    expected = extend.ape_position_ids(method, n, 64, 4).tolist()
    assert seen[0] == expected and np.isfinite(v).all()


def test_ape_rejects_rope_methods(models):
    with pytest.raises(ConfigError, match="rotary"):
        enc(models["bert"], "ntk")


# -- RoPE (ModernBERT, Qwen3) ----------------------------------------------------------------
@pytest.mark.parametrize("arch", ["modernbert", "qwen3"])
def test_ntk_changes_only_the_rotary_base(models, arch):
    plain = enc(models[arch])
    ntk = enc(models[arch], "ntk", target_length=256)          # s = 4 → λ = 5 (LongEmbed)
    assert ntk.ext_info["ntk_lambda"] == 5.0
    before = {n: b for n, b in plain.hf.named_buffers() if n.endswith("inv_freq")}
    after = {n: b for n, b in ntk.hf.named_buffers() if n.endswith("inv_freq")}
    assert before.keys() == after.keys() and before
    for n in before:
        assert math.isclose(extend.rope_base(after[n]), 5.0 * extend.rope_base(before[n]), rel_tol=1e-4)
    ps, ns = plain.hf.state_dict(), ntk.hf.state_dict()
    assert all(torch.equal(ps[k], ns[k]) for k in ps)             # weights untouched
    assert not np.allclose(plain.encode_documents([TEXT])[0], ntk.encode_documents([TEXT])[0])


@pytest.mark.parametrize("arch", ["modernbert", "qwen3"])
def test_rope_pi_divides_positions(models, arch):
    plain = enc(models[arch])
    pi = enc(models[arch], "pi", target_length=256)
    for (n, a), (_, b) in zip(plain.hf.named_buffers(), pi.hf.named_buffers()):
        if n.endswith("inv_freq"):
            assert torch.allclose(b, a / 4)


@pytest.mark.parametrize("arch", ["modernbert", "qwen3"])
def test_selfextend_equals_plain_attention_when_window_covers_input(models, arch):
    texts = [TEXT, "a shorter text, padded in the same batch"]
    plain = enc(models[arch]).encode_documents(texts)[0]
    wide = enc(models[arch], "selfextend", target_length=256, group=4, window=64).encode_documents(texts)[0]
    assert np.allclose(plain, wide, atol=1e-5)
    # g = 1 means no grouping: undoing and redoing the rotation must give plain attention back
    g1 = enc(models[arch], "selfextend", target_length=256, group=1, window=4).encode_documents(texts)[0]
    assert np.allclose(plain, g1, atol=1e-4)
    grouped = enc(models[arch], "selfextend", target_length=256, group=4, window=4).encode_documents([LONG])[0]
    assert np.isfinite(grouped).all()


def test_selfextend_attention_uses_grouped_positions_beyond_the_window():
    """Scores against a direct reference: rotate raw q/k at the SelfExtend positions."""
    torch.manual_seed(0)
    n, d, g, w = 12, 8, 3, 4
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    q_raw, k_raw, v = torch.randn(1, 2, n, d), torch.randn(1, 2, n, d), torch.randn(1, 2, n, d)
    pos = torch.arange(n)
    q, k = extend._rotate(q_raw, pos, inv_freq), extend._rotate(k_raw, pos, inv_freq)

    class Layer(torch.nn.Module):
        _ldr_ext = {"trained": 64, "group": g, "window": w, "attn_scaling": False, "inv_freq": lambda: inv_freq}

    _, weights = extend._extended_attention(Layer(), q, k, v, None, scaling=1.0)
    shift = w - w // g
    expected = torch.zeros(1, 2, n, n)
    for i in range(n):
        for j in range(n):
            if abs(i - j) < w:
                pi, pj = i, j
            else:
                pi, pj = (i // g + shift if i > j else i // g - shift), j // g
            qi = extend._rotate(q_raw[:, :, i:i + 1], torch.tensor([pi]), inv_freq)
            kj = extend._rotate(k_raw[:, :, j:j + 1], torch.tensor([pj]), inv_freq)
            expected[..., i, j] = (qi * kj).sum(-1)[..., 0]
    assert torch.allclose(weights, torch.softmax(expected, dim=-1), atol=1e-5)
    # relative distance is continuous at the window edge: |i - j| = w maps to w - w//g + (i//g - j//g) ≈ w


def test_attention_scaling_is_identity_within_the_window(models):
    plain = enc(models["qwen3"]).encode_documents([TEXT])[0]
    scaled = enc(models["qwen3"], "ntk", target_length=256, attn_scaling=True)
    base = enc(models["qwen3"], "ntk", target_length=256)
    assert np.allclose(scaled.encode_documents([TEXT])[0], base.encode_documents([TEXT])[0], atol=1e-5)
    assert not np.allclose(scaled.encode_documents([LONG])[0], base.encode_documents([LONG])[0], atol=1e-5)
    assert plain.shape == (1, 64)


# -- batch independence and the target-length guard -----------------------------------------
BATCH_CASES = [("bert", "truncate", {}), ("bert", "gp", {}), ("bert", "rp", {}), ("bert", "pi", {}),
               ("bert", "pi", {"attn_scaling": True}), ("bert", "maxp", {}), ("bert", "pcw", {}),
               ("modernbert", "pi", {}), ("modernbert", "ntk", {}), ("modernbert", "selfextend", {"group": 4, "window": 8}),
               ("qwen3", "pi", {}), ("qwen3", "ntk", {"attn_scaling": True}),
               ("qwen3", "selfextend", {"group": 4, "window": 8, "attn_scaling": True})]


@pytest.mark.parametrize("arch, strategy, kw", BATCH_CASES, ids=lambda x: str(x))
def test_a_documents_vector_does_not_depend_on_its_batch(models, arch, strategy, kw):
    """Positions and attention scaling come from each row's own length, not the padded batch."""
    extra = {"target_length": 256} if strategy not in ("truncate", "maxp", "pcw") else {}
    e = enc(models[arch], strategy, **extra, **kw)
    alone = e.encode_documents([TEXT])[0]
    batched, owner = e.encode_documents([TEXT, LONG, "short"])
    assert np.allclose(alone, batched[owner == 0], atol=1e-5), (arch, strategy)


@pytest.mark.parametrize("arch, method", [("bert", "pi"), ("bert", "gp"), ("qwen3", "pi"), ("qwen3", "ntk"),
                                          ("modernbert", "selfextend")])
def test_target_within_the_trained_window_leaves_the_model_unpatched(models, arch, method, caplog):
    plain = enc(models[arch])
    at_window = enc(models[arch], method, target_length=64)       # the tiny models are trained on 64
    assert at_window.ext_info["applied"] is False and "left unpatched" in caplog.text
    assert np.allclose(plain.encode_documents([TEXT])[0], at_window.encode_documents([TEXT])[0], atol=1e-6)


def test_default_target_follows_the_model(models):
    e = enc(models["qwen3"], "ntk")
    assert e.target == 4 * 64 and e.ext_info["target_length"] == 256 and e.ext_info["applied"]


@pytest.mark.parametrize("method", ["gp", "rp", "pi"])
def test_queries_encode_as_longembed_does_ape(models, method):
    """LongEmbed: grouping factor ceil(n / L_o), recurrence mod L_o, and PI's original rows leave an
    input within the window (a query) at its plain positions: the query vector is the plain one."""
    plain = enc(models["bert"]).encode_queries([TEXT])
    ext = enc(models["bert"], method, target_length=256).encode_queries([TEXT])
    assert np.allclose(plain, ext, atol=1e-6)


def test_queries_use_the_extended_rotary_base_like_documents(models):
    """LongEmbed changes rope_theta for the whole model: queries and documents alike."""
    ntk = enc(models["qwen3"], "ntk", target_length=256)
    q = ntk.encode_queries([TEXT])
    assert not np.allclose(q, enc(models["qwen3"]).encode_queries([TEXT]), atol=1e-4)
    assert np.allclose(q, ntk.encode_documents([TEXT])[0], atol=1e-5)


def _complex_rope_scores(q_raw, k_raw, rel, inv_freq):
    """RoPE written as complex rotation (independent of ldr's rotate-half code): the score of
    query i and key j is Re(Σ_f q_f · conj(k_f) · e^{i·rel_ij·θ_f}), a function of rel_ij alone."""
    h = q_raw.shape[-1] // 2
    qc = torch.complex(q_raw[..., :h].double(), q_raw[..., h:].double())
    kc = torch.complex(k_raw[..., :h].double(), k_raw[..., h:].double())
    phase = torch.exp(1j * rel.double()[..., None] * inv_freq.double())          # (n, n, h)
    return torch.einsum("bhif,bhjf,ijf->bhij", qc, kc.conj(), phase).real


@pytest.mark.parametrize("n, block", [(12, 256), (40, 8)])
def test_selfextend_matches_its_definition(monkeypatch, n, block):
    """SelfExtend (Jin et al.): inside the neighbour window the normal relative position i - j;
    beyond it the grouped one, i//g - j//g shifted by w - w//g so the two meet at |i - j| = w;
    the two merged into one attention. Checked against outputs (softmax(S)·V) built from that
    relative-position matrix, blockwise or not."""
    monkeypatch.setattr(extend, "_BLOCK", block)
    torch.manual_seed(0)
    d, g, w = 8, 3, 4
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    q_raw, k_raw, v = torch.randn(1, 2, n, d), torch.randn(1, 2, n, d), torch.randn(1, 2, n, d)
    pos = torch.arange(n)
    q, k = extend._rotate(q_raw, pos, inv_freq), extend._rotate(k_raw, pos, inv_freq)
    i, j = pos[:, None], pos[None, :]
    shift = w - w // g
    grouped = torch.where(i > j, i // g + shift - j // g, i // g - shift - j // g)
    rel = torch.where((i - j).abs() < w, i - j, grouped)
    assert rel[w, 0] == w and rel[w - 1, 0] == w - 1          # continuous at the window edge

    class Layer(torch.nn.Module):
        _ldr_ext = {"trained": 64, "group": g, "window": w, "attn_scaling": False, "inv_freq": lambda: inv_freq}

    out, _ = extend._extended_attention(Layer(), q, k, v, None, scaling=1.0)
    weights = torch.softmax(_complex_rope_scores(q_raw, k_raw, rel, inv_freq), dim=-1)
    expected = torch.matmul(weights, v.double()).transpose(1, 2)
    assert torch.allclose(out.double(), expected, atol=1e-5)


def test_blockwise_attention_equals_one_block(models, monkeypatch):
    full = enc(models["qwen3"], "selfextend", target_length=256, group=4, window=8, attn_scaling=True)
    ref = full.encode_documents([LONG, TEXT])[0]
    monkeypatch.setattr(extend, "_BLOCK", 16)
    assert np.allclose(full.encode_documents([LONG, TEXT])[0], ref, atol=1e-5)
