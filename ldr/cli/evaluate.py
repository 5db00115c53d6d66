"""`ldr eval` and `ldr probe`: benchmarks and diagnostics."""
from __future__ import annotations

import json  # noqa: F401
import sys  # noqa: F401

import click

from .app import main

from ..encode.chunking import STRATEGIES
from .build_options import BuildCommand, build_config, given, models as build_models
from .search import parse_stages

@main.command("eval", cls=BuildCommand)
@click.option("--bench", type=click.Choice(["longembed", "loco", "mldr", "beir"]), default=None,
              help="Run a benchmark (or score run files: --qrels with --run).")
@click.option("--qrels", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Score and compare run files against these judgements (TREC qrels or a BEIR .tsv).")
@click.option("--run", "run_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A TREC run file (repeatable); each is tested against the first.")
@click.option("--json", "as_json", is_flag=True, help="--qrels: print the comparison as JSON.")
@click.option("--per-query", type=click.Path(dir_okay=False), default=None,
              help="--qrels: write every query's scores (TSV: run, query, metric, value).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="--qrels: a PNG of per-query nDCG@10 differences against the first run.")
@click.option("--tasks", default=None, help="Comma-separated tasks (LongEmbed/LoCo task names, MLDR languages).")
@click.option("--data", type=click.Path(), default=None,
              help="Dataset folder as downloaded from Hugging Face (BEIR: the BEIR folder). Default: the hub, "
                   "or synthetic passkey/needle.")
@click.option("--haystack", type=click.Path(exists=True), default=None,
              help="Synthetic needle: folder of .txt essays to hide facts in.")
@click.option("--lengths", default=None, help="passkey/needle context lengths, e.g. 256,512,1024.")
@click.option("--synthetic-docs", type=click.IntRange(min=2), default=None,
              help="passkey/needle: documents per length (default LongEmbed's 100); fewer is quicker, not comparable.")
@click.option("--split", default="test", show_default=True)
@click.option("--max-queries", type=int, default=None, help="Evaluate only the first N queries per task.")
@click.option("--depth", type=int, default=None, help="Candidates per retriever (default: the search's).")
@click.option("--out", "out_dir", type=click.Path(), default="eval-out", show_default=True)
@click.option("--cache", type=click.Path(), default=None, help="Index cache folder (default OUT/cache).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the synthetic tasks.")
@click.option("--rerank-model", default=None, help="Cross-encoder for the reranked stage (default: passage rescoring).")
@click.option("--stage", multiple=True, metavar="NAME[:SETTING=VALUE,...]",
              help="A registered extra stage every search runs (its run is reported as a stage).")
@click.option("--shards", type=click.IntRange(min=1), default=None,
              help="Evaluate sharded indexes of this many shards (BM25 native, scored with global statistics).")
@click.option("-i", "--index", "index_path", type=click.Path(), default=None,
              help="--bench beir --data DIR: evaluate this index you built (its documents must be the corpus's) "
                   "instead of building one.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def eval_cmd(bench, qrels, run_files, as_json, per_query, plot, tasks, data, haystack, lengths, synthetic_docs, split,
             max_queries, depth, out_dir, cache, seed, rerank_model, stage, shards, index_path, quiet, **options):
    """Evaluate every stage on a benchmark (writes TREC runs, metrics.json, report.md and plots),
    or score and compare run files: --qrels QRELS --run A.trec --run B.trec."""
    from pathlib import Path

    if qrels or run_files:
        return _compare_runs(qrels, run_files, as_json, per_query, plot)
    if bench is None:
        raise click.UsageError("give --bench, or --qrels with one or more --run files")

    from ..encode.omp_wait import spin_before_sleeping
    from ..eval.benchmarks import load
    from ..eval.runner import EvalOptions, run_benchmark

    spin_before_sleeping()      # it builds its indexes as `ldr index` does (encode/omp_wait.py)

    if index_path and (bench != "beir" or not data):
        raise click.UsageError("-i IDX evaluates an index of one corpus: give it with --bench beir --data DIR")
    typed = [n for n in options if click.get_current_context().get_parameter_source(n).name == "COMMANDLINE"]
    if index_path and (shards or typed):
        raise click.UsageError("-i IDX evaluates the index as it was built: leave out --shards and build options "
                               f"({', '.join('--' + n.replace('_', '-') for n in typed) or '--shards'})")
    task_list = [t.strip() for t in tasks.split(",")] if tasks else None
    length_list = [int(x) for x in lengths.split(",")] if lengths else None
    loaded = load(bench, task_list, data, length_list, haystack, split, seed, synthetic_docs)
    if bench == "mldr":
        from ..eval.benchmarks import mldr_leakage
        for m in mldr_leakage(build_models(options) + [rerank_model]):
            click.echo(f"warning: {m} was trained on MLDR's train split: its MLDR scores are not a held-out "
                       "evaluation (nor are published MLDR numbers of models trained on it)", err=True)
    config = build_config(**options)
    partial = []
    if max_queries:
        partial.append(f"max {max_queries} queries per task")
    if length_list:
        partial.append(f"lengths {lengths}")
    if synthetic_docs:
        partial.append(f"{synthetic_docs} documents per length")
    if task_list:
        partial.append(f"tasks {tasks}")
    settings = {"data": str(data) if data else ("synthetic" if bench == "longembed" else "hub"),
                "haystack": haystack, "synthetic_docs": synthetic_docs, "split": split, "max_queries": max_queries,
                "lengths": length_list, "tasks": task_list, "depth": depth, "seed": seed,
                "partial": "; ".join(partial) or None, "build": given(options),
                "stages": parse_stages(stage) or None, "shards": shards, "index": index_path}
    opts = EvalOptions(max_queries=max_queries, depth=depth, cache=Path(cache) if cache else None, progress=not quiet,
                       rerank_model=rerank_model, stages=parse_stages(stage) or None,
                       index=_open_index(index_path) if index_path else None)
    settings["reranker"] = rerank_model or "passage"
    from ..api import Index
    from ..sharded import Shards

    metrics = run_benchmark(bench, loaded, config, opts, Path(out_dir), settings, Shards(shards) if shards else Index)
    stages = list(metrics["averages"])
    default = metrics.get("default_stage")
    click.echo(f"{'task':<22}" + "".join(f"{s + ('*' if s == default else ''):>10}" for s in stages))
    for name, t in metrics["tasks"].items():
        click.echo(f"{name:<22}" + "".join(f"{t['stages'][s][t['main_metric']]:>10.1f}" if s in t["stages"] else f"{'-':>10}"
                                          for s in stages))
    click.echo(f"{'average':<22}" + "".join(f"{metrics['averages'][s]:>10.1f}" for s in stages)
               + (f"   (partial run: {settings['partial']}; not comparable with published averages)"
                  if settings["partial"] else ""))
    for name, t in metrics["raw"].items():
        g = t.get("significance") or {}
        if g.get("vs_baseline"):
            click.echo(f"{name}: nDCG@10 against {g['baseline']}, † significant (Holm-corrected t and randomisation "
                       "tests): " + ", ".join(f"{s} {100 * r['delta']:+.1f}{'†' if r['significant'] else ''}"
                                              for s, r in g["vs_baseline"].items()))
    for name, t in metrics["raw"].items():
        e = t.get("escaped_ids")
        if e:
            click.echo(f"note: {e['count']} id(s) of {name} hold whitespace or '%' ({', '.join(map(repr, e['examples']))}"
                       f"): the runs write them as %XX (TREC columns split on whitespace); score the runs with other "
                       f"tools (trec_eval, ir-measures, ranx) against {e['qrels']}, escaped alike", err=True)
    runs_as = metrics.get("stage_runs") or {}
    for s in stages:
        if s in runs_as:
            click.echo(f"{'*' if s == default else ' '} {s}: {runs_as[s]}")
    click.echo(f"written to {out_dir}/ (metrics.json, report.md, runs/, plots) in {metrics['seconds']:.0f}s")

def _open_index(path: str):
    from ..api import open as open_index
    return open_index(path)


def _compare_runs(qrels, run_files, as_json, per_query, plot) -> None:
    import json as _json
    from pathlib import Path

    from ..eval.compare import compare, format_table, plot_differences, read_qrels
    from ..eval.runs import read_run

    if not qrels or not run_files:
        raise click.UsageError("scoring run files needs --qrels and at least one --run")
    names = [Path(f).name for f in run_files]
    if len(set(names)) != len(names):
        names = [str(f) for f in run_files]
    judged = read_qrels(qrels)
    runs = {n: read_run(Path(f)) for n, f in zip(names, run_files)}
    for n, run in runs.items():
        if not set(run) & set(judged):
            click.echo(f"warning: no query of {n} is in {qrels} (its {len(run)} queries score 0): are they the "
                       "same queries, with the same ids?", err=True)
    result = compare(judged, runs)
    if per_query:
        with open(per_query, "w", encoding="utf-8") as fh:
            fh.write("run\tquery\tmetric\tvalue\n")
            for name, rows in result["per_query"].items():
                for q, vals in rows.items():
                    fh.writelines(f"{name}\t{q}\t{m}\t{v:.6f}\n" for m, v in vals.items())
    if plot and len(names) > 1:
        plot_differences(result, "ndcg@10", Path(plot))
    if as_json:
        click.echo(_json.dumps({k: v for k, v in result.items() if k != "per_query"}, indent=2))
    else:
        click.echo(format_table(result))

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

    from ..errors import ConfigError
    from ..eval.probe import run_probe, table

    strats = [s.strip() for s in strategies.split(",")]
    bad = [s for s in strats if s not in STRATEGIES]
    if bad:
        raise ConfigError(f"unknown strategies {bad}; choose from {', '.join(STRATEGIES)}")
    result = run_probe(corpus, Path(out_dir), model, strats, target_length, max_docs, needle_length, depths,
                       needle_docs, device)
    click.echo(table(result))
    click.echo(f"written to {out_dir}/probe.json and {out_dir}/probe.png")

