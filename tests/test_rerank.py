import numpy as np
import pytest
import torch

from ldr.errors import ConfigError
from ldr.rerank.cross_encoder import CrossEncoderReranker, CrossEncoderSettings, aggregate
from tiny_models import make


def test_aggregate():
    assert aggregate([0.1, 0.9, 0.3], "max") == 0.9
    assert aggregate([0.1, 0.9, 0.3, 5.0], "firstk", 3) == pytest.approx(np.mean([0.1, 0.9, 0.3]))
    assert aggregate([], "max") == float("-inf")
    with pytest.raises(ConfigError):
        CrossEncoderSettings(model="x", aggregate="median")


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory):
    # two labels: the same random model as test_rag's and the ONNX-vs-PyTorch test's, so a fresh
    # checkout exports one tiny cross-encoder, not two (each export child starts PyTorch: ~10 s)
    return str(make("bert-classifier", tmp_path_factory.mktemp("ce") / "m", num_labels=2))


def test_windows_are_bounded_and_aggregated(tiny_classifier):
    r = CrossEncoderReranker(CrossEncoderSettings(model=tiny_classifier, max_windows=3, stride=4, device="cpu"))
    assert r.max_length == 64
    long_doc = " ".join(f"word{i}" for i in range(400))
    windows = r._windows("a short query", long_doc)
    assert len(windows) == 3 and all(len(w["input_ids"]) <= 64 for w in windows)
    # reference: score each window alone, take the max
    singles = [float(r._logits([w])[0]) for w in windows]
    got = r.score("a short query", [long_doc, "tiny doc"])
    assert got[0] == pytest.approx(max(singles), abs=1e-5)
    r.settings.aggregate = "firstk"
    r.settings.first_k = 2
    assert r.score("a short query", [long_doc])[0] == pytest.approx(np.mean(singles[:2]), abs=1e-5)


def test_two_label_models_use_the_positive_margin(tmp_path):
    path = make("bert-classifier", tmp_path / "two", num_labels=2)
    r = CrossEncoderReranker(CrossEncoderSettings(model=str(path), device="cpu", backend="torch"))
    w = r._windows("q", "some document")
    padded = r.tokenizer.pad(w, return_tensors="pt")
    with torch.inference_mode():
        logits = r.model(**padded).logits
    assert r._logits(w)[0] == pytest.approx(float(logits[0, 1] - logits[0, 0]), abs=1e-6)


def test_onnx_cross_encoder_scores_like_torch(tmp_path):
    pytest.importorskip("onnxruntime")
    path = make("bert-classifier", tmp_path / "two", num_labels=2)
    docs = ["some document about apples " * 40, "short", "a pear and a query word"]
    t = CrossEncoderReranker(CrossEncoderSettings(model=str(path), backend="torch"))
    o = CrossEncoderReranker(CrossEncoderSettings(model=str(path)))
    assert o.settings.backend == "onnx" and o.ort is not None and o.model is None
    assert np.allclose(t.score("query word", docs), o.score("query word", docs), atol=1e-4)


def test_cross_encoder_in_the_search_pipeline(tmp_path, tiny_classifier):
    import ldr
    docs = [{"id": f"d{i}", "text": f"apple {'banana ' * i} cherry"} for i in range(8)]
    idx = ldr.Index.build(docs, tmp_path / "i", dense=None, sparse=None)
    hits = idx.search("apple cherry", k=8, rerank_model=tiny_classifier, rerank_depth=5)
    r = idx.cross_encoder(tiny_classifier)
    top5 = sorted(h.id for h in idx.search("apple cherry", k=5, rerank=False))
    expected = r.score("apple cherry", [idx.document(d).text for d in top5])
    assert [h.id for h in hits[:5]] == [top5[i] for i in np.argsort(-expected, kind="stable")]
    assert all("reranked" in h.scores for h in hits[:5]) and all("reranked" not in h.scores for h in hits[5:])


def test_windows_follow_the_query_into_the_middle_and_end_of_a_long_document(tiny_classifier):
    """Beyond max_windows, the windows scored are the opening plus those that share the query's
    tokens: the passage about the query at the end of a long document is reranked."""
    r = CrossEncoderReranker(CrossEncoderSettings(model=tiny_classifier, max_windows=3, stride=4, device="cpu"))
    filler = " ".join(["the river runs past the old mill"] * 80)
    doc = filler + " the lighthouse keeper relit the lamp at midnight " + filler + " lighthouse keeper lamp"
    windows = r._windows("lighthouse keeper lamp", doc)
    texts = [r.tokenizer.decode(w["input_ids"]) for w in windows]
    assert len(windows) == 3 and "river" in texts[0]
    assert "relit" in texts[1] and "lamp" in texts[2]      # the middle match and the final one, in order


def test_a_pre_exported_onnx_folder_runs_as_it_is(tmp_path):
    """Models as data: a folder holding model.onnx + tokenizer files and no PyTorch weights (a
    user's own export) is run by ldr's ONNX engine without an export step, scoring like torch."""
    import shutil

    pytest.importorskip("onnxruntime")
    path = make("bert-classifier", tmp_path / "two", num_labels=2)
    exported = CrossEncoderReranker(CrossEncoderSettings(model=str(path), backend="onnx")).ort.folder
    folder = tmp_path / "my-export"
    folder.mkdir()
    for f in ("model.onnx", "tokenizer.json"):
        shutil.copy(exported / f, folder / f)
    for f in path.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "config")):
            shutil.copy(f, folder / f.name)
    assert not any(folder.glob("*.safetensors")) and not (folder / "meta.json").exists()
    docs = ["some document about apples " * 40, "short", "a pear and a query word"]
    t = CrossEncoderReranker(CrossEncoderSettings(model=str(path), backend="torch"))
    o = CrossEncoderReranker(CrossEncoderSettings(model=str(folder)))
    assert o.model is None and o.ort.meta["export"]["prebuilt"]
    assert np.allclose(t.score("query word", docs), o.score("query word", docs), atol=1e-4)
    with pytest.raises(ConfigError, match="ONNX model folder"):
        CrossEncoderReranker(CrossEncoderSettings(model=str(folder), backend="torch"))


def test_the_packaged_ms_marco_cross_encoder(tmp_path):
    """The packaged int8 ms-marco-MiniLM-L-12-v2 (ldr[models]) by its short name: relevant above
    irrelevant, and a reranked search through the whole pipeline."""
    from ldr.encode.models import packaged_path, resolve

    if packaged_path("ms-marco-minilm-l12") is None:
        pytest.skip("ldr[models] is not installed")
    assert resolve("cross-encoder/ms-marco-MiniLM-L-12-v2")[1] == "ms-marco-minilm-l12"
    r = CrossEncoderReranker(CrossEncoderSettings(model="ms-marco-minilm-l12"))
    s = r.score("How many people live in Berlin?",
                ["Berlin has a population of 3,520,031 registered inhabitants.",
                 "New York City is famous for the Metropolitan Museum of Art."])
    assert s[0] > 5 > -5 > s[1]
    import ldr
    docs = [{"id": "pop", "text": "Berlin has a population of 3.5 million people. " * 20},
            {"id": "museum", "text": "Berlin is known for its museums and people visit them. " * 20},
            {"id": "nyc", "text": "New York is a large city with many people. " * 20}]
    idx = ldr.Index.build(docs, tmp_path / "i", dense=None, sparse=None)
    hits = idx.search("how many people live in Berlin", k=3, rerank_model="ms-marco-minilm-l12", rerank_weight=1.0)
    assert hits[0].id == "pop" and "reranked" in hits[0].scores
