"""`ldr tune --relevance`: the index's relevance fitted on the user's judgements (eval/relevance_fit.py)."""
from __future__ import annotations

import json
import random

import click


def tune_relevance(index, data, split: str, qrels: dict, max_queries, seed: int, precision: float,
                   confidence: float, dry_run: bool, wait: bool, as_json: bool, quiet: bool) -> None:
    from ..eval import relevance_fit
    from ..eval.beir import load_queries

    queries = load_queries(data)
    qids = sorted(q for q in qrels if q in queries and any(int(r) > 0 for r in qrels[q].values()))
    if max_queries:
        qids = sorted(random.Random(seed).sample(qids, min(max_queries, len(qids))))
    rows = relevance_fit.collect(index, queries, qrels, qids, progress=not quiet)
    fit = relevance_fit.fit(relevance_fit.dominant(rows), precision, confidence, seed=seed)
    fit.update({"data": str(data.resolve()), "split": split, "kinds": index.plan("relevance").kinds,
                "documents": len(index)})
    if not dry_run:
        search = dict(index.manifest.get("search", {}), relevance_fit=fit)
        fit["generation"] = index.set_search_defaults(search, {"relevance_fit": f"{fit['queries']} queries of {data}"},
                                                      wait=wait)["generation"]
    if as_json:
        click.echo(json.dumps(fit, indent=2))
        return
    e, b = fit["ece"], fit["brier"]
    click.echo(f"{fit['queries']} judged queries of {data} ({split}), their top 20 hits: {fit['hits']} "
               f"({fit['relevant']} relevant); the {fit['estimate']} estimate recalibrated: "
               f"P = sigmoid({fit['a']:.3f} logit(p) {fit['b']:+.3f})")
    click.echo(f"calibration error (ECE), 5-fold cross-validated by query: {e['shipped']:.3f} shipped -> "
               f"{e['cross_validated']:.3f} fitted (Brier {b['shipped']:.3f} -> {b['cross_validated']:.3f})")
    m = fit["min_score"]
    if m:
        sure = (f"precision at least {precision:g} with {confidence:.0%} confidence" if m["certified"] else
                f"the closest to precision {precision:g} with {confidence:.0%} confidence these judgements allow: "
                f"{m['confidence']:.0%} confidence (judge more queries to certify it)")
        click.echo(f"min_score {m['threshold']:.2f}: {sure}; {m['right']} of {m['kept']} kept hits relevant out of fold, "
                   f"{m['recall']:.0%} of the relevant hits kept: `ldr search --min-score {m['threshold']:.2f}`")
    else:
        click.echo(f"no min_score keeps precision {precision:g} on these judgements: judge more queries, or ask for less")
    click.echo("dry run: nothing committed" if dry_run else
               f"committed: every search of {index.path} uses it (generation {fit['generation']}); `ldr info` names it")
