"""`ldr eval`: one (cached) index per task, every stage of the pipeline, metrics and reports."""
from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ..index.build import BuildConfig
from .metrics import evaluate
from .report import stage_order
from .runs import needs_escape, write_qrels, write_run
from ..search.options import ldr_default
from ..stages import Stage
from .tasks import Task

log = logging.getLogger(__name__)

METRICS = ("ndcg@10", "recall@100", "acc@1", "mrr@10")


@dataclass
class EvalOptions:
    max_queries: int | None = None
    depth: int | None = None              # None: the search options' defaults (ldr/search/options.py)
    rerank_depth: int | None = None
    # the second stage eval measures besides the default ones (a search runs none by default on a
    # CPU): passage rescoring, or a cross-encoder
    rerank: str | None = "passage"
    rerank_model: str | None = None
    stages: dict | None = None            # registered extra stages ({name: {setting: value}})
    cache: Path | None = None
    progress: bool = True
    index: object = None                  # evaluate this opened index (its documents must be the task's corpus)


def _config_key(config: BuildConfig) -> str:
    """What the index content depends on; query-time settings (config.search) are not part of it."""
    d = asdict(config)
    d.pop("search", None)
    d.pop("search_profile", None)
    for value in d.values():     # the device a model runs on does not change what it writes
        if isinstance(value, dict):
            value.pop("device", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def task_index(task: Task, config: BuildConfig, cache: Path, progress: bool, indexes):
    """Open the cached index of (task data, build settings), building it on a miss. `indexes`:
    the Index class (ldr.Index: `indexes(path)` opens, `indexes.build(...)` builds), or one with a
    `cache_tag` (ldr.sharded.Shards) naming its own cache entries."""
    from ..errors import IndexFormatError

    safe = re.sub(r"[^A-Za-z0-9_.@-]", "_", task.name)
    path = cache / f"{safe}-{task.fingerprint}-{_config_key(config)}{getattr(indexes, 'cache_tag', '')}"
    if path.is_dir():
        try:
            return indexes(path, verify=False), True
        except IndexFormatError:
            log.warning("cached index %s is damaged; rebuilding", path)
            import shutil
            shutil.rmtree(path)   # ldr's own cache folder: nothing else lives there
    return indexes.build(task.corpus(), path, config=config, progress=progress), False


def given_index(task: Task, index):
    """The index the user built (`ldr eval -i IDX`, opened by the caller), after checking it holds
    exactly the task's corpus (by id): other documents would make it another collection, missing
    ones score 0."""
    from ..errors import ConfigError

    held, corpus = set(index.live_ids()), {d.id for d in task.corpus()}
    missing, extra = sorted(corpus - held), sorted(held - corpus)
    if missing or extra:
        raise ConfigError(f"{index.path} is not an index of {task.name}'s corpus: it lacks {len(missing)} of its "
                          f"{len(corpus)} documents{f' (e.g. {missing[0]})' if missing else ''} and holds "
                          f"{len(extra)} others{f' (e.g. {extra[0]})' if extra else ''}; build it from the "
                          "corpus (`ldr index DIR/corpus.jsonl -o IDX`) or leave -i out")
    return index


def evaluate_task(task: Task, config: BuildConfig, opts: EvalOptions, out: Path, indexes) -> dict:
    """Metrics per stage for one task; writes one TREC run per stage."""
    t0 = time.perf_counter()
    if opts.index:
        index, cached = given_index(task, opts.index), True
    else:
        index, cached = task_index(task, config, opts.cache or out / "cache", opts.progress, indexes)
    build_s = time.perf_counter() - t0
    qids = sorted(task.queries)
    if opts.max_queries:
        qids = qids[: opts.max_queries]
    qrels = {q: task.qrels[q] for q in qids if q in task.qrels}
    runs: dict[str, dict[str, dict[str, float]]] = {}
    features: dict[str, dict] = {}
    t1 = time.perf_counter()
    for qid in tqdm(qids, desc=task.name, unit="q", disable=not opts.progress, leave=False):
        # the index's own settings (ldr's defaults unless the build set others), every stage kept
        result = index.search(task.queries[qid], k=opts.depth or ldr_default("depth"), depth=opts.depth,
                              rerank_depth=opts.rerank_depth, rerank=opts.rerank, rerank_model=opts.rerank_model,
                              stages=opts.stages, with_text=False, passages=0)
        cands, ids = result.candidates, result.ids     # {docno: id} of every candidate
        first = [s.kind for s in result.plan.first]
        for name in first:
            runs.setdefault(name, {})[qid] = {ids[d]: s for d, s in cands.runs[name].items()}
        ranked = [s.name for s in result.plan.rest if s.name in cands.runs or s.name == Stage.FUSED.value]
        base = cands.runs.get(Stage.FUSED.value) or cands.runs[first[0]]
        before = base
        for stage in ranked:   # a stage that rescored the top candidates leaves the others in the order before it
            if stage == Stage.FUSED.value:
                if stage in cands.runs:
                    runs.setdefault(stage, {})[qid] = {ids[d]: s for d, s in cands.runs[stage].items()}
                continue
            runs.setdefault(stage, {})[qid] = below(cands.runs[stage], before, ids)
            before = cands.runs[stage] if stage == Stage.WINDOWS.value else before
        if cands.features:
            features[qid] = {ids[d]: f for d, f in cands.features.items()}
    search_s = time.perf_counter() - t1
    default_stage = plain_stage(index, task.queries[qids[0]] if qids else "query")
    result = {"queries": len(qids), "documents": len(index), "index_cached": cached, "default_stage": default_stage,
              "stage_runs": stage_runs(result.plan, default_stage) if qids else {},
              "seconds": {"index": round(build_s, 2), "search": round(search_s, 2)}, "stages": {},
              "analyzer": index_analyzer(index.components),
              "language": index.manifest["settings"]["build"].get("language")}
    result["significance"] = stage_significance(qrels, runs)
    tdir = out / "runs"
    tdir.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.@-]", "_", task.name)
    if features:  # the second stage's inputs, for tuning its weights offline
        (tdir / f"{safe}.rerank_features.json").write_text(json.dumps(features))
    escaped = sorted({d for q in qrels for d in (q, *qrels[q])} | {d for r in runs.values() for q in r for d in (q, *r[q])},
                     key=str)
    escaped = [i for i in escaped if needs_escape(i)]
    if escaped:     # other tools read %XX as it is: the qrels these runs are scored against, escaped alike
        write_qrels(tdir / f"{safe}.qrels.trec", qrels)
        result["escaped_ids"] = {"count": len(escaped), "examples": escaped[:3],
                                 "qrels": str(tdir / f"{safe}.qrels.trec")}
    for stage in stage_order():
        if stage in runs:
            write_run(tdir / f"{safe}.{stage}.trec", runs[stage], f"ldr-{stage}")
            result["stages"][stage] = {m: round(100 * v, 2) for m, v in evaluate(qrels, runs[stage], METRICS).items()}
    return result


def plain_stage(index, query: str) -> str:
    """The stage whose order a plain search (`ldr search QUERY -i IDX`, no option) returns: the
    last ranking stage of its plan (a BM25-only index still runs the window stage)."""
    plan = index.plan(query)
    ranking = [s.name for s in plan.rest if s.name in (Stage.FUSED.value, Stage.WINDOWS.value, Stage.RERANKED.value)]
    return ranking[-1] if ranking else plan.first[0].kind


def stage_runs(plan, default: str) -> dict[str, str]:
    """{stage: how a user gets that stage's ranking from `ldr search`} on this index."""
    out = {s.kind: f"--mode {s.kind}" for s in plan.first}
    out[Stage.FUSED.value] = "--window-weight 0 (the fused list)"
    windows = plan.stage(Stage.WINDOWS.value)
    if windows is not None:
        out[Stage.WINDOWS.value] = f"the window stage: {windows.describe()}"
    second = plan.stage(Stage.RERANKED.value)
    if second is not None:
        name = second.reranker.name
        ask = f"--rerank-model {name.split(':', 1)[1]}" if name.startswith("cross-encoder:") else f"--rerank {name}"
        out[Stage.RERANKED.value] = f"{ask}: {second.describe()}" + (
            ", after the window stage" if windows is not None else "")
    for s in plan.rest:
        if s.name not in out and s.name not in (Stage.RELEVANCE.value, Stage.PASSAGES.value):
            out[s.name] = f"--stage {s.name}"
    out[default] = "default: " + out.get(default, default)
    return out


def index_analyzer(components: dict) -> dict | None:
    """The analyzer the index's lexical kind analyses text with (None without one)."""
    from .. import components as registry

    return next((a for n, kind in registry.kinds(components) if (a := kind.passage_analyzer(components[n]))), None)


def below(scores: dict, base: dict, ids) -> dict:
    """A stage's run {doc id: score}: the candidates it scored, then the rest of `base` below them
    in base's order (a stage that rescored the top candidates leaves the others where they were)."""
    out = {ids[d]: s for d, s in scores.items()}
    floor = min(out.values()) if out else 0.0
    rest = sorted(((d, s) for d, s in base.items() if ids[d] not in out), key=lambda kv: -kv[1])
    for i, (d, _) in enumerate(rest):
        out[ids[d]] = floor - 1 - i
    return out


def stage_significance(qrels: dict, runs: dict, metric: str = "ndcg@10") -> dict:
    """Does each stage beat the first (BM25 when there), and does the reranker beat fusion? Paired
    t-test and randomisation test, Holm-corrected over the stages (ldr/eval/compare.py)."""
    from .compare import compare

    order = [s for s in stage_order() if s in runs]
    if len(order) < 2 or not qrels:
        return {}
    base = order[0]          # the first kind in registry order: BM25 when the index has it
    names = [base] + [s for s in order if s != base]
    out = {"metric": metric, "baseline": base,
           "vs_baseline": {s: t[metric] for s, t in compare(qrels, {s: runs[s] for s in names}, (metric,),
                                                             permutations=2000)["tests"].items()}}
    if "fused" in runs and "windows" in runs:
        out["windows_vs_fused"] = compare(qrels, {"fused": runs["fused"], "windows": runs["windows"]}, (metric,),
                                          permutations=2000)["tests"]["windows"][metric]
    if "fused" in runs and "reranked" in runs:
        out["reranked_vs_fused"] = compare(qrels, {"fused": runs["fused"], "reranked": runs["reranked"]}, (metric,),
                                           permutations=2000)["tests"]["reranked"][metric]
    return out


def task_config(task: Task, config: BuildConfig) -> BuildConfig:
    """The build settings for one task: a multilingual task is built in its own language (its
    analyzer and, where the models are `auto`, the multilingual ones: BuildConfig.for_language);
    other tasks detect theirs like `ldr index`."""
    import dataclasses

    lang = task.meta.get("language")
    return config if lang is None or lang == config.language else dataclasses.replace(config, language=lang)


def run_benchmark(bench: str, tasks: list[Task], config: BuildConfig, opts: EvalOptions, out: Path,
                  settings: dict, indexes) -> dict:
    """Every task of a benchmark, its metrics aggregated and reported in `out`; `indexes`: the
    Index class the caller searches with (ldr.Index)."""
    from .report import aggregate, write_report

    out.mkdir(parents=True, exist_ok=True)
    per_task = {}
    t0 = time.perf_counter()
    for task in tasks:
        log.info("task %s: %d queries", task.name, len(task.queries))
        cfg = task_config(task, config)
        per_task[task.name] = evaluate_task(task, cfg, opts, out, indexes)
        per_task[task.name].update({"group": task.group, "length": task.length})
    metrics = aggregate(bench, per_task)
    metrics["settings"] = settings
    metrics["default_stage"] = next((t["default_stage"] for t in per_task.values()), None)
    metrics["stage_runs"] = next((t["stage_runs"] for t in per_task.values() if t.get("stage_runs")), {})
    metrics["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    write_report(metrics, out)
    return metrics
