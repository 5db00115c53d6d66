"""`ldr` command line: a thin layer over the library (one library call per command)."""
from __future__ import annotations

import json
import logging
import sys

import click

from .encode.chunking import STRATEGIES
from .errors import LdrError


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that a build cleans up the same way."""


def _on_sigterm(signum, frame):
    raise _Terminated()


class _Group(click.Group):
    """Turns every error into `error: ...` on stderr and an exit code, never a traceback:
    LdrError and OS errors (disk full, permissions) exit 2, anything unexpected 1 (its traceback
    with -vv), Ctrl-C 130 and SIGTERM 143, after the same cleanup."""

    def invoke(self, ctx):
        import errno
        import signal

        try:
            signal.signal(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main thread (embedded use): leave signals alone
            pass
        try:
            return super().invoke(ctx)
        except LdrError as e:
            click.echo(f"error: {e}", err=True)
            ctx.exit(2)
        except _Terminated:
            click.echo("terminated", err=True)
            ctx.exit(143)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                click.echo("error: no space left on device", err=True)
            else:
                where = f": {e.filename}" if e.filename else ""
                click.echo(f"error: {e.strerror or e}{where}", err=True)
            ctx.exit(2)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as e:  # a bug: say so plainly; the traceback is for -vv
            logging.getLogger("ldr").debug("unexpected error", exc_info=True)
            click.echo(f"error: unexpected {type(e).__name__}: {str(e)[:500]} "
                       "(run with -vv for details; please report it)", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ldr")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """ldr: long-document retrieval engine."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


INDEX_OPTIONS = [
    click.option("--bm25", type=click.Choice(["tantivy", "lucene", "native", "none"]), default="tantivy",
                 show_default=True, help="BM25 backend: tantivy; lucene (pyserini); native (ldr's own index, any k1/b)."),
    click.option("--language", default="en", show_default=True,
                 help="Analyzer language (ISO code such as en, de, fr, ru; cjk/zh/ja/ko for CJK bigrams; none)."),
    click.option("--no-stem", is_flag=True, help="Do not stem terms."),
    click.option("--keep-stopwords", is_flag=True, help="Do not remove stop words."),
    click.option("--k1", type=float, default=None, help="BM25 k1 (default: the backend's)."),
    click.option("--b", "b", type=float, default=None, help="BM25 b (default: the backend's)."),
    click.option("--threads", type=int, default=0, help="Threads (0: all cores)."),
    click.option("--max-doc-mb", type=float, default=64.0, show_default=True,
                 help="Skip (and count) documents larger than this; raise it to index them (memory grows with it)."),
    click.option("--dense", "dense_model", default="all-MiniLM-L6-v2", show_default=True,
                 help="Dense model: a packaged name, a Hugging Face name or a local folder; `none` for no dense index."),
    click.option("--doc-strategy", type=click.Choice(STRATEGIES), default="maxp", show_default=True,
                 help="How long documents are encoded."),
    click.option("--max-length", type=int, default=None, help="Tokens per pass (default: the model's)."),
    click.option("--stride", type=int, default=None, help="maxp: tokens between passage starts (default: max length)."),
    click.option("--target-length", type=int, default=None,
                 help="Extension strategies: tokens encoded in one pass (default: 4x the model's trained window)."),
    click.option("--ntk-lambda", type=float, default=None, help="ntk: rotary base scale λ (default by scale factor)."),
    click.option("--group", type=int, default=None, help="selfextend: group size g."),
    click.option("--window", type=int, default=None, help="selfextend: neighbour window w."),
    click.option("--attn-scaling", is_flag=True, help="Scale attention logits by log(n)/log(L_o) beyond the trained length."),
    click.option("--dim", type=int, default=None, help="Matryoshka: keep the first DIM dimensions."),
    click.option("--query-prefix", default=None, help="Text put before queries (default: the model's prompt)."),
    click.option("--doc-prefix", default=None, help="Text put before documents (default: the model's prompt)."),
    click.option("--batch-tokens", type=int, default=16384, show_default=True, help="Token budget per forward pass."),
    click.option("--trust-remote-code", is_flag=True, help="Allow models that ship their own code."),
    click.option("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)."),
    click.option("--backend", type=click.Choice(["auto", "torch", "onnx", "onnx-int8"]), default="auto",
                 show_default=True,
                 help="Engine for the dense and sparse models: auto is ONNX Runtime fp32 on a CPU (same vectors "
                      "as PyTorch) and PyTorch on a GPU; onnx-int8 is faster with slightly different vectors. "
                      "Recorded in the index; queries use the same."),
    click.option("--faiss", "faiss_index", type=click.Choice(["flat", "hnsw", "ivfpq"]), default="flat",
                 show_default=True, help="FAISS index type."),
    click.option("--sparse", "sparse_model", default="splade-tiny", show_default=True,
                 help="Learned-sparse model (packaged name, HF name or folder); `none` for no sparse index."),
    click.option("--sparse-kind", type=click.Choice(["splade", "head"]), default="splade", show_default=True,
                 help="splade: MLM head; head: linear term-weight head (mGTE/BGE-M3 style)."),
    click.option("--sparse-head", default=None, help="kind=head: the head weights (default MODEL/sparse_linear.pt)."),
    click.option("--sparse-top-k", type=int, default=256, show_default=True,
                 help="Keep the k heaviest terms of a document (0: all), see --sparse-top-k-per."),
    click.option("--sparse-top-k-per", type=click.Choice(["document", "window"]), default="document", show_default=True,
                 help="Apply --sparse-top-k per document, or per window of it (the cap grows with length)."),
    click.option("--sparse-threshold", type=float, default=0.0, help="Drop term weights at or below this."),
]


def index_options(f):
    for opt in reversed(INDEX_OPTIONS):
        f = opt(f)
    return f


def build_config(bm25, language, no_stem, keep_stopwords, k1, b, threads, max_doc_mb, dense_model, doc_strategy, max_length,
                 stride, target_length, ntk_lambda, group, window, attn_scaling, dim, query_prefix, doc_prefix,
                 batch_tokens, trust_remote_code, device, backend, faiss_index, sparse_model, sparse_kind, sparse_head,
                 sparse_top_k, sparse_top_k_per, sparse_threshold):
    from .encode.dense import DenseSettings
    from .encode.sparse import SparseSettings
    from .index.build import BuildConfig
    from .components.faiss_store import FaissSettings

    dense = None if dense_model == "none" else DenseSettings(
        model=dense_model, strategy=doc_strategy, max_length=max_length, stride=stride, target_length=target_length,
        ntk_lambda=ntk_lambda, group=group, window=window, attn_scaling=attn_scaling, dim=dim,
        query_prefix=query_prefix, doc_prefix=doc_prefix, batch_tokens=batch_tokens,
        trust_remote_code=trust_remote_code, device=device, backend=backend)
    sparse = None if sparse_model == "none" else SparseSettings(
        model=sparse_model, kind=sparse_kind, head=sparse_head, top_k=sparse_top_k or None, top_k_per=sparse_top_k_per,
        threshold=sparse_threshold, device=device, backend=backend)
    return BuildConfig(bm25=None if bm25 == "none" else bm25, language=language, stemming=not no_stem,
                       stopwords=not keep_stopwords, k1=k1, b=b, threads=threads, max_doc_mb=max_doc_mb,
                       dense=dense, sparse=sparse,
                       faiss=FaissSettings(index=faiss_index))


RAY_OPTIONS = [
    click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                 help="Encode on a Ray cluster: ADDRESS as ray.init takes it (auto, ray://head:10001, host:6379); "
                      "without one, a local cluster on this machine. The index directory must be on storage "
                      "every node mounts at the same path. Needs ldr[ray]."),
    click.option("--ray-workers", type=int, default=None,
                 help="Encoder actors (default: one per GPU, else the cluster's CPUs / --ray-cpus-per-worker)."),
    click.option("--ray-cpus-per-worker", type=float, default=None,
                 help="CPUs per encoder actor (default: 1 with GPUs, else up to 4)."),
    click.option("--ray-shard-docs", type=int, default=None,
                 help="Documents per shard, each one segment (default: ~4 shards per worker, at most 1000)."),
]


def ray_options(f):
    for opt in reversed(RAY_OPTIONS):
        f = opt(f)
    return f


def make_ray_options(ray_address, ray_workers, ray_cpus_per_worker, ray_shard_docs):
    from .index.ray_build import RayOptions
    given = [n for n, v in (("--ray-workers", ray_workers), ("--ray-cpus-per-worker", ray_cpus_per_worker),
                            ("--ray-shard-docs", ray_shard_docs)) if v is not None]
    if ray_address is None:
        if given:
            from .errors import ConfigError
            raise ConfigError(f"{', '.join(given)} only apply with --ray")
        return None
    return RayOptions(address=None if ray_address == "local" else ray_address, workers=ray_workers,
                      cpus_per_worker=ray_cpus_per_worker, shard_docs=ray_shard_docs)


def _echo_ray(info: dict) -> None:
    if info:
        retried = f", shards retried: {info['retried']}" if info["retried"] else ""
        click.echo(f"encoded on Ray: {info['workers']} workers x {info['cpus_per_worker']:g} CPUs"
                   + (f" + {info['gpus_per_worker']:g} GPU" if info["gpus_per_worker"] else "")
                   + f" on {info['nodes']} node{'s' if info['nodes'] != 1 else ''}, {info['shards']} shards{retried}")


@main.command("index")
@click.argument("corpus", type=click.Path(exists=True))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Index directory to write.")
@index_options
@ray_options
@click.option("--wait", is_flag=True, help="Wait for another writer of OUTPUT to finish instead of failing.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def index_cmd(corpus, out, wait, quiet, ray_address, ray_workers, ray_cpus_per_worker, ray_shard_docs, **options):
    """Index CORPUS (a directory or file of txt/md/html/jsonl/json/parquet) into OUTPUT.

    On an existing index this commits a new generation holding only CORPUS: readers keep the
    previous one until they refresh."""
    from .api import Index
    from .corpus import IngestReport

    report = IngestReport()
    ray = make_ray_options(ray_address, ray_workers, ray_cpus_per_worker, ray_shard_docs)
    index = Index.build(corpus, out, config=build_config(**options), report=report, progress=not quiet, wait=wait,
                        ray=ray)
    click.echo(report.summary())
    _echo_ray(index.manifest["settings"]["build"].get("ray"))
    for line in report.details():
        click.echo(line, err=True)
    secs = index.manifest["settings"]["build"]["seconds"]
    click.echo(f"index written to {out} in {secs:.1f}s (generation {index.generation})")


WRITE_OPTIONS = [
    click.option("-i", "--index", "index_path", required=True, type=click.Path(), help="Index directory."),
    click.option("--wait", is_flag=True, help="Wait for another writer of the index to finish instead of failing."),
    click.option("--trust-remote-code", is_flag=True, help="Allow the index's models to run code they ship."),
    click.option("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)."),
]


def write_options(f):
    for opt in reversed(WRITE_OPTIONS):
        f = opt(f)
    return f


@main.command("add")
@click.argument("corpus", type=click.Path(exists=True))
@write_options
@click.option("--max-doc-mb", type=float, default=64.0, show_default=True,
              help="Skip (and count) documents larger than this.")
@click.option("--no-merge", is_flag=True, help="Do not merge small segments after adding.")
@ray_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def add_cmd(corpus, index_path, wait, trust_remote_code, device, max_doc_mb, no_merge, quiet, ray_address, ray_workers,
            ray_cpus_per_worker, ray_shard_docs):
    """Add the documents of CORPUS to an index (encoding only them); an existing id is replaced."""
    from .corpus import IngestReport, iter_corpus
    from .index.writer import IndexWriter

    report = IngestReport()
    ray = make_ray_options(ray_address, ray_workers, ray_cpus_per_worker, ray_shard_docs)
    with IndexWriter(index_path, wait=wait, trust_remote_code=trust_remote_code, device=device) as w:
        docs = iter_corpus(corpus, report, max_doc_mb=max_doc_mb, exclude=[index_path])
        r = w.add(docs, report, progress=not quiet, max_doc_mb=max_doc_mb, auto_merge=not no_merge, ray=ray)
    for line in report.details():
        click.echo(line, err=True)
    _echo_ray(w.ray_info if ray else None)
    click.echo(f"{r['added']} added, {len(r['replaced'])} replaced, {r['skipped']} skipped "
               f"(generation {r['generation']}, {w.current['doc_count']} documents in "
               f"{len(w.current['segments'])} segments)")


@main.command("delete")
@click.argument("ids", nargs=-1)
@write_options
@click.option("--ids-file", type=click.File("r", encoding="utf-8"), default=None,
              help="A file of ids to delete, one per line ('-': standard input).")
def delete_cmd(ids, index_path, wait, trust_remote_code, device, ids_file):
    """Delete documents by id (IDS and/or --ids-file) and commit."""
    from .errors import ConfigError
    from .index.writer import IndexWriter

    wanted = list(ids) + ([line.strip() for line in ids_file if line.strip()] if ids_file else [])
    if not wanted:
        raise ConfigError("give the ids to delete (arguments or --ids-file)")
    with IndexWriter(index_path, wait=wait) as w:
        r = w.delete(wanted)
    click.echo(f"{len(r['deleted'])} deleted" + (f", {len(r['missing'])} not found" if r["missing"] else "")
               + f" (generation {r['generation']}, {w.current['doc_count'] if w.current else 0} documents)")
    if r["missing"]:
        shown = ", ".join(r["missing"][:10]) + (" ..." if len(r["missing"]) > 10 else "")
        click.echo(f"not in the index: {shown}", err=True)


@main.command("merge")
@write_options
@click.option("--max-segments", type=int, default=1, show_default=True, help="Merge down to this many segments.")
def merge_cmd(index_path, wait, trust_remote_code, device, max_segments):
    """Merge segments (deleted documents dropped, nothing re-encoded) and commit."""
    from .index.writer import IndexWriter

    with IndexWriter(index_path, wait=wait) as w:
        r = w.merge(max_segments)
    click.echo(f"merged {r['merged']} segments; {r['segments']} segments now (generation {r['generation']})")


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
def tune_cmd(index_path, data, split, metric, rerank_depths, rerank_model, rerank_weights, rerank_only, max_queries,
             seed, dry_run, wait, as_json, quiet):
    """Choose the index's search defaults (fusion, weights, reranking) on your qrels and commit them.

    Settings are chosen on one random half of the queries and scored on the other (and the
    other way round); the final choice, made on all queries, becomes the index's defaults in a
    new generation."""
    from datetime import datetime, timezone
    from pathlib import Path

    from . import api
    from .eval.beir import load_qrels, load_queries
    from .errors import ConfigError
    from .search.tune import TuneOptions, as_search_defaults, describe, tune

    qrels_file = Path(data) / "qrels" / f"{split}.tsv"
    qrels = load_qrels(Path(data), split)      # a clear error naming the splits there are
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
    index = api.open(index_path)
    known = set(index.docstore.ids)
    if not any(d in known for docs in qrels.values() for d in docs):
        raise ConfigError(f"no document of {qrels_file} is in {index_path}: tune on qrels over this index's ids")
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
    click.option("--data", required=True, type=click.Path(exists=True, file_okay=False),
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
    """Fine-tune ldr's models on your own qrels (sentence-transformers trainers)."""


def _train(kind, settings, data, split, out, index_path, dev_fraction, device, quiet, base_model=None):
    from pathlib import Path

    from .train.run import train

    info = train(kind, Path(data), Path(out), split=split, index_path=index_path, settings=settings,
                 base_model=base_model, dev_fraction=dev_fraction, device=device, progress=not quiet)
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
def train_dense_cmd(data, split, out, index_path, epochs, batch_size, learning_rate, max_steps, dev_fraction, seed,
                    device, quiet, loss, negatives, max_seq_length):
    """Fine-tune the index's dense encoder: each query's relevant document's best passage (MaxP) as
    the positive, the best passages of the index's top non-relevant documents as negatives."""
    from .train.dense import DenseTrainSettings

    s = DenseTrainSettings(loss=loss, epochs=epochs, batch_size=batch_size, negatives=negatives,
                           max_seq_length=max_seq_length, max_steps=max_steps, seed=seed,
                           **({"learning_rate": learning_rate} if learning_rate else {}))
    _train("dense", s, data, split, out, index_path, dev_fraction, device, quiet)


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
def train_reranker_cmd(data, split, out, index_path, epochs, batch_size, learning_rate, max_steps, dev_fraction, seed,
                       device, quiet, base_model, negatives, max_length, loss, mini_batch):
    """Train a cross-encoder reranker on (query, window) pairs: relevant documents' best windows
    against the windows of hard negatives."""
    from .train.reranker import RerankerTrainSettings

    s = RerankerTrainSettings(epochs=epochs, batch_size=batch_size, negatives=negatives, max_length=max_length,
                              loss=loss, mini_batch=mini_batch, max_steps=max_steps, seed=seed,
                              **({"learning_rate": learning_rate} if learning_rate else {}))
    _train("reranker", s, data, split, out, index_path, dev_fraction, device, quiet, base_model)


@main.command("eval")
@click.option("--bench", type=click.Choice(["longembed", "loco", "mldr", "beir"]), required=True)
@click.option("--tasks", default=None, help="Comma-separated tasks (LongEmbed/LoCo task names, MLDR languages).")
@click.option("--data", type=click.Path(), default=None,
              help="Dataset folder as downloaded from Hugging Face (BEIR: the BEIR folder). Default: the hub, "
                   "or synthetic passkey/needle.")
@click.option("--haystack", type=click.Path(exists=True), default=None,
              help="Synthetic needle: folder of .txt essays to hide facts in.")
@click.option("--lengths", default=None, help="passkey/needle context lengths, e.g. 256,512,1024.")
@click.option("--split", default="test", show_default=True)
@click.option("--max-queries", type=int, default=None, help="Evaluate only the first N queries per task.")
@click.option("--depth", type=int, default=1000, show_default=True, help="Candidates per retriever.")
@click.option("--out", "out_dir", type=click.Path(), default="eval-out", show_default=True)
@click.option("--cache", type=click.Path(), default=None, help="Index cache folder (default OUT/cache).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic tasks.")
@click.option("--rerank-model", default=None, help="Cross-encoder for the reranked stage (default: passage rescoring).")
@index_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def eval_cmd(bench, tasks, data, haystack, lengths, split, max_queries, depth, out_dir, cache, seed, rerank_model, quiet,
             **options):
    """Evaluate every stage on a benchmark; writes TREC runs, metrics.json, report.md and plots."""
    from pathlib import Path

    from .eval.benchmarks import load
    from .eval.runner import EvalOptions, run_benchmark

    task_list = [t.strip() for t in tasks.split(",")] if tasks else None
    length_list = [int(x) for x in lengths.split(",")] if lengths else None
    loaded = load(bench, task_list, data, length_list, haystack, split, seed)
    config = build_config(**options)
    partial = []
    if max_queries:
        partial.append(f"max {max_queries} queries per task")
    if length_list:
        partial.append(f"lengths {lengths}")
    if task_list:
        partial.append(f"tasks {tasks}")
    settings = {"data": str(data) if data else ("synthetic" if bench == "longembed" else "hub"),
                "haystack": haystack, "split": split, "max_queries": max_queries, "lengths": length_list,
                "tasks": task_list, "depth": depth, "seed": seed, "partial": "; ".join(partial) or None,
                "dense": options["dense_model"], "doc_strategy": options["doc_strategy"],
                "sparse": options["sparse_model"], "bm25": options["bm25"]}
    opts = EvalOptions(max_queries=max_queries, depth=depth, cache=Path(cache) if cache else None, progress=not quiet,
                       rerank_model=rerank_model)
    settings["reranker"] = rerank_model or "passage"
    metrics = run_benchmark(bench, loaded, config, opts, Path(out_dir), settings)
    stages = list(metrics["averages"])
    click.echo(f"{'task':<22}" + "".join(f"{s:>10}" for s in stages))
    for name, t in metrics["tasks"].items():
        click.echo(f"{name:<22}" + "".join(f"{t['stages'][s][t['main_metric']]:>10.1f}" if s in t["stages"] else f"{'-':>10}"
                                          for s in stages))
    click.echo(f"{'average':<22}" + "".join(f"{metrics['averages'][s]:>10.1f}" for s in stages))
    click.echo(f"written to {out_dir}/ (metrics.json, report.md, runs/, plots) in {metrics['seconds']:.0f}s")


@main.group("probe")
def probe_group():
    """Diagnostics of encoders on long documents."""


@probe_group.command("position")
@click.argument("corpus", type=click.Path(exists=True))
@click.option("--out", "out_dir", type=click.Path(), default="probe-out", show_default=True)
@click.option("--model", default="all-MiniLM-L6-v2", show_default=True)
@click.option("--strategies", default="truncate,pcw,maxp,pi", show_default=True,
              help="Document strategies to compare (any of: " + ", ".join(STRATEGIES) + ").")
@click.option("--target-length", type=int, default=4096, show_default=True, help="Extension strategies' length.")
@click.option("--max-docs", type=int, default=50, show_default=True, help="Documents of CORPUS to probe.")
@click.option("--needle-length", type=int, default=2048, show_default=True, help="Moved-needle document length.")
@click.option("--depths", type=int, default=10, show_default=True, help="Needle depths, evenly spaced.")
@click.option("--needle-docs", type=int, default=50, show_default=True, help="Documents (= queries) per depth.")
@click.option("--device", default=None)
def probe_position(corpus, out_dir, model, strategies, target_length, max_docs, needle_length, depths, needle_docs,
                   device):
    """Where in a long document does an embedding look? Window similarity and moved-needle Acc@1."""
    from pathlib import Path

    from .errors import ConfigError
    from .eval.probe import run_probe, table

    strats = [s.strip() for s in strategies.split(",")]
    bad = [s for s in strats if s not in STRATEGIES]
    if bad:
        raise ConfigError(f"unknown strategies {bad}; choose from {', '.join(STRATEGIES)}")
    result = run_probe(corpus, Path(out_dir), model, strats, target_length, max_docs, needle_length, depths,
                       needle_docs, device)
    click.echo(table(result))
    click.echo(f"written to {out_dir}/probe.json and {out_dir}/probe.png")


@main.command("search")
@click.argument("query", required=False)
@click.option("-i", "--index", "index_path", required=True, type=click.Path(), help="Index directory.")
@click.option("-k", type=int, default=10, show_default=True, help="Number of hits (per query).")
@click.option("--mode", type=click.Choice(["hybrid", "bm25", "dense", "sparse"]), default=None,
              help="Retrievers to use (default: hybrid over all the index has).")
@click.option("--fusion", type=click.Choice(["rrf", "minmax", "zscore"]), default=None,
              help="Fusion method (default: the index's).")
@click.option("--weights", default=None, help="Fusion weights, e.g. bm25=1,dense=0.5,sparse=0.5.")
@click.option("--rerank", "rerank", type=click.Choice(["passage", "none"]), default=None,
              help="Second stage: passage-level rescoring or none (default: the index's).")
@click.option("--no-rerank", is_flag=True, help="Skip the second stage (same as --rerank none).")
@click.option("--rerank-model", default=None, help="Cross-encoder (any HF sequence-classification model).")
@click.option("--depth", type=int, default=None, help="Candidates per retriever (default 1000).")
@click.option("--rerank-depth", type=int, default=None, help="Candidates reranked (default 100).")
@click.option("--rerank-weight", type=float, default=None,
              help="The reranker's share (0-1) of the final score, mixed with the first stage's (default: the "
                   "index's, 1: the reranker's score alone).")
@click.option("--rerank-windows", type=int, default=None,
              help="Best passages per document a cross-encoder scores (default 8; fewer is faster on a CPU).")
@click.option("--filter", "filters", multiple=True, metavar="FIELD=VALUE",
              help="Only documents whose metadata matches (repeatable): lang=de, 'path=contracts/*', year>=2020.")
@click.option("-p", "--passages", type=int, default=None,
              help="Best passages per hit (character offsets into the text); the table shows the best as snippet.")
@click.option("--queries", "queries_file", type=click.Path(), default=None,
              help="Batch search: a TSV file (qid<TAB>text) or BEIR queries.jsonl; writes a TREC run.")
@click.option("-o", "--output", type=click.Path(), default=None, help="With --queries: the TREC run file (default stdout).")
@click.option("--run-tag", default="ldr", show_default=True, help="With --queries: the run's tag column.")
@click.option("--device", default=None, help="cpu, cuda (default: cuda when available).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--text", "with_text", is_flag=True, help="With --json: include each hit's full text.")
@click.option("--trust-remote-code", is_flag=True,
              help="Allow the index's models to run code they ship (an index cannot grant this itself).")
def search_cmd(query, index_path, k, mode, fusion, weights, rerank, no_rerank, rerank_model, depth, rerank_depth,
               rerank_weight, rerank_windows, filters, passages, queries_file, output, run_tag, device, as_json,
               with_text, trust_remote_code):
    """Search an index for QUERY: retrievers → fusion → rerank, as the index defines (see `ldr info`).
    With --queries FILE, search every query of the file and write a TREC run."""
    from . import api
    from .errors import ConfigError
    from .search import filters as _filters
    from .search.fusion import parse_weights

    from .corpus.text import replace_surrogates

    if (query is None) == (queries_file is None):
        raise ConfigError("give either a QUERY or --queries FILE")
    index = api.open(index_path, device=device, trust_remote_code=trust_remote_code)
    try:
        w = parse_weights(weights)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    options = dict(mode=mode, fusion=fusion, weights=w, rerank=False if (no_rerank or rerank == "none") else rerank,
                   rerank_model=rerank_model, depth=depth, rerank_depth=rerank_depth, rerank_weight=rerank_weight,
                   rerank_windows=rerank_windows, filters=_filters.parse(filters) if filters else None)
    if queries_file is not None:
        _batch_search(index, queries_file, output, k, run_tag, options)
        return
    query = replace_surrogates(query)   # undecodable argv bytes arrive as lone surrogates
    n_passages = passages if passages is not None else (0 if as_json else 1)
    hits = index.search(query, k=k, passages=n_passages, with_text=as_json and with_text,
                        with_meta=as_json, **options)   # texts are read only when shown
    stages = list(hits[0].scores) if hits else []
    if as_json:
        click.echo(json.dumps({"query": query, "mode": mode or index.default_mode(), "stages": stages,
                               "reranker": hits.reranker, "generation": hits.generation,
                               "timings_ms": {n: round(1e3 * t, 2) for n, t in hits.timings.items()},
                               "hits": [h.to_dict(with_text=with_text) for h in hits]}, ensure_ascii=False))
        return
    if not hits:
        click.echo("no hits")
        return
    _print_hits(hits, stages, hits.context)


def _print_hits(hits, stages, ctx) -> None:
    from .search.passages import snippet

    width = max(len(h.id) for h in hits)
    shown = [s for s in stages if "." not in s]
    click.echo(f"{'rank':>4}  {'id':<{width}}  {'score':>9}  " + "".join(f"{s:>9}  " for s in shown) + "title")
    finder = getattr(ctx, "finder", None)
    qterms = finder.query_terms(ctx.query) if finder is not None else set()
    for h in hits:
        cols = "".join(f"{h.scores[s]:>9.4f}  " if s in h.scores else f"{'-':>9}  " for s in shown)
        click.echo(f"{h.rank:>4}  {h.id:<{width}}  {h.score:>9.4f}  {cols}{h.title}")
        if h.passages:
            p = h.passages[0]
            # query terms in bold (click drops the styling when output is not a terminal)
            text = snippet(p.text, finder.marks(p.text, qterms), 160, lambda t: click.style(t, bold=True))
            click.echo(f"{'':>6}[{p.start}:{p.end}] {text}")


def _read_queries(path: str) -> list[tuple[str, str]]:
    """qid/text pairs from a TSV (qid<TAB>text) or a BEIR queries.jsonl file."""
    from pathlib import Path

    from .errors import ConfigError

    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read the queries file {path}: {e.strerror or e}") from None
    out, bad = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                rec = json.loads(line)
                qid, text = rec.get("_id", rec.get("id", rec.get("qid"))), rec.get("text", rec.get("query"))
            except (json.JSONDecodeError, AttributeError):
                qid = text = None
        else:
            qid, _, text = line.partition("\t")
            text = text if _ else None
        if qid in (None, "") or not isinstance(text, str):
            bad.append(n)
            continue
        out.append((str(qid), text))
    if bad:
        raise ConfigError(f"{path}: line(s) {', '.join(map(str, bad[:10]))}{' ...' if len(bad) > 10 else ''} are not "
                          "'qid<TAB>text' or a JSON object with _id and text")
    if not out:
        raise ConfigError(f"{path} holds no queries")
    return out


def _batch_search(index, queries_file, output, k, run_tag, options) -> None:
    """TREC run lines `qid Q0 docid rank score tag`; a query that cannot be searched (empty) is
    reported and skipped, never silently dropped."""
    import os
    from pathlib import Path

    from tqdm.auto import tqdm

    queries = _read_queries(queries_file)
    tag = "".join(run_tag.split()) or "ldr"
    out = Path(output) if output else None
    tmp = out.with_name(f".{out.name}.part-{os.getpid()}") if out else None
    fh = open(tmp, "w", encoding="utf-8") if tmp else sys.stdout
    skipped, lines = [], 0
    try:
        with tqdm(total=len(queries), desc="searching", unit="q", disable=out is None, leave=False) as bar:
            for qid, res in index.search_many(queries, k=k, progress=bar.update, with_meta=False, **options):
                if isinstance(res, Exception):
                    skipped.append(f"{qid} ({res})")
                    continue
                for h in res:
                    qid_col = "".join(qid.split()) or "_"
                    fh.write(f"{qid_col} Q0 {h.id} {h.rank} {h.score:.6f} {tag}\n")
                    lines += 1
        if tmp:
            fh.close()
            os.replace(tmp, out)   # a run file is whole or absent
    except BaseException:
        if tmp:
            fh.close()
            tmp.unlink(missing_ok=True)
        raise
    where = f" to {out}" if out else ""
    click.echo(f"{len(queries) - len(skipped)} queries searched, {lines} lines written{where}", err=True)
    if skipped:
        click.echo(f"{len(skipped)} queries skipped: " + "; ".join(skipped[:10]), err=True)


@main.command("serve")
@click.option("-i", "--index", "index_path", required=True, type=click.Path(), help="Index directory.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0: every interface).")
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--api-key", default=None, envvar="LDR_API_KEY", show_envvar=True,
              help="Key the write endpoints require (X-API-Key or Authorization: Bearer).")
@click.option("--read-only", is_flag=True, help="Turn the write endpoints off.")
@click.option("--max-body-mb", type=float, default=32, show_default=True, help="Largest request body.")
@click.option("--max-query-chars", type=int, default=8192, show_default=True)
@click.option("--device", default=None, help="cpu, cuda (default: cuda when available).")
@click.option("--trust-remote-code", is_flag=True,
              help="Allow the index's models to run code they ship (an index cannot grant this itself).")
def serve_cmd(index_path, host, port, api_key, read_only, max_body_mb, max_query_chars, device, trust_remote_code):
    """Serve an index over HTTP: POST /search, GET|POST|DELETE /documents, /info, /health, /metrics, /docs."""
    from .errors import BackendUnavailable

    try:
        from .serve.app import ServerSettings, serve
    except ImportError as e:
        raise BackendUnavailable(f"`ldr serve` needs the server extra: pip install 'ldr[server]' ({e.name} is missing)") from None
    from . import api

    api.open(index_path).close()   # a clear error before the server starts, not in its log
    settings = ServerSettings(api_key=api_key or None, read_only=read_only, max_body_bytes=int(max_body_mb * (1 << 20)),
                              max_query_chars=max_query_chars)
    click.echo(f"serving {index_path} on http://{host}:{port} (API docs: /docs)"
               + ("; read-only" if read_only else "; writes need the API key" if settings.api_key else ""), err=True)
    serve(index_path, host, port, settings, device=device, trust_remote_code=trust_remote_code)


@main.command("info")
@click.argument("index_path", type=click.Path())
@click.option("--json", "as_json", is_flag=True)
def info_cmd(index_path, as_json):
    """Show what an index holds (components, models, counts, sizes)."""
    from . import api

    info = api.open(index_path).info()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"index       {info['path']}")
    click.echo(f"documents   {info['documents']}")
    deleted = sum(s["deleted"] for s in info["segments"])
    click.echo(f"generation  {info['generation']}, {len(info['segments'])} segments"
               + (f" ({deleted} deleted rows until the next merge)" if deleted else ""))
    click.echo(f"size        {info['bytes'] / 1e6:.1f} MB")
    click.echo(f"created     {info['created']} by ldr {info['ldr_version']} (format {info['format_version']})")
    ing = info["ingest"]
    if ing:
        skipped = ", ".join(f"{r}: {n}" for r, n in ing.get("skipped", {}).items()) or "none"
        click.echo(f"ingest      {ing.get('indexed')} indexed; skipped: {skipped}")
    sd = info["search"]
    rr = sd.get("rerank_model") or sd.get("rerank") or "none"
    click.echo(f"search      mode={sd.get('mode')}, fusion={sd.get('fusion')}"
               + (f" (k={sd.get('rrf_k')})" if sd.get("fusion") == "rrf" else "")
               + f", weights={sd.get('weights') or 'equal'}, rerank={rr}"
               + (f" (top {sd.get('rerank_depth')}" + (f", weight {sd['rerank_weight']:g} mixed with the fused score"
                                                        if sd.get("rerank_weight", 1) < 1 else "") + ")"
                  if rr != "none" else ""))
    t = sd.get("tuned")
    if t:
        click.echo(f"{'':<11} tuned by `ldr tune` on {t['data']} ({t['split']}, {t['queries']} queries) at "
                   f"{t['at']}: held-out {t['metric']} {t['held_out']['tuned']:.1f} vs {t['held_out']['default']:.1f} "
                   "with the previous defaults")
    else:
        from .search.defaults import DEFAULT_SEARCH
        own = {k: v for k, v in sd.items() if k in DEFAULT_SEARCH}
        built_in = all(DEFAULT_SEARCH[k] == v for k, v in own.items())
        where = "ldr's built-in defaults" if built_in else "set through the API (Index.set_search_defaults)"
        click.echo(f"{'':<11} ({where}; `ldr tune` chooses them on your own qrels)")
    from . import components as registry

    for name, comp in info["components"].items():
        for i, line in enumerate(registry.get(name).summary(comp)):
            click.echo(f"{name if i == 0 else '':<11} {line}")


@main.command("check")
@click.argument("index_path", type=click.Path())
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def check_cmd(index_path, quiet):
    """Verify an index in full: every file's SHA-256, array shapes and ranges, counts. Exit 1 on any problem."""
    from tqdm.auto import tqdm

    from .index.check import check_index

    with tqdm(desc="checking", unit="file", disable=quiet, leave=False) as bar:
        manifest, problems = check_index(index_path, progress=lambda _: bar.update(1))
    if problems:
        click.echo(f"{index_path}: {len(problems)} problem(s)", err=True)
        for p in problems:
            click.echo(f"  - {p}", err=True)
        click.echo("rebuild the index with `ldr index` (or restore it from a backup)", err=True)
        sys.exit(1)
    n_files = len(manifest["files"])
    click.echo(f"{index_path}: OK ({manifest['doc_count']} documents, {n_files} files verified, "
               f"components: {', '.join(manifest['components'])})")


if __name__ == "__main__":
    sys.exit(main())
