"""Passage quality: does a hit's best passage hold the text that answers the query?

- needle (synthetic, haystack: Paul Graham essays): a fact about a person inserted at a random
  depth; the answer-bearing text is the fact sentence. Reported per document length:
  `located`: the best passage of the relevant document (the search filtered to it) holds the fact;
  `top1`: the first hit is the relevant document and its best passage holds the fact. Each for
  the default passage scoring (dense MaxP passages + BM25 windows) and each stage alone.
- qmsum-train: QMSum's BEIR form has no answer spans, so two honest proxies: how often the best
  passage of the first hit comes from a relevant meeting, and how often the best passage of the
  relevant meeting is (or overlaps) its "oracle" window: the one that shares the most distinct
  content words with the query summary (a lexical proxy, favourable to BM25).

    python bench/bench_passages.py --lengths 1024,2048,4096,8192 --qmsum-index /tmp/ldr-bench/qmsum-index
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# passage weights: "default" = the index's fusion weights (what a search uses); the others ablate
# (a kind weighted 0 places no windows: "bm25 only" scores word windows, as a BM25-only index does)
WEIGHTS = {"default": "index", "equal": {"dense": 1.0, "bm25": 1.0}, "dense only": {"dense": 1.0, "bm25": 0.0},
           "bm25 only": {"dense": 0.0, "bm25": 1.0}}
COLBERT_WEIGHTS = {"colbert windows only": {"colbert": 1.0, "dense": 0.0, "bm25": 0.0},
                   "colbert + bm25": {"colbert": 1.0, "dense": 0.0, "bm25": 1.0}}


def weightings(colbert: str | None) -> dict:
    """The passage scorings to compare; on a colbert index the base ones leave colbert out."""
    if not colbert:
        return dict(WEIGHTS)
    base = {k: (w if w == "index" else {**w, "colbert": 0.0}) for k, w in WEIGHTS.items()}
    return {**base, **COLBERT_WEIGHTS}
_WORD = re.compile(r"[a-z0-9]+")
STOP = set("the a an and or of to in on for with is are was were be been it this that as at by from we they "
           "i you he she our their about which who what when how also there had has have not but so if into".split())


def finder_for(ix, weights):
    """The index's passage finder with these passage weights (retrieval itself unchanged)."""
    view = ix._view
    retrievers = {n: ix.retriever(n, view) for n in ix.retriever_names}
    if weights == "index":
        weights = ix.search_defaults(view).get("weights")
    return ix._finder(view, weights, retrievers)


def reps(ix, finder, q: str) -> dict:
    """The query's representation for each vector kind the finder scores windows with."""
    return {k: ix.query_side(k).encode(q) for k in finder.vector_kinds}


SNIPPET_WIDTHS = (60, 100, 160)    # `ldr search` in an 80- and a 120-column terminal, and piped


def shown(result, query: str, width: int) -> str:
    """The one-line snippet `ldr search` prints for the first hit's best passage (older ldr: marks
    from the result's passage finder, as its table drew them)."""
    from ldr.search.snippets import snippet

    p = result[0].passages[0]
    if hasattr(p, "highlights"):
        marks = [(a - p.start, b - p.start) for a, b in p.highlights]
    else:
        finder = getattr(result, "finder", None) or result.context.finder
        marks = finder.marks(p.text, finder.query_terms(query))
    return snippet(p.text, marks, width)


def needle_bench(lengths, n_docs, n_queries, haystack: Path, colbert: str | None = None) -> dict:
    import ldr
    from ldr.eval.synthetic import needle

    task = needle(haystack, lengths=lengths, n_docs=n_docs, n_queries=n_queries)
    out = {}
    for length in lengths:
        corpus, queries, qrels = task.split(length)
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            extra = {"components": {"colbert": colbert}} if colbert else {}
            ix = ldr.Index.build([{"id": d, "text": x} for d, x in corpus.items()], Path(tmp) / "idx", **extra)
            build_s = time.perf_counter() - t
            res = {"build_s": round(build_s, 1)}
            facts = {}   # "What is NAME's THING?" asks back the sentence "NAME's THING is VALUE."
            for qid, q in queries.items():
                rel = next(iter(qrels[qid]))
                head = re.match(r"What is (.+)\?$", q).group(1) + " is "
                i = corpus[rel].index(head)
                facts[rel] = corpus[rel][i:corpus[rel].index(".", i + len(head)) + 1]
            for label, w in weightings(colbert).items():
                finder = finder_for(ix, w)
                located = top1 = 0
                in_snippet = dict.fromkeys(SNIPPET_WIDTHS, 0)
                for qid, q in queries.items():
                    rel = next(iter(qrels[qid]))
                    best = finder.find(q, reps(ix, finder, q), {ix.docstore.row(rel): ix.document(rel).text}, 1)
                    p = next(iter(best.values()))
                    located += bool(p) and facts[rel] in p[0].text
                    if label == "default":
                        hit = ix.search(q, k=1, passages=1)[0]
                        top1 += hit.id == rel and facts[rel] in hit.passages[0].text
                        own = ix.search(q, k=1, passages=1, filters={"id": rel})
                        value = facts[rel].rsplit(" is ", 1)[1].rstrip(".")
                        for w in SNIPPET_WIDTHS:
                            in_snippet[w] += value in shown(own, q, w)
                res[label] = {"located": round(100 * located / len(queries), 1)}
                if label == "default":
                    res[label]["top1"] = round(100 * top1 / len(queries), 1)
                    for w in SNIPPET_WIDTHS:     # the needle's value in the line the table shows
                        res[label][f"snippet{w}"] = round(100 * in_snippet[w] / len(queries), 1)
            ix.close()
        out[length] = res
        print(length, json.dumps(res), file=sys.stderr)
    return out


def _content(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP and len(w) > 2}


def qmsum_bench(index: Path, beir: Path, max_queries: int | None) -> dict:
    import ldr
    from ldr.eval.beir import load_qrels, load_queries

    ix = ldr.open(index)
    queries = load_queries(beir)
    qrels = load_qrels(beir, "test")
    qids = [q for q in queries if q in qrels][:max_queries]
    res = {"queries": len(qids)}
    for label, w in weightings("colbert" if "colbert" in ix.retriever_names else None).items():
        finder = finder_for(ix, w)
        relevant_top = oracle_hit = oracle_overlap = 0
        t = time.perf_counter()
        for qid in qids:
            q = queries[qid]
            rel = next(d for d, g in qrels[qid].items() if g > 0)
            text = ix.document(rel).text
            cands = finder.find(q, reps(ix, finder, q), {ix.docstore.row(rel): text}, 1000)
            ps = next(iter(cands.values()))
            qc = _content(q)
            oracle = max(ps, key=lambda p: (len(qc & _content(p.text)), -p.start))
            best = max(ps, key=lambda p: p.score)
            oracle_hit += (best.start, best.end) == (oracle.start, oracle.end)
            oracle_overlap += best.start < oracle.end and oracle.start < best.end
            if label == "default":
                hit = ix.search(q, k=1, passages=1)[0]
                relevant_top += qrels[qid].get(hit.id, 0) > 0
        n = len(qids)
        res[label] = {"best_is_oracle": round(100 * oracle_hit / n, 1),
                      "best_overlaps_oracle": round(100 * oracle_overlap / n, 1),
                      "seconds": round(time.perf_counter() - t, 1)}
        if label == "default":
            res[label]["top1_passage_from_relevant"] = round(100 * relevant_top / n, 1)
        print("qmsum", label, json.dumps(res[label]), file=sys.stderr)
    windows = [len(next(iter(finder.find("x", reps(ix, finder, "x"), {ix.docstore.row(d): ix.document(d).text},
                                          10_000).values())))
               for d in list(ix.docstore.live_ids())[:50]]
    res["windows_per_meeting_median"] = float(np.median(windows))
    return res


def plot(out: dict, png: Path) -> None:
    """Needle located by the best passage, per length and passage scoring; qmsum oracle agreement."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    if "needle" in out:
        lengths = sorted(out["needle"], key=int)
        labels = [x for x in weightings("any") if x in out["needle"][lengths[0]]]
        for label, style in zip(labels, ("-", "--", "-.", ":", (0, (1, 3)), (0, (5, 5)))):   # coinciding lines stay visible
            axes[0].plot([int(x) for x in lengths], [out["needle"][x][label]["located"] for x in lengths], marker="o",
                         linestyle=style, linewidth=3 if label == "default" else 1.5, label=label)
        axes[0].set_xscale("log", base=2)
        axes[0].set_xlabel("document length (tokens)")
        axes[0].set_ylabel("best passage holds the needle (%)")
        axes[0].set_ylim(0, 105)
        axes[0].legend()
        axes[0].set_title("needle: passage localisation in the relevant document")
    if "qmsum" in out:
        labels = [x for x in weightings("any") if x in out["qmsum"]]
        axes[1].bar(labels, [out["qmsum"][x]["best_is_oracle"] for x in labels], color="tab:blue")
        axes[1].set_ylim(0, 100)
        axes[1].set_ylabel("best passage = lexical oracle window (%)")
        axes[1].set_title("qmsum-train (proxy)")
        axes[1].tick_params(axis="x", rotation=20)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="1024,2048,4096,8192")
    ap.add_argument("--docs", type=int, default=50)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--haystack", default=str(ROOT.parent / "shared/data/paul-graham-essays"))
    ap.add_argument("--beir", default=str(ROOT.parent / "shared/data/qmsum-train"))
    ap.add_argument("--qmsum-index", default="/tmp/ldr-bench/qmsum-index")
    ap.add_argument("--qmsum-queries", type=int, default=None)
    ap.add_argument("--skip", default="", help="needle or qmsum")
    ap.add_argument("--colbert", default=None, help="needle indexes also get this colbert model (e.g. colbert-small); "
                    "adds the colbert passage scorings")
    ap.add_argument("--needle-json", default=None, help="reuse the needle results of an earlier run")
    ap.add_argument("--out", default=str(ROOT / "bench/results/passages.json"))
    ap.add_argument("--png", default=str(ROOT / "bench/figures/passages.png"))
    ap.add_argument("--plot-only", action="store_true", help="only redraw the PNG from --out")
    args = ap.parse_args()
    if args.plot_only:
        plot(json.loads(Path(args.out).read_text()), Path(args.png))
        return
    out = {}
    if args.needle_json:
        out["needle"] = json.loads(Path(args.needle_json).read_text())["needle"]
    elif "needle" not in args.skip:
        out["needle"] = needle_bench([int(x) for x in args.lengths.split(",")], args.docs, args.queries,
                                     Path(args.haystack), args.colbert)
    if "qmsum" not in args.skip:
        from bench_serve import ensure_index
        ensure_index(Path(args.qmsum_index), Path(args.beir) / "corpus.jsonl")
        out["qmsum"] = qmsum_bench(Path(args.qmsum_index), Path(args.beir), args.qmsum_queries)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    plot(out, Path(args.png))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
