"""`ldr index`, `add`, `delete`, `merge`: the commands that write an index."""
from __future__ import annotations

import json  # noqa: F401
import sys  # noqa: F401

import click

from ..corpus import DEFAULT_MAX_DOC_MB
from ..corpus.worker import DEFAULT_DOC_TIMEOUT
from .app import main
from .build_options import BuildCommand, build_config
from .common import _echo_ray, make_ray_options, ray_options, write_options


def _echo_language(info: dict | None) -> None:
    if not info:
        return
    how = (f"detected in {100 * info['share']:.0f}% of the text of {info['sampled']} sampled documents"
           if info.get("detected") else "as given")
    if info.get("fallback"):   # too little text, or no language holds most of it
        how = (f"the default: no language was recognised in the {info['sampled']} sampled documents; "
               "give --language if it is not English")
    models = ", ".join(f"{kind} {model}" for kind, model in info.get("models", {}).items() if model)
    click.echo(f"language: {info['code']} ({how}); BM25 analyzer {info['analyzer']}" + (f", {models}" if models else ""))


@main.command("index", cls=BuildCommand)
@click.argument("corpus", type=click.Path(exists=True))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Index directory to write.")
@ray_options
@click.option("--wait", is_flag=True, help="Wait for another writer of OUTPUT to finish instead of failing.")
@click.option("--overwrite", is_flag=True, help="OUTPUT is an index already: replace its documents with CORPUS's.")
@click.option("--shards", type=click.IntRange(min=1), default=None,
              help="Build a sharded index of this many shards (documents routed by a hash of their id; "
                   "BM25 scored with the whole index's statistics: the native backend, the default).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def index_cmd(corpus, out, wait, overwrite, quiet, shards, ray_address, ray_workers, ray_cpus_per_worker,
              ray_shard_docs, **options):
    """Index CORPUS (a directory or file: text, Markdown, HTML, PDF, DOCX, ODT, EPUB, JSONL, JSON, Parquet) into OUTPUT.

    OUTPUT must be new, unless --overwrite: then a new generation holds only CORPUS (readers keep
    the previous one until they refresh). `ldr add CORPUS -i OUTPUT` adds to an index instead."""
    from pathlib import Path

    from ..api import Index
    from ..corpus import IngestReport
    from ..encode.omp_wait import spin_before_sleeping
    from ..errors import ConfigError, IndexFormatError
    from ..index.cluster import is_cluster
    from ..index.view import holds_index

    spin_before_sleeping()      # before torch loads (encode/omp_wait.py)

    if not overwrite and holds_index(Path(out)):
        raise ConfigError(f"{out} is an index already: `ldr add {corpus} -i {out}` adds these documents to it "
                          f"(replacing those with the same ids); `--overwrite` replaces the whole index with them")

    report = IngestReport()
    ray = make_ray_options(ray_address, ray_workers, ray_cpus_per_worker, ray_shard_docs)
    if shards:
        _index_sharded(corpus, out, shards, options, report, quiet, wait, ray)
        return
    if is_cluster(out):
        raise ConfigError(f"{out} is a sharded index: `ldr add {corpus} -i {out}` adds to it; a new sharded index "
                          f"goes in a new directory (`ldr index {corpus} -o NEW --shards N`)")
    index = Index.build(corpus, out, config=build_config(**options), report=report, progress=not quiet, wait=wait,
                        overwrite=overwrite, ray=ray)
    click.echo(report.summary())
    _echo_language(index.manifest["settings"]["build"].get("language"))
    _echo_ray(index.manifest["settings"]["build"].get("ray"))
    for line in report.details():
        click.echo(line, err=True)
    secs = index.manifest["settings"]["build"]["seconds"]
    click.echo(f"index written to {out} in {secs:.1f}s (generation {index.generation})")



def _index_sharded(corpus, out, shards, options, report, quiet, wait, ray) -> None:
    from ..api import Index

    index = Index.build(corpus, out, shards=shards, config=build_config(**options), report=report,
                        progress=not quiet, wait=wait, ray=ray)
    click.echo(report.summary())
    for line in report.details():
        click.echo(line, err=True)
    sizes = ", ".join(str(s["live"]) for s in index.cluster["shards"])
    click.echo(f"sharded index written to {out}: {len(index)} documents in {shards} shards ({sizes}; "
               f"generation {index.generation})")


@main.command("add")
@click.argument("corpus", type=click.Path(exists=True))
@write_options
@click.option("--max-doc-mb", type=float, default=DEFAULT_MAX_DOC_MB, show_default=True,
              help="Skip (and count) documents larger than this.")
@click.option("--doc-timeout", type=float, default=DEFAULT_DOC_TIMEOUT, show_default=True,
              help="Skip (and count) a PDF, DOCX, ODT, EPUB or HTML file whose parsing takes longer (seconds).")
@click.option("--no-merge", is_flag=True, help="Do not merge small segments after adding.")
@click.option("--prune", is_flag=True,
              help="Also delete the documents read from CORPUS before that are no longer in it (files removed, "
                   "records dropped); without it they are listed.")
@ray_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def add_cmd(corpus, index_path, wait, trust_remote_code, device, max_doc_mb, doc_timeout, no_merge, prune, quiet, ray_address,
            ray_workers, ray_cpus_per_worker, ray_shard_docs):
    """Add the documents of CORPUS to an index (encoding only new or changed ones); an existing id is
    replaced, an unchanged document skipped. Documents read from CORPUS before that are gone from it
    are listed (--prune deletes them)."""
    from pathlib import Path

    from ..corpus import IngestReport, corpus_docs
    from ..index.unchanged import Seen, gone, known_files
    from ..encode.omp_wait import spin_before_sleeping

    spin_before_sleeping()      # before torch loads (encode/omp_wait.py)

    report = IngestReport()
    ray = make_ray_options(ray_address, ray_workers, ray_cpus_per_worker, ray_shard_docs)
    folder = Path(corpus).resolve()
    folder = str(folder if folder.is_dir() else folder.parent)
    with _writer(index_path, wait, trust_remote_code, device) as w:
        # a file the index holds as it was (size and time) is not read again (unchanged.known_files)
        docs = Seen(corpus_docs(corpus, report, max_doc_mb, index_path, doc_timeout,
                                known_files(w.origins(), folder)), report)   # refuses a corpus inside the index
        r = w.add(docs, report, progress=not quiet, max_doc_mb=max_doc_mb, auto_merge=not no_merge, ray=ray)
        stale = gone(w.origins(), folder, docs)
        pruned = w.delete(stale) if prune and stale else None
    for line in report.details():
        click.echo(line, err=True)
    _echo_ray(w.ray_info if ray else None)
    unchanged = f"{r['unchanged']} unchanged, " if r["unchanged"] else ""
    deleted = f"{len(pruned['deleted'])} deleted (gone from {corpus}), " if pruned else ""
    if stale and not prune:
        shown = ", ".join(stale[:10]) + (f" and {len(stale) - 10} more" if len(stale) > 10 else "")
        click.echo(f"{len(stale)} indexed document(s) read from {corpus} are no longer in it: {shown} "
                   f"(`ldr add {corpus} -i {index_path} --prune` deletes them)", err=True)
    generation = pruned["generation"] if pruned else r["generation"]
    click.echo(f"{r['added']} added, {len(r['replaced'])} replaced, {unchanged}{deleted}{r['skipped']} skipped "
               f"(generation {generation}, {_state(w)})")


def _writer(index_path, wait, trust_remote_code=False, device=None):
    """The writer of an index: a sharded one's (ldr/index/cluster_writer.py), or an IndexWriter."""
    from ..index.cluster import is_cluster

    if is_cluster(index_path):
        from ..index.cluster_writer import ClusterWriter
        return ClusterWriter(index_path, wait=wait)
    from ..index.writer import IndexWriter
    return IndexWriter(index_path, wait=wait, trust_remote_code=trust_remote_code, device=device)


def _state(w) -> str:
    if hasattr(w, "state"):
        return w.state()
    c = w.current
    return f"{c['doc_count'] if c else 0} documents in {len(c['segments']) if c else 0} segments"


@main.command("reshard")
@click.option("-i", "--index", "index_path", required=True, type=click.Path(), help="An index, sharded or not.")
@click.option("-o", "--output", "out", required=True, type=click.Path(),
              help="The new sharded index's directory (new, or an empty folder).")
@click.option("--shards", type=click.IntRange(min=1), required=True, help="Shards of the new index.")
@click.option("--wait", is_flag=True, help="Wait for another writer of the index to finish instead of failing.")
def reshard_cmd(index_path, out, shards, wait):
    """Copy an index (sharded or not) into a new sharded one of SHARDS shards: every document moves
    to the shard its id routes to, with its vectors and postings as they are (nothing re-encoded)."""
    from ..api import open as open_index
    from ..sharded import reshard

    source = open_index(index_path)
    before = len(source.cluster["shards"]) if source.sharded else 1
    new = reshard(source, out, shards, wait=wait)
    sizes = ", ".join(str(s["live"]) for s in new.cluster["shards"])
    click.echo(f"resharded {before} -> {shards} shards: {len(new)} documents in {out} ({sizes})")


@main.command("delete")
@click.argument("ids", nargs=-1)
@write_options
@click.option("--ids-file", type=click.File("r", encoding="utf-8"), default=None,
              help="A file of ids to delete, one per line ('-': standard input).")
def delete_cmd(ids, index_path, wait, trust_remote_code, device, ids_file):
    """Delete documents by id (IDS and/or --ids-file) and commit."""
    from ..errors import ConfigError

    wanted = list(ids) + ([line.strip() for line in ids_file if line.strip()] if ids_file else [])
    if not wanted:
        raise ConfigError("give the ids to delete (arguments or --ids-file)")
    with _writer(index_path, wait) as w:
        r = w.delete(wanted)
    click.echo(f"{len(r['deleted'])} deleted" + (f", {len(r['missing'])} not found" if r["missing"] else "")
               + f" (generation {r['generation']}, {_state(w).split(' in ')[0]})")
    if r["missing"]:
        shown = ", ".join(r["missing"][:10]) + (" ..." if len(r["missing"]) > 10 else "")
        click.echo(f"not in the index: {shown}", err=True)


@main.command("merge")
@write_options
@click.option("--max-segments", type=int, default=1, show_default=True, help="Merge down to this many segments.")
@click.option("--faiss", "faiss_index", default=None, metavar="TYPE",
              help="Change the dense index type (rabitq: compressed codes in RAM, exact vectors on disk); "
                   "the merged segments are rewritten with it, nothing is re-encoded (auto, flat, hnsw, rabitq, ivfpq).")
def merge_cmd(index_path, wait, trust_remote_code, device, max_segments, faiss_index):
    """Merge segments (deleted documents dropped, nothing re-encoded) and commit."""
    with _writer(index_path, wait) as w:
        r = w.merge(max_segments, faiss=faiss_index)
    if "segments" in r:
        click.echo(f"merged {r['merged']} segments; {r['segments']} segments now (generation {r['generation']})")
    else:
        click.echo(f"merged {r['merged']} segments in {r['shards']} shards (generation {r['generation']}, {_state(w)})")


