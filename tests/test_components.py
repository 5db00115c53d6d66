"""A fourth retriever kind defined only here (a character-trigram scorer) goes through the whole
life of an index with no edit outside its own definition: index, search alone and fused, add,
replace, delete, merge, check (and its damage caught), `ldr info`."""
from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import ldr
from ldr import components as registry
from ldr.components.base import Component, Part
from ldr.schema import setting
from ldr.index.check import check_index

BUCKETS = 64


def trigrams(text: str) -> np.ndarray:
    """A unit vector of hashed character-trigram counts."""
    v = np.zeros(BUCKETS, np.float32)
    t = f"  {text.lower()}  "
    for i in range(len(t) - 2):
        v[zlib.crc32(t[i:i + 3].encode()) % BUCKETS] += 1
    n = np.linalg.norm(v)
    return v / n if n else v


class _Writer:
    def __init__(self, folder: Path):
        self.folder, self.rows = folder, []

    def add(self, row, doc):
        self.rows.append(trigrams(f"{doc.title} {doc.text}"))

    def close(self):
        self.folder.mkdir()
        np.save(self.folder / "vectors.npy", np.asarray(self.rows, np.float32).reshape(-1, BUCKETS))
        return Part({"path": "ngram", "rows": len(self.rows)}, {"buckets": BUCKETS})

    def abort(self):
        pass


class _Retriever:
    def __init__(self, vectors: np.ndarray, live: np.ndarray):
        self.vectors, self.live = vectors, live

    def encode(self, query):
        return trigrams(query)

    def search_rep(self, rep, k, allow=None):
        scores = self.vectors @ rep
        ok = self.live if allow is None else allow
        order = [d for d in np.argsort(-scores, kind="stable") if ok[d]][:k]
        return [(int(d), float(scores[d])) for d in order]

    def search(self, query, k):
        return self.search_rep(self.encode(query), k)


@dataclass
class NgramSettings:
    """Its build settings, declared once: `ldr index --ngram on --ngram-n 4`, or
    `components={"ngram": NgramSettings(n=4)}` from Python."""
    on: str = setting("on", "--ngram", enables=True, cli_default="none", help="Index character n-grams (on | none).")
    n: int = setting(3, "--ngram-n", help="Characters per n-gram.")


class Ngram(Component):
    name = "ngram"
    manifest_keys = {"settings": dict}

    def build_settings(self):
        return [("components.ngram", NgramSettings)]

    def configure(self, config):
        wanted = config.components.get(self.name)
        if wanted is None:
            return None
        return {"settings": asdict(wanted) if isinstance(wanted, NgramSettings) else dict(wanted)}, None

    def part_writer(self, state):
        return _Writer(state.folder)

    def merge_parts(self, state):
        vecs = [np.load(p.folder / "vectors.npy")[rows >= 0] for p, rows in zip(state.sources, state.row_maps)]
        state.folder.mkdir()
        merged = np.concatenate(vecs) if vecs else np.zeros((0, BUCKETS), np.float32)
        np.save(state.folder / "vectors.npy", merged)
        return {"path": "ngram", "rows": len(merged)}

    def open(self, state):
        vecs = [np.load(p.folder / "vectors.npy", allow_pickle=False) for p in state.parts()]
        return _Retriever(np.concatenate(vecs) if vecs else np.zeros((0, BUCKETS), np.float32), state.segments.live)

    def check_part(self, part, comp):
        v = np.load(part.folder / "vectors.npy", allow_pickle=False)
        out = [] if v.shape == (part.docs, BUCKETS) else [f"ngram vectors have shape {v.shape}"]
        if len(v) and not np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-3):
            out.append("ngram vectors are not unit length")
        return out

    def describe(self, comp, segments):
        return dict(comp, rows=sum(s.get("ngram", {}).get("rows", 0) for s in segments))

    def summary(self, comp):
        return [f"character trigrams in {BUCKETS} buckets, {comp.get('rows')} rows"]


DOCS = [{"id": f"d{i}", "title": t, "text": body} for i, (t, body) in enumerate([
    ("Lighthouse", "the keeper relit the lamp at the lighthouse every night"),
    ("Bearings", "corrosion of the bearing plates was found in the pump"),
    ("Harbour", "the ferry left the harbour before the storm"),
    ("Orchard", "apples and pears ripen in the orchard in autumn"),
])]


@pytest.fixture
def ngram():
    kind = registry.register(Ngram())
    yield kind
    registry.unregister("ngram")


def test_a_fourth_kind_lives_through_every_operation(ngram, tmp_path):
    path = tmp_path / "idx"
    idx = ldr.Index.build(DOCS, path, bm25="native", dense=None, sparse=None, components={"ngram": {"n": 3}})
    assert idx.retriever_names == ["bm25", "ngram"]
    assert idx.search_defaults()["weights"]["ngram"] == 1.0          # its own default weight fuses it
    alone = idx.search("lighthouse lamp", k=2, mode="ngram")
    assert alone[0].id == "d0" and set(alone[0].scores) == {"ngram"}
    fused = idx.search("corroded bearing plates", k=4)
    assert fused[0].id == "d1" and {"bm25", "ngram", "fused"} <= set(fused[0].scores)
    assert idx.search("lamp", k=1, weights={"bm25": 0, "ngram": 1})[0].scores["fused"] > 0

    added = idx.add([{"id": "d4", "text": "a new lamp for the lighthouse tower"},
                     {"id": "d2", "text": "the orchard ferry (replaced)"}])
    assert added["added"] == 1 and added["replaced"] == ["d2"]
    assert len(idx) == 5 and idx.search("new lamp tower", k=1, mode="ngram")[0].id == "d4"
    assert idx.delete(["d1"])["deleted"] == ["d1"]
    assert "d1" not in {h.id for h in idx.search("corrosion bearing", k=5, mode="ngram")}
    before = [(h.id, round(h.score, 6)) for h in idx.search("lighthouse lamp", k=4)]
    assert idx.merge(1)["segments"] == 1
    assert [(h.id, round(h.score, 6)) for h in idx.search("lighthouse lamp", k=4)] == before
    seg = idx.manifest["segments"][0]
    assert seg["ngram"]["rows"] == 4 and seg["docs"] == 4

    manifest, problems = check_index(path)
    assert problems == [] and "ngram" in manifest["components"]
    info = idx.info()
    assert info["components"]["ngram"]["rows"] == 4
    from ldr.cli import main
    out = CliRunner().invoke(main, ["info", str(path)]).output
    assert "ngram" in out and "character trigrams in 64 buckets, 4 rows" in out

    # a damaged part is reported by `ldr check` through the kind's own check
    np.save(path / seg["path"] / "ngram" / "vectors.npy", np.zeros((4, BUCKETS), np.float32))
    _, problems = check_index(path)
    assert any("ngram vectors are not unit length" in p for p in problems)
    assert any("does not match its SHA-256" in p for p in problems)


def test_an_unknown_kind_in_a_manifest_is_a_clear_error(ngram, tmp_path):
    ldr.Index.build(DOCS, tmp_path / "idx", bm25="native", dense=None, sparse=None, components={"ngram": {}})
    registry.unregister("ngram")
    with pytest.raises(ldr.IndexFormatError, match="component 'ngram' is not a kind this ldr knows"):
        ldr.open(tmp_path / "idx")
    registry.register(ngram)
    assert len(ldr.open(tmp_path / "idx")) == 4


def test_writers_and_readers_share_one_encoder_cache_and_load_lazily(tmp_path):
    """An index with a model whose corpus is all skipped loads no model; a reader and a writer of
    the same settings share one loaded encoder."""
    from ldr.encode.dense import DenseSettings

    registry.ENCODERS.clear()
    with pytest.raises(ldr.CorpusError):
        ldr.Index.build([{"id": "a", "text": "   "}], tmp_path / "empty", sparse=None, bm25="native",
                        dense=DenseSettings(backend="torch"))
    assert registry.ENCODERS.loaded() == []
    idx = ldr.Index.build(DOCS[:2], tmp_path / "idx", sparse=None, bm25="native", dense=DenseSettings(backend="torch"))
    assert len(registry.ENCODERS.loaded()) == 1
    idx.search("lamp", k=1)
    idx.add([{"id": "x", "text": "one more document about lamps"}])
    assert len(registry.ENCODERS.loaded()) == 1          # the reader and the writer shared it


def test_a_kinds_build_setting_reaches_the_cli_and_the_api_with_no_edit_elsewhere(ngram, tmp_path):
    """A setting declared on the kind's settings class is an `ldr index` flag (help included), a
    Python keyword, and what the manifest records."""
    from ldr.cli import main

    help_text = CliRunner().invoke(main, ["index", "--help"]).output
    assert "--ngram-n INTEGER" in help_text and "Characters per n-gram." in help_text
    corpus = tmp_path / "c"
    corpus.mkdir()
    for d in DOCS:
        (corpus / f"{d['id']}.txt").write_text(d["text"])
    out = CliRunner().invoke(main, ["index", str(corpus), "-o", str(tmp_path / "cli"), "--bm25", "native",
                                    "--dense", "none", "--sparse", "none", "--ngram", "on", "--ngram-n", "4", "-q"])
    assert out.exit_code == 0, out.output
    assert ldr.open(tmp_path / "cli").components["ngram"]["settings"] == {"on": "on", "n": 4}
    api = ldr.Index.build(DOCS, tmp_path / "api", bm25="native", dense=None, sparse=None,
                          components={"ngram": NgramSettings(n=4)})
    assert api.components["ngram"]["settings"] == {"on": "on", "n": 4}
    plain = CliRunner().invoke(main, ["index", str(corpus), "-o", str(tmp_path / "off"), "--bm25", "native",
                                      "--dense", "none", "--sparse", "none", "-q"])
    assert plain.exit_code == 0 and "ngram" not in ldr.open(tmp_path / "off").components
