import numpy as np
import pytest
import scipy.sparse as sp
import torch

from ldr.corpus import Doc
from ldr.encode.sparse import SparseEncoder, SparseSettings
from ldr.errors import ConfigError
from ldr.components.sparse_store import SparseIndex, SparseWriter
from tiny_models import make


class RandomSparse:
    """A stand-in encoder: random CSR rows, so the index can be checked against brute force."""

    vocab_size = 500

    def __init__(self):
        self.rng = np.random.default_rng(0)

    def encode_documents(self, texts):
        return sp.random(len(texts), self.vocab_size, density=0.05, format="csr", dtype=np.float32,
                         random_state=self.rng)

    def prepare_documents(self, texts):
        return texts

    def finish_documents(self, texts, progress=None):
        return self.encode_documents(texts)

    def describe(self):
        return {"name": "random"}


def test_inverted_scoring_equals_brute_force(tmp_path):
    enc = RandomSparse()
    w = SparseWriter(tmp_path / "s", enc, docs_per_batch=7)
    for i in range(60):
        w.add(i, Doc(str(i), "x"))
    info = w.close()
    idx = SparseIndex(tmp_path / "s")
    csr = sp.csr_matrix((np.load(tmp_path / "s/doc_weights.npy"), np.load(tmp_path / "s/doc_terms.npy"),
                         np.load(tmp_path / "s/doc_indptr.npy")), shape=(60, enc.vocab_size))
    assert info["documents"] == 60 and info["postings"] == csr.nnz
    rng = np.random.default_rng(1)
    for _ in range(20):
        terms = np.sort(rng.choice(enc.vocab_size, 12, replace=False))
        weights = rng.random(12).astype(np.float32)
        q = np.zeros(enc.vocab_size, dtype=np.float32)
        q[terms] = weights
        brute = csr @ q
        assert np.allclose(idx.score(terms, weights), brute, atol=1e-5)
        top = idx.top_k(terms, weights, 5)
        assert [d for d, _ in top] == list(np.argsort(-brute, kind="stable")[:5])
        for d in range(0, 60, 7):
            assert np.isclose(idx.doc_score(d, terms, weights), brute[d], atol=1e-5)


@pytest.fixture(scope="module")
def splade():
    return SparseEncoder(SparseSettings(device="cpu", top_k=None))


def test_splade_tiny_weights(splade):
    m = splade.encode_queries(["what is the capital of france", "sourdough starter feeding"])
    assert isinstance(m, sp.csr_matrix) and m.shape == (2, 30522) and (m.data > 0).all()
    vocab = splade.vocabulary()
    top = [vocab[i] for i in m[0].indices[np.argsort(-m[0].data)][:10]]
    assert "france" in top or "capital" in top


def test_long_documents_keep_the_max_weight_over_windows():
    enc = SparseEncoder(SparseSettings(device="cpu", max_length=10, top_k=None))   # 8 tokens per window
    a = "the cat sat on the warm mat today"
    b = "dogs run fast across the green open fields"
    ta, tb = (enc.tokenizer(x, add_special_tokens=False)["input_ids"] for x in (a, b))
    assert len(ta) == len(tb) == 8
    both = enc.encode_documents([a + " " + b]).toarray()[0]
    wa, wb = enc.encode_documents([a]).toarray()[0], enc.encode_documents([b]).toarray()[0]
    assert np.allclose(both, np.maximum(wa, wb), atol=1e-5)


def test_pruning_options():
    enc = SparseEncoder(SparseSettings(device="cpu", top_k=5))
    m = enc.encode_documents(["a long enough sentence about many different things and topics"])
    assert m.nnz == 5
    enc = SparseEncoder(SparseSettings(device="cpu", top_k=None, threshold=0.5))
    m = enc.encode_documents(["a long enough sentence about many different things and topics"])
    assert (m.data > 0.5).all()


def test_linear_head_style(tmp_path):
    """mGTE / BGE-M3 style: relu(W h) per token, max for repeated tokens, specials dropped."""
    path = make("bert", tmp_path / "m")
    torch.manual_seed(1)
    torch.save({"weight": torch.randn(1, 64), "bias": torch.zeros(1)}, path / "sparse_linear.pt")
    enc = SparseEncoder(SparseSettings(model=str(path), kind="head", device="cpu", top_k=None))
    text = "apple banana apple cherry"
    m = enc.encode_documents([text])
    ids = enc.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert set(m.indices) <= set(ids)
    # reference: token weights from the same forward pass, max per id
    full = enc._head_ids + ids + enc._tail_ids
    with torch.inference_mode():
        h = enc.model(input_ids=torch.tensor([full])).last_hidden_state
        tw = torch.relu(enc.head(h)).squeeze(-1)[0, len(enc._head_ids):len(enc._head_ids) + len(ids)]
    expected = {}
    for t, w in zip(ids, tw.tolist()):
        expected[t] = max(expected.get(t, 0.0), w)
    got = dict(zip(m.indices.tolist(), m.data.tolist()))
    assert got == pytest.approx({t: w for t, w in expected.items() if w > 0}, abs=1e-5)
    with pytest.raises(ConfigError):
        SparseSettings(kind="colbert")


def test_splade_pooling_matches_the_formula(splade):
    """w_t = max over (unpadded) tokens of log1p(relu(logit_t)), on a padded batch."""
    from ldr.encode.batching import pad
    pieces = [splade._head_ids + splade.tokenizer(t, add_special_tokens=False)["input_ids"] + splade._tail_ids
              for t in ("short one", "a longer sentence about meetings, budgets and remote controls")]
    ids, mask = pad(pieces, 0, "cpu")
    from transformers import AutoModelForMaskedLM
    whole = AutoModelForMaskedLM.from_pretrained(splade.path).eval()      # the head left in place
    with torch.inference_mode():
        logits = whole(input_ids=ids, attention_mask=mask).logits
        ref = (torch.log1p(torch.relu(logits)) * mask.unsqueeze(-1)).amax(dim=1)
        assert torch.allclose(torch.from_numpy(splade._weights(pieces)), ref, atol=1e-5)


def test_the_vocabulary_projection_in_chunks_equals_the_whole_tensor(monkeypatch):
    """mlm_head: chunks of a few tokens that cut windows anywhere give the max of the whole
    (windows, tokens, vocabulary) logits tensor, padding excluded, in numpy and in torch."""
    from ldr.encode import mlm_head

    rng = np.random.default_rng(0)
    h = rng.normal(size=(4, 9, 6)).astype(np.float32)
    mask = np.zeros((4, 9), dtype=np.int64)
    for i, n in enumerate((9, 1, 5, 3)):
        mask[i, :n] = 1
    w, b = rng.normal(size=(6, 50)).astype(np.float32), rng.normal(size=50).astype(np.float32)
    logits = np.where(mask[..., None] == 1, h @ w + b, -np.inf)
    ref = np.log1p(np.maximum(logits.max(axis=1), 0))
    for chunk in (50 * 1, 50 * 4, 50 * 7, 1 << 23):         # 1, 4, 7 tokens per chunk, and all at once
        monkeypatch.setattr(mlm_head, "HEAD_CHUNK", chunk)
        assert np.allclose(mlm_head.head_max(h, mask, w, b), ref, atol=1e-5)
        got = mlm_head.head_max_torch(torch.from_numpy(h), torch.from_numpy(mask).bool(), torch.from_numpy(w),
                                      torch.from_numpy(b))
        assert np.allclose(got.numpy(), ref, atol=1e-5)


def test_the_term_cap_grows_with_the_document():
    """k terms per window: a document of three windows keeps up to 3k terms, a one-window one k."""
    enc = SparseEncoder(SparseSettings(device="cpu", max_length=10, top_k=4, top_k_per="window"))  # 8 tokens/window
    short = "alpha beta gamma delta epsilon zeta eta"
    long = short + " theta iota kappa lambda omicron sigma tau upsilon phi chi psi omega river mill"
    m = enc.encode_documents([short, long])
    counts = np.diff(m.indptr)
    windows = -(-len(enc.tokenizer(long, add_special_tokens=False)["input_ids"]) // 8)
    assert windows >= 3 and counts[0] == 4 and 8 < counts[1] <= 4 * windows
    per_doc = SparseEncoder(SparseSettings(device="cpu", max_length=10, top_k=4)).encode_documents([short, long])
    assert np.diff(per_doc.indptr).tolist() == [4, 4]                              # the default


def test_a_query_is_weighed_over_the_terms_the_live_documents_hold(tmp_path):
    """Issue 80: a learned-sparse query is weighed over the terms the index's live documents hold
    (the SPLADE projection over those columns alone: most of its encoding): the same terms and
    weights as over the whole vocabulary, kept within; an added document's terms join (a query
    asked again is encoded again), a deleted one's leave, and two indexes of the same live
    documents weigh a query alike to the bit."""
    import ldr
    from ldr.encode.sparse import OnnxSparseEncoder

    docs = [{"id": f"d{i}", "text": f"the harbour pilot logged tides and moorings, report {i}"} for i in range(5)]
    idx = ldr.Index.build(docs, tmp_path / "i", dense=None, progress=False)
    side = idx.query_side("sparse")
    assert isinstance(side.encoder, OnnxSparseEncoder)
    query = "sourdough starter feeding at the harbour"
    snap = idx._snapshot()
    held = snap.terms("sparse")
    full_terms, full_weights = side.encode(query)
    terms, weights = side.encode(query, held)
    keep = np.isin(full_terms, held.ids)
    assert 0 < len(terms) < len(full_terms) and np.array_equal(terms, full_terms[keep])
    np.testing.assert_allclose(weights, full_weights[keep], rtol=0, atol=1e-5)
    before = {h.id: h.scores["sparse"] for h in idx.search(query, k=5, mode="sparse")}

    idx.add([{"id": "bread", "text": "sourdough starter feeding schedule for a rye levain"}])
    grown = idx._snapshot().terms("sparse")
    assert set(held.ids) < set(grown.ids) and grown.key != held.key
    hits = idx.search(query, k=6, mode="sparse")
    assert hits[0].id == "bread"            # its terms are weighed now (not the cached encoding's)
    idx.delete(["bread"])
    assert np.array_equal(idx._snapshot().terms("sparse").ids, held.ids)
    assert {h.id: h.scores["sparse"] for h in idx.search(query, k=5, mode="sparse")} == before
    fresh = ldr.Index.build(docs, tmp_path / "fresh", dense=None, progress=False)
    assert {h.id: h.scores["sparse"] for h in fresh.search(query, k=5, mode="sparse")} == before
