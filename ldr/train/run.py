"""What `ldr train dense|reranker` does end to end: data → index → mined examples → a dev split →
training → a model folder with its card, published only when everything succeeded."""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from .._version import __version__
from ..errors import ConfigError
from ..encode.models import TRAIN_CARD as CARD
from .mining import mine, split_queries

log = logging.getLogger(__name__)


def check_output(out: Path) -> None:
    """A new or empty folder, or one ldr trained before (replaced as a whole); nothing else."""
    if out.is_symlink() or out.is_file():
        raise ConfigError(f"{out} is a file or a link; give a folder for the model")
    if out.is_dir() and any(out.iterdir()) and not (out / CARD).is_file():
        raise ConfigError(f"{out} exists and is not a model ldr trained; refusing to write into it (choose another -o)")


@contextmanager
def index_for(data: Path, index_path: str | None, progress: bool, indexes):
    """The index to mine from: the one given, or a temporary BM25 + dense index of DATA/corpus.jsonl
    (`indexes`: the Index class, ldr.Index)."""
    if index_path:
        yield indexes(index_path)
        return
    corpus = data / "corpus.jsonl"
    if not corpus.is_file():
        raise ConfigError(f"no index given (-i) and no {corpus} to build one from")
    with tempfile.TemporaryDirectory(prefix="ldr-train-index-") as tmp:
        log.info("building a temporary index of %s to mine passages from (give -i IDX to reuse one)", corpus)
        idx = indexes.build(corpus, Path(tmp) / "idx", sparse=None, progress=progress)
        yield idx
        idx.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # someone else's process: alive
        pass
    return True


def sweep_stale(out: Path) -> list[Path]:
    """Remove the `.NAME.part-PID-*` and `.NAME.old-PID` folders that a training of `out` killed
    before it finished left beside it (the writer's process is gone); a running writer's are kept."""
    removed = []
    for p in out.parent.glob(f".{out.name}.*"):
        kind, _, rest = p.name[len(out.name) + 2:].partition("-")
        pid = rest.split("-")[0]
        if kind in ("part", "old") and p.is_dir() and not p.is_symlink() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def publish(tmp_out: Path, out: Path) -> None:
    """Replace `out` by the finished folder (a model ldr trained earlier, or nothing)."""
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
        os.rename(tmp_out, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp_out, out)


def write_card(folder: Path, info: dict) -> None:
    """`ldr-train.json` (everything) and a section at the top of the README sentence-transformers wrote."""
    (folder / CARD).write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
    d = info["dev"]
    s = info["settings"]
    lines = [
        f"# {info['kind']} model trained by ldr {__version__}", "",
        f"- base model: `{info['base_model']}`",
        f"- data: `{info['data']}` split `{info['split']}`: {info['train_queries']} training queries "
        f"({info['rows']} rows), {info['dev_queries']} dev queries held out for early stopping; "
        f"{info['skipped_queries']} queries skipped (no relevant document in the index)",
        (f"- examples: positives are each relevant document's best passage under the index's model (MaxP), "
         f"negatives the best passages of the top non-relevant documents of ldr's search "
         f"(index `{info['index']}`)") if "pseudo" not in info else
        (f"- examples: pseudo-queries drawn from the windows of {info['documents']} documents "
         f"({', '.join(info['pseudo'].get('shapes', ('summaries', 'keyword sets')))}; "
         f"`ldr train dense --from-corpus`), kept where the index's search ranks their document "
         f"in its top {info['pseudo']['top']}; negatives: the windows of the documents it ranks beside them"),
        "- settings: " + ", ".join(f"{k}={v}" for k, v in s.items()),
        f"- training: {info['steps']} steps in {info['seconds']:.0f} s on {info['device']}, final mean loss "
        f"{info['train_loss']:.4f}",
        f"- dev {d['metric']}: {100 * (d['before'] or 0):.2f} before, {100 * (d['after'] or 0):.2f} after "
        f"(best checkpoint {d.get('best_checkpoint')})",
        f"- trained at {info['at']}", "",
        "Use it: " + ("`ldr index CORPUS -o IDX --dense THIS_FOLDER`" if info["kind"] == "dense" else
                      "`ldr search -i IDX --rerank-model THIS_FOLDER \"query\"`, or make it an index's default "
                      "reranker with `ldr tune -i IDX --data BEIR_DIR --rerank-model THIS_FOLDER`"), "", "",
    ]
    readme = folder / "README.md"
    rest = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    readme.write_text("\n".join(lines) + rest, encoding="utf-8")


def train(kind: str, data: Path, out: Path, *, split: str = "train", index_path: str | None = None,
          qids: list[str] | None = None, settings=None, base_model: str | None = None, dev_fraction: float = 0.1,
          depth: int = 30, device: str | None = None, progress: bool = True, mined: dict | None = None,
          indexes=None, pseudo=None) -> dict:
    """Train a dense encoder (`kind="dense"`) or a reranker on the qrels of a BEIR folder, or
    (`pseudo`: PseudoSettings, `data` None) a dense encoder on pseudo-queries drawn from the
    corpus of the index at `index_path` (pseudo.py: no query, no judgement); `qids`
    restricts the queries (cross-validation); `indexes`: the Index class to open or build the
    index to mine from (ldr.Index). `mined` ({qid: Example} from `mine` on the same
    index, with at least as many negatives): examples already mined, used instead of mining those
    queries again (a query's examples depend only on its own judgements). Returns the card's
    figures."""
    from ..encode.models import resolve
    from ..eval.beir import load_qrels, load_queries
    from .dense import DenseTrainSettings, train_dense
    from .reranker import RerankerTrainSettings, train_reranker

    out = Path(out).absolute()
    check_output(out)
    try:
        import accelerate  # noqa: F401  (the transformers Trainer under sentence-transformers' trainers)
    except ImportError:
        raise ConfigError("training needs an optional part of ldr: pip install 'ldr[train]'") from None
    if pseudo is not None:
        return _train_from_corpus(out, index_path, pseudo, settings, base_model, dev_fraction, device, progress,
                                  indexes)
    data = Path(data)
    queries, qrels = load_queries(data), load_qrels(data, split)
    pool = sorted(q for q in (qids if qids is not None else qrels) if q in qrels and q in queries)
    train_q, dev_q = split_queries(pool, dev_fraction, seed=getattr(settings, "seed", 0))
    t0 = time.perf_counter()
    if indexes is None:
        raise ConfigError("train needs the Index class to open its index with (indexes=ldr.Index)")
    with index_for(data, index_path, progress, indexes) as index:
        if kind == "dense":
            if "dense" not in index.components:
                raise ConfigError(f"{index.path} has no dense component to start from")
            settings = settings or DenseTrainSettings()
            base = base_model or resolve(index.components["dense"]["model"]["settings"]["model"])[0]
            base_name = base_model or _name(index.components["dense"])
            n_neg = settings.negatives
        else:
            settings = settings or RerankerTrainSettings()
            base = base_model or resolve("all-MiniLM-L6-v2")[0]
            base_name = base_model or "all-MiniLM-L6-v2"
            n_neg = settings.negatives
        def examples(qs, negatives):
            if mined is None:
                return mine(index, queries, qrels, qs, negatives=negatives, depth=depth, passages=1, progress=progress)
            have = [mined[q] for q in qs if q in mined]
            return have, len(qs) - len(have)

        train_ex, skipped = examples(train_q, max(n_neg, 1))
        dev_ex, dev_skipped = examples(dev_q, max(n_neg, 4))
        index_name = str(index.path)
    mined_s = time.perf_counter() - t0
    if not train_ex or not dev_ex:
        raise ConfigError(f"nothing to train on: {len(train_ex)} training and {len(dev_ex)} dev queries have a "
                          "relevant document in the index")
    fn = train_dense if kind == "dense" else train_reranker
    return _write(out, lambda tmp: fn(base, train_ex, dev_ex, tmp, settings, device=device, progress=progress), {
        "data": str(data.resolve()), "split": split, "index": index_name, "train_queries": len(train_ex),
        "dev_queries": len(dev_ex), "skipped_queries": skipped + dev_skipped, "mining_seconds": round(mined_s, 1),
        "device": device or "cpu", "dev_qids": sorted(dev_q), "base_name": base_name})


def _write(out: Path, fit, extra: dict) -> dict:
    """Train into a fresh folder beside `out` (`fit(folder)` returns the card's figures), write the
    card, then put the folder in place of `out`: a training that fails leaves `out` as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for p in sweep_stale(out):
        log.info("removed %s, left by a training that was stopped", p)
    tmp_out = Path(tempfile.mkdtemp(prefix=f".{out.name}.part-{os.getpid()}-", dir=out.parent))
    try:
        info = fit(tmp_out)
        info.update({**extra, "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        write_card(tmp_out, info)
        publish(tmp_out, out)
    except BaseException:
        shutil.rmtree(tmp_out, ignore_errors=True)
        raise
    return info


def _train_from_corpus(out: Path, index_path, pseudo, settings, base_model, dev_fraction, device, progress,
                       indexes) -> dict:
    """`ldr train dense --from-corpus`: the index's dense model fine-tuned on pseudo-queries of its
    own documents (pseudo.py), early-stopped on a held-out share of them."""
    from ..encode.models import resolve
    from .dense import DenseTrainSettings, train_dense
    from .pseudo import pseudo_examples

    if not index_path:
        raise ConfigError("--from-corpus trains on an index's own documents: give the index with -i")
    settings = settings or DenseTrainSettings()
    t0 = time.perf_counter()
    with indexes(index_path) as index:
        if "dense" not in index.components:
            raise ConfigError(f"{index.path} has no dense component to start from")
        base = base_model or resolve(index.components["dense"]["model"]["settings"]["model"])[0]
        base_name = base_model or _name(index.components["dense"])
        examples, counts = pseudo_examples(index, pseudo, progress=progress)
        index_name, docs = str(index.path), len(index)
    by_id = {ex.qid: ex for ex in examples}
    if len(by_id) < 4:
        raise ConfigError(f"only {len(by_id)} pseudo-queries survived the round trip through the search "
                          f"({counts}); the corpus is too small or too uniform to learn from")
    train_q, dev_q = split_queries(list(by_id), dev_fraction, seed=settings.seed)
    train_ex, dev_ex = [by_id[q] for q in train_q], [by_id[q] for q in dev_q]
    drawn_s = time.perf_counter() - t0
    return _write(out, lambda tmp: train_dense(base, train_ex, dev_ex, tmp, settings, device=device,
                                               progress=progress), {
        "data": f"the documents of {index_name} (no query, no judgement)", "split": "pseudo-queries",
        "index": index_name, "documents": docs, "pseudo": {**asdict(pseudo), **counts},
        "train_queries": len(train_ex), "dev_queries": len(dev_ex), "skipped_queries": counts.get("vague", 0),
        "mining_seconds": round(drawn_s, 1), "device": device or "cpu", "base_name": base_name})


def _name(comp: dict) -> str:
    """The name of the model a component's model descends from (what its language's defaults were
    measured with, encode/models.trained_from)."""
    model = comp["model"]
    return model.get("trained_from") or model["name"]
