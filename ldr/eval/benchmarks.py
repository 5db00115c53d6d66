"""Benchmark loaders reading the official formats (LongEmbed, LoCoV1, MLDR as published on the Hugging Face hub).

Data comes from `--data DIR` (the dataset repository as downloaded from Hugging Face, e.g.
`hf download --repo-type dataset dwzhu/LongEmbed --local-dir DIR`) or, when the
network allows, from the hub by dataset id through `datasets`. Synthetic passkey/needle tasks
are generated locally when no data is given.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from ..corpus import Doc
from ..errors import DataError
from . import synthetic
from .beir import load_qrels, load_queries
from .tasks import Task, find_files, fingerprint, rows_of

log = logging.getLogger(__name__)

LONGEMBED_TASKS = ("narrativeqa", "qmsum", "summ_screen_fd", "2wikimqa", "passkey", "needle")
SYNTHETIC = ("passkey", "needle")
LOCO_TASKS = ("summ_screen_fd", "gov_report", "qmsum", "qasper_title", "qasper_abstract", "multifieldqa",
              "2wikimqa", "passage_retrieval", "courtlistener_HTML", "courtlistener_Plain_Text",
              "legal_case_reports", "stackoverflow")
MLDR_LANGS = ("ar", "de", "en", "es", "fr", "hi", "it", "ja", "ko", "pt", "ru", "th", "zh")
HUB_IDS = {"longembed": "dwzhu/LongEmbed", "loco": ("hazyresearch/LoCoV1-Queries", "hazyresearch/LoCoV1-Documents"),
           "mldr": "Shitao/MLDR"}


def _download_cmds(bench: str) -> str:
    ids = HUB_IDS[bench]
    ids = ids if isinstance(ids, tuple) else (ids,)
    return "; ".join(f"hf download --repo-type dataset {i} --local-dir DIR/{i.split('/')[1]}" for i in ids)


def _how_to_get(bench: str) -> str:
    return (f"{bench} data is not available offline. Download it where the hub is reachable "
            f"({_download_cmds(bench)}) and pass --data DIR")


def _hub_rows(repo: str, config: str | None, split: str, bench: str):
    """Rows from the hub through `datasets`; a DataError that says how to get the data offline
    (at once when the hub does not answer: no retries)."""
    from ..encode.models import hub_reachable

    if not hub_reachable():
        raise DataError(_how_to_get(bench) + " [the Hugging Face hub cannot be reached]")
    try:
        import datasets
        return datasets.load_dataset(repo, config, split=split)
    except Exception as e:  # offline: ConnectionError, OfflineModeIsEnabled, FileNotFoundError, ...
        raise DataError(_how_to_get(bench) + f" [{type(e).__name__}: {str(e)[:160]}]") from None


def _local_rows(data: Path, config: str, split: str, what: str, bench: str) -> list:
    """Rows of a downloaded dataset folder; a missing file names the download command."""
    try:
        return list(rows_of(data, config, split, what))
    except DataError as e:
        raise DataError(f"{e}; download it as published ({_download_cmds(bench)}) and pass --data DIR") from None


def _by_length(name, corpus_rows, query_rows, qrel_rows, lengths, fp) -> list[Task]:
    tasks = []
    all_lengths = sorted({int(r["context_length"]) for r in corpus_rows})
    for L in all_lengths:
        if lengths and L not in lengths:
            continue
        docs = [Doc(str(r["doc_id"]), r["text"]) for r in corpus_rows if int(r["context_length"]) == L]
        queries = {str(r["qid"]): r["text"] for r in query_rows if int(r["context_length"]) == L}
        qrels: dict[str, dict[str, int]] = {}
        for r in qrel_rows:
            if int(r["context_length"]) == L:
                qrels.setdefault(str(r["qid"]), {})[str(r["doc_id"])] = 1
        tasks.append(Task(f"{name}@{L}", lambda d=docs: d, queries, qrels, group=name, length=L,
                          fingerprint=f"{fp}-{L}"))
    return tasks


def longembed(tasks=LONGEMBED_TASKS, data: Path | None = None, lengths=None, haystack: Path | None = None,
              seed: int = 0, docs: int | None = None) -> list[Task]:
    out: list[Task] = []
    for name in tasks:
        if name not in LONGEMBED_TASKS:
            raise DataError(f"unknown LongEmbed task {name!r}; tasks: {', '.join(LONGEMBED_TASKS)}")
        if data is None and name in SYNTHETIC:
            out.extend(_synthetic(name, lengths, haystack, seed, docs))
            continue
        if data is not None:
            rows = {s: _local_rows(data, name, s, f"LongEmbed {name}", "longembed") for s in ("corpus", "queries", "qrels")}
            fp = fingerprint(Path(data) / name, extra=name)
        else:
            rows = {s: list(_hub_rows(HUB_IDS["longembed"], name, s, "longembed")) for s in ("corpus", "queries", "qrels")}
            fp = f"hub-{name}"
        if name in SYNTHETIC:
            out.extend(_by_length(name, rows["corpus"], rows["queries"], rows["qrels"], lengths, fp))
            continue
        docs = [Doc(str(r["doc_id"]), r["text"]) for r in rows["corpus"]]
        queries = {str(r["qid"]): r["text"] for r in rows["queries"]}
        qrels: dict[str, dict[str, int]] = {}
        for r in rows["qrels"]:
            qrels.setdefault(str(r["qid"]), {})[str(r["doc_id"])] = 1
        out.append(Task(name, lambda d=docs: d, queries, qrels, fingerprint=fp))
    return out


def _synthetic(name: str, lengths, haystack: Path | None, seed: int, docs: int | None = None) -> list[Task]:
    """`docs`: documents per length (default LongEmbed's 100, with 50 queries); fewer makes a
    quicker and easier task, not comparable with published figures (the report says partial)."""
    lengths = tuple(lengths) if lengths else synthetic.LENGTHS
    size = {} if docs is None else {"n_docs": docs, "n_queries": min(50, docs)}
    suffix = "" if docs is None else f"-{docs}docs"
    if name == "passkey":
        task = synthetic.passkey(lengths=lengths, seed=seed, **size)
        fp = f"synthetic-passkey-{seed}{suffix}"
    else:
        if haystack is None:
            raise DataError("the synthetic needle task needs a haystack folder of .txt files: --haystack DIR "
                            "(e.g. ../shared/data/paul-graham-essays)")
        task = synthetic.needle(haystack, lengths=lengths, seed=seed, **size)
        fp = f"synthetic-needle-{seed}{suffix}-{fingerprint(Path(haystack))}"
    return _by_length(name, task.corpus, task.queries, task.qrels, None, fp)


def loco(tasks=LOCO_TASKS, data: Path | None = None) -> list[Task]:
    unknown = set(tasks) - set(LOCO_TASKS)
    if unknown:
        raise DataError(f"unknown LoCoV1 tasks {sorted(unknown)}; tasks: {', '.join(LOCO_TASKS)}")
    if data is not None:
        q_rows = _local_rows(data, "LoCoV1-Queries", "test", "LoCoV1 queries", "loco")
        d_rows = _local_rows(data, "LoCoV1-Documents", "test", "LoCoV1 documents", "loco")
        fp = fingerprint(Path(data), extra="loco")
    else:
        q_rows = list(_hub_rows(HUB_IDS["loco"][0], None, "test", "loco"))
        d_rows = list(_hub_rows(HUB_IDS["loco"][1], None, "test", "loco"))
        fp = "hub-loco"
    out = []
    for name in tasks:
        docs = [Doc(str(r["pid"]), r["passage"]) for r in d_rows if r["dataset"] == name]
        queries, qrels = {}, {}
        for r in q_rows:
            if r["dataset"] == name:
                queries[str(r["qid"])] = r["query"]
                qrels[str(r["qid"])] = {str(p): 1 for p in r["answer_pids"]}
        if not docs:
            raise DataError(f"LoCoV1 task {name!r} has no documents in the data given")
        out.append(Task(name, lambda d=docs: d, queries, qrels, fingerprint=f"{fp}-{name}"))
    return out


def mldr(langs=MLDR_LANGS, data: Path | None = None, split: str = "test") -> list[Task]:
    out = []
    for lang in langs:
        if lang not in MLDR_LANGS:
            raise DataError(f"unknown MLDR language {lang!r}; languages: {', '.join(MLDR_LANGS)}")
        if data is not None:
            try:
                q_rows = list(rows_of(data, lang, split, f"MLDR {lang} queries"))
            except DataError as e:
                raise DataError(f"{e}; download MLDR as it is published: hf download --repo-type dataset "
                                f"{HUB_IDS['mldr']} --local-dir DIR (mldr-v1.0-{lang}/{split}.jsonl.gz is read as is)") from None
            c_rows = lambda lang=lang: (Doc(str(r["docid"]), r["text"]) for r in _mldr_corpus_rows(data, lang))
            fp = fingerprint(Path(data), extra=f"mldr-{lang}")
        else:
            q_rows = list(_hub_rows(HUB_IDS["mldr"], lang, split, "mldr"))
            c_rows = lambda lang=lang: (Doc(str(r["docid"]), r["text"]) for r in _hub_rows(HUB_IDS["mldr"], f"corpus-{lang}", "corpus", "mldr"))
            fp = f"hub-mldr-{lang}"
        queries = {str(r["query_id"]): r["query"] for r in q_rows}
        qrels = {str(r["query_id"]): {str(p["docid"]): 1 for p in r["positive_passages"]} for r in q_rows}
        out.append(Task(lang, c_rows, queries, qrels, fingerprint=fp, meta={"language": lang}))
    return out


def _mldr_corpus_rows(data: Path, lang: str):
    """The corpus is config `corpus-{lang}` (split `corpus`); raw repos keep it beside the queries."""
    if find_files(data, f"corpus-{lang}", "corpus"):
        return rows_of(data, f"corpus-{lang}", "corpus", f"MLDR corpus-{lang}")
    return rows_of(data, lang, "corpus", f"MLDR corpus-{lang}")


def beir(folder: Path, split: str = "test") -> list[Task]:
    from ..corpus import iter_corpus

    folder = Path(folder)
    corpus = folder / "corpus.jsonl"
    if not corpus.is_file():
        raise DataError(f"{corpus} not found: a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/{split}.tsv")
    queries, qrels = load_queries(folder), load_qrels(folder, split)
    queries = {q: t for q, t in queries.items() if q in qrels}
    return [Task(folder.name, lambda: iter_corpus(corpus), queries, qrels, fingerprint=fingerprint(folder, extra=split))]


def load(bench: str, tasks=None, data=None, lengths=None, haystack=None, split="test", seed=0,
         synthetic_docs: int | None = None) -> list[Task]:
    data = Path(data) if data else None
    if bench == "longembed":
        return longembed(tasks or LONGEMBED_TASKS, data, lengths, haystack, seed, synthetic_docs)
    if bench == "loco":
        return loco(tasks or LOCO_TASKS, data)
    if bench == "mldr":
        return mldr(tasks or MLDR_LANGS, data, split)
    if bench == "beir":
        if data is None:
            raise DataError("--bench beir needs --data FOLDER (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
        return beir(data, split)
    raise DataError(f"unknown benchmark {bench!r}; choose longembed, loco, mldr or beir")


# models whose training data includes MLDR's train split (their model cards say so): scoring them
# on MLDR is not a held-out evaluation, and published MLDR numbers of such models are not either
MLDR_TRAINED = ("baai/bge-m3", "bge-m3", "jinaai/jina-colbert-v2", "lightonai/mlateon")


def mldr_leakage(models) -> list[str]:
    """The models among `models` (names or folders) trained on MLDR's train split: a known name, or
    an `ldr train` output whose card (ldr-train.json) names MLDR data."""
    out = []
    for m in models:
        if not m or m == "none":
            continue
        low = str(m).lower()
        card = Path(m) / "ldr-train.json"
        trained = any(low == k or low.endswith("/" + k.split("/")[-1]) for k in MLDR_TRAINED)
        if not trained and card.is_file():
            try:
                trained = "mldr" in json.dumps(json.loads(card.read_text()).get("data", "")).lower()
            except (OSError, ValueError):
                pass
        if trained:
            out.append(str(m))
    return out
