"""`ldr tune` and `ldr train`: fit an index's ranking to your own judged queries."""
from __future__ import annotations

import json  # noqa: F401
import sys  # noqa: F401

import click

from .app import main


@main.command("tune")
@click.option("-i", "--index", "index_path", required=True, type=click.Path(exists=True), help="Index directory.")
@click.option("--data", required=True, type=click.Path(exists=True),
              help="A BEIR folder: queries.jsonl and qrels/SPLIT.tsv over this index's document ids.")
@click.option("--split", default="dev", show_default=True, help="The qrels split to tune on.")
@click.option("--metric", default="ndcg@10", show_default=True,
              type=click.Choice(["ndcg@10", "recall@100", "mrr@10", "acc@1", "map"]))
@click.option("--rerank-depths", default="20,100", show_default=True,
              help="Rerank depths to try ('' : never rerank).")
@click.option("--rerank-model", default=None, help="Also try this cross-encoder (e.g. from `ldr train reranker`).")
@click.option("--rerank-weights", default="1,0.5,0.25", show_default=True,
              help="The reranker's shares of the final score to try (1: its score alone; less: mixed with the fused "
                   "score).")
@click.option("--rerank-only", is_flag=True,
              help="Keep the index's fusion setting and tune only reranking (e.g. a slow cross-encoder on a "
                   "--max-queries sample, after tuning fusion on every query).")
@click.option("--max-queries", type=int, default=None, help="Tune on a random sample of this many queries.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the held-out split.")
@click.option("--dry-run", is_flag=True, help="Report only; commit nothing.")
@click.option("--wait", is_flag=True, help="Wait for another writer of the index to finish instead of failing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@click.option("--relevance", is_flag=True,
              help="Fit the index's relevance (P(relevant), what --min-score cuts on) on these judgements instead of "
                   "the ranking: the shipped estimate recalibrated, checked by cross-validation, with the min_score "
                   "that keeps --precision at --confidence on them.")
@click.option("--precision", type=click.FloatRange(0.05, 0.99), default=0.8, show_default=True,
              help="--relevance: the precision the reported min_score keeps.")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.9, show_default=True,
              help="--relevance: with this confidence (a lower bound on the precision of the kept hits).")
def tune_cmd(index_path, data, split, metric, rerank_depths, rerank_model, rerank_weights, rerank_only, max_queries,
             seed, dry_run, wait, as_json, quiet, relevance, precision, confidence):
    """Choose the index's search defaults (fusion, weights, reranking) on your qrels and commit them.

    Settings are chosen on one random half of the queries and scored on the other (and the
    other way round); the final choice, made on all queries, becomes the index's defaults in a
    new generation."""
    from datetime import datetime, timezone
    from pathlib import Path

    from .. import sharded
    from ..eval.beir import load_qrels, load_queries
    from ..errors import ConfigError
    from ..eval.tune import TuneOptions, as_search_defaults, describe, tune

    qrels_file = Path(data) / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():   # most BEIR folders have no dev split: say what to do
        have = sorted(p.stem for p in (Path(data) / "qrels").glob("*.tsv"))
        hint = (f"pass --split {have[0] if len(have) == 1 else 'NAME'}: ldr tune holds out half of those queries "
                "itself and reports the score of its choice on them"
                if have else f"put the judgements in {Path(data) / 'qrels'}/SPLIT.tsv (query-id, corpus-id, score)")
        raise ConfigError(f"{qrels_file} not found (splits present: {', '.join(have) or 'none'}); {hint}. Keep a "
                          "test split you never tune on to report a final score")
    qrels = load_qrels(Path(data), split)
    try:
        depths = tuple(int(x) for x in rerank_depths.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--rerank-depths takes whole numbers, e.g. 20,100 (got {rerank_depths!r})") from None
    try:
        shares = tuple(float(x) for x in rerank_weights.split(",") if x.strip())
    except ValueError:
        shares = ()
    if not shares or not all(0 < w <= 1 for w in shares):
        raise ConfigError(f"--rerank-weights takes numbers above 0 and at most 1, e.g. 1,0.5 (got {rerank_weights!r})")
    if rerank_only and not (depths or rerank_model):
        raise ConfigError("--rerank-only needs something to rerank with: --rerank-depths or --rerank-model")
    index = sharded.open(index_path)
    known = set(index.live_ids())
    if not any(d in known for docs in qrels.values() for d in docs):
        raise ConfigError(f"no document of {qrels_file} is in {index_path}: tune on qrels over this index's ids")
    if relevance:
        from .relevance import tune_relevance
        return tune_relevance(index, Path(data), split, qrels, max_queries, seed, precision, confidence, dry_run, wait,
                              as_json, quiet)
    report = tune(index, load_queries(Path(data)), qrels,
                  TuneOptions(metric=metric, seed=seed, rerank_depths=depths, rerank_model=rerank_model,
                              rerank_weights=shares, rerank_only=rerank_only, max_queries=max_queries,
                              progress=not quiet))
    h = report["held_out"]
    if not dry_run:
        tuned = {"data": str(Path(data).resolve()), "split": split, "queries": report["queries"], "metric": metric,
                 "seed": seed, "held_out": {"default": round(h["default"], 2), "tuned": round(h["tuned"], 2)},
                 "setting": describe(report["chosen"]),
                 "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        search = as_search_defaults(report["chosen"], index.manifest.get("search", {}))
        search["tuned"] = tuned
        m = index.set_search_defaults(search, {"tuned": tuned["setting"]}, wait=wait)
        report["generation"] = m["generation"]
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"{report['queries']} queries of {qrels_file}, {report['n_settings']} settings scored, {metric}")
    click.echo(f"{'':<34}{'held-out':>10}{'all queries':>13}")
    click.echo(f"{'defaults: ' + describe(report['default']):<34}"[:80])
    click.echo(f"{'':<34}{h['default']:>10.2f}{report['full']['default']:>13.2f}")
    click.echo(f"{'tuned: ' + describe(report['chosen'])}")
    click.echo(f"{'':<34}{h['tuned']:>10.2f}{report['full']['chosen']:>13.2f}")
    rej = report.get("rerank_rejected")
    if rej:
        click.echo(f"  not reranking: {rej['setting']} was best on all queries, but chosen on one half it scored "
                   f"{rej['held_out']:.2f} on the other, against {rej['held_out_without']:.2f} without reranking")
    for half in h["halves"]:
        click.echo(f"  chosen on half {half['chosen_on']}: {half['setting']}: {half['tuned']:.2f} on the other half "
                   f"(defaults {half['default']:.2f})")
    click.echo("held-out: chosen on one half of the queries, scored on the other; 'all queries' is optimistic for the "
               "tuned setting")
    if dry_run:
        click.echo("dry run: nothing committed")
    else:
        click.echo(f"committed as the search defaults of {index_path} (generation {report['generation']})")


TRAIN_OPTIONS = [
    click.option("--data", default=None, type=click.Path(exists=True, file_okay=False),
                 help="A BEIR folder: queries.jsonl, qrels/SPLIT.tsv (and corpus.jsonl when no -i is given)."),
    click.option("--split", default="train", show_default=True, help="The qrels split to train on."),
    click.option("-o", "--output", "out", required=True, type=click.Path(), help="Model folder to write."),
    click.option("-i", "--index", "index_path", default=None, type=click.Path(exists=True),
                 help="An index of the corpus to mine passages and negatives from (default: a temporary BM25 + "
                      "dense index of DATA/corpus.jsonl)."),
    click.option("--epochs", type=float, default=1.0, show_default=True),
    click.option("--batch-size", type=int, default=16, show_default=True),
    click.option("--lr", "learning_rate", type=float, default=None, help="Learning rate (default: 2e-5 dense, 5e-5 "
                                                                       "reranker)."),
    click.option("--max-steps", type=int, default=-1, help="Stop after this many steps (default: the epochs)."),
    click.option("--eval-steps", type=click.IntRange(min=1), default=None,
                 help="Steps between dev evaluations, each saving a checkpoint (default: 4 per epoch)."),
    click.option("--dev-fraction", type=float, default=0.1, show_default=True,
                 help="Queries held out for early stopping."),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option("--device", default=None, help="cpu, cuda (default: cpu)."),
    click.option("-q", "--quiet", is_flag=True, help="No progress bars."),
]


def train_options(f):
    for opt in reversed(TRAIN_OPTIONS):
        f = opt(f)
    return f


@main.group("train")
def train_group():
    """Adapt ldr's models: fine-tune them on your own qrels (sentence-transformers trainers), or
    learn your corpus without labels (`whitening`, `dense --from-corpus`)."""


def _train(kind, settings, data, split, out, index_path, dev_fraction, device, quiet, base_model=None, pseudo=None):
    from pathlib import Path

    from ..train.run import train

    from ..api import Index

    if pseudo is None and data is None:
        raise click.UsageError("give --data (a BEIR folder with your queries and qrels), or --from-corpus -i IDX "
                               "(dense only: pseudo-queries drawn from the index's documents)")
    if pseudo is not None and data is not None:
        raise click.UsageError("--from-corpus trains without queries: drop --data (or drop --from-corpus)")
    info = train(kind, data and Path(data), Path(out), split=split, index_path=index_path, settings=settings,
                 indexes=Index, base_model=base_model, dev_fraction=dev_fraction, device=device, progress=not quiet,
                 pseudo=pseudo)
    if pseudo is not None:
        p = info["pseudo"]
        click.echo(f"{p['drawn']} pseudo-queries drawn from {info['documents']} documents; {p['kept']} kept (the "
                   f"search ranks their document in its top {p['top']}), {p.get('vague', 0)} too vague")
    d = info["dev"]
    click.echo(f"trained on {info['train_queries']} queries ({info['rows']} rows) in {info['seconds']:.0f}s "
               f"({info['steps']} steps, mean loss {info['train_loss']:.4f}); dev {d['metric']} on "
               f"{info['dev_queries']} held-out queries: {100 * (d['before'] or 0):.2f} -> {100 * (d['after'] or 0):.2f}")
    click.echo(f"model written to {out} (card: README.md, ldr-train.json)")


@train_group.command("dense")
@train_options
@click.option("--loss", type=click.Choice(["mnrl", "opl"]), default="mnrl", show_default=True,
              help="mnrl: multiple negatives ranking; opl: M2-BERT's orthogonal projection loss.")
@click.option("--negatives", type=int, default=1, show_default=True, help="Hard negatives per query.")
@click.option("--max-seq-length", type=int, default=None, help="Tokens per passage (default: the model's window).")
@click.option("--from-corpus", is_flag=True,
              help="No labels: learn the index's own documents (-i), from pseudo-queries drawn from them (summaries "
                   "and keyword sets of windows) that the index's search ranks right, against the documents it "
                   "ranks beside them.")
@click.option("--queries", "pseudo_queries", type=click.IntRange(min=4), default=None,
              help="--from-corpus: pseudo-queries to draw (default 1000).")
@click.option("--shapes", "pseudo_shapes", default=None,
              help="--from-corpus: the pseudo-queries' shapes, taken in turn, comma-separated, of: summaries, "
                   "keyword sets (a window's catchwords), document keywords (a whole document's) "
                   "(default: summaries,keyword sets).")
def train_dense_cmd(data, split, out, index_path, epochs, batch_size, learning_rate, max_steps, eval_steps,
                    dev_fraction, seed, device, quiet, loss, negatives, max_seq_length, from_corpus, pseudo_queries,
                    pseudo_shapes):
    """Fine-tune the index's dense encoder: each query's relevant document's best passage (MaxP) as
    the positive, the best passages of the index's top non-relevant documents as negatives; or,
    with --from-corpus, on pseudo-queries of the index's own documents (no labels)."""
    from ..train.dense import DenseTrainSettings
    from ..train.pseudo import PseudoSettings

    if (pseudo_queries is not None or pseudo_shapes is not None) and not from_corpus:
        raise click.UsageError("--queries and --shapes are for --from-corpus")
    s = DenseTrainSettings(loss=loss, epochs=epochs, batch_size=batch_size, negatives=negatives,
                           max_seq_length=max_seq_length, max_steps=max_steps, eval_steps=eval_steps, seed=seed,
                           **({"learning_rate": learning_rate} if learning_rate else {}))
    pseudo = PseudoSettings(**({"queries": pseudo_queries} if pseudo_queries else {}), negatives=negatives, seed=seed,
                            **({"shapes": tuple(x.strip() for x in pseudo_shapes.split(",") if x.strip())}
                               if pseudo_shapes is not None else {})) \
        if from_corpus else None
    _train("dense", s, data, split, out, index_path, dev_fraction, device, quiet, pseudo=pseudo)


@train_group.command("whitening")
@click.option("-i", "--index", "index_path", required=True, type=click.Path(exists=True, file_okay=False),
              help="The index whose passage vectors are fitted (its dense model is the one adapted).")
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Model folder to write.")
@click.option("--eps", type=click.FloatRange(min=0, min_open=True), default=0.01, show_default=True,
              help="Each eigenvalue is raised by this share of their mean (smaller: whiter, noisier).")
@click.option("--max-passages", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Passages fitted at most (a seeded sample beyond).")
@click.option("--context", type=click.FloatRange(0, 16), default=0.6, show_default=True,
              help="The document context the model's indexes use by default (each passage vector mixed with its "
                   "document's mean at this weight; `ldr index --doc-context` overrides it; 0: none).")
@click.option("--apply", "in_place", is_flag=True,
              help="Then commit the index's passages as the model gives them (its stored vectors mapped: nothing "
                   "re-encoded, seconds): its searches and adds run the model from the next generation on.")
def train_whitening_cmd(index_path, out, eps, max_passages, context, in_place):
    """No labels, seconds: whiten the index's passage vectors into a copy of its dense model (their
    mean out, their covariance the identity); then `--apply` it to the index, or `ldr index CORPUS
    --dense MODEL`."""
    import time

    from ..train.whitening import whiten

    t = time.perf_counter()
    about = whiten(index_path, out, eps=eps, limit=max_passages, context=context, in_place=in_place)
    click.echo(f"fitted on {about['passages']} passage vectors of {index_path}; model written to {out} "
               f"({about['base_name']} + whitening"
               + (f"; its indexes mix each passage with its document's mean at {context:g}" if context else "") + ")"
               + (f"; {index_path} now holds its passages as the model gives them (generation "
                  f"{about['applied']['generation']}), in {time.perf_counter() - t:.1f}s" if in_place else
                  f" in {time.perf_counter() - t:.1f}s. Use it: ldr index CORPUS -o IDX --dense {out}, or --apply"))


@train_group.command("reranker")
@train_options
@click.option("--base", "base_model", default=None, help="Model to start from (default: the packaged MiniLM).")
@click.option("--negatives", type=int, default=3, show_default=True, help="Hard-negative windows per query.")
@click.option("--max-length", type=int, default=384, show_default=True, help="Query + window tokens.")
@click.option("--loss", type=click.Choice(["bce", "mnrl"]), default="mnrl", show_default=True,
              help="bce: each window relevant or not (pointwise); mnrl: the positive against its query's hard "
                   "negatives (listwise).")
@click.option("--mini-batch-size", "mini_batch", type=int, default=None,
              help="mnrl: score each step's query-window pairs this many at a time (cached loss: much less memory, "
                   "a second forward pass; default: all at once).")
def train_reranker_cmd(data, split, out, index_path, epochs, batch_size, learning_rate, max_steps, eval_steps,
                       dev_fraction, seed, device, quiet, base_model, negatives, max_length, loss, mini_batch):
    """Train a cross-encoder reranker on (query, window) pairs: relevant documents' best windows
    against the windows of hard negatives."""
    from ..train.reranker import RerankerTrainSettings

    s = RerankerTrainSettings(epochs=epochs, batch_size=batch_size, negatives=negatives, max_length=max_length,
                              loss=loss, mini_batch=mini_batch, max_steps=max_steps, eval_steps=eval_steps, seed=seed,
                              **({"learning_rate": learning_rate} if learning_rate else {}))
    _train("reranker", s, data, split, out, index_path, dev_fraction, device, quiet, base_model)


