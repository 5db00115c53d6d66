"""`ldr search`: one query (table or JSON) or a file of queries (a TREC run)."""
from __future__ import annotations

import json  # noqa: F401
import logging
import sys  # noqa: F401
import time

import click

from .. import components as registry
from .app import main


# the CLI's own words for a few options (the rest: the schema's help)
_CLI_HELP = {"k": "Number of hits (per query).",
             "passages": "Best passages per hit (character offsets into the text); the table shows the best as "
                         "snippet (--json lists them with offsets and the matched terms' highlights).",
             "with_text": "With --json: include each hit's full text.",
             "filters": "Only documents whose metadata matches (repeatable): lang=de, 'path=contracts/*', year>=2020."}
# --rerank: the passage rescorer, none, or a kind's exact scores over the candidates (colbert: MaxSim)
_CLI_TYPES = {"fusion": click.Choice(["rrf", "minmax", "zscore"]),
              "rerank": click.Choice(["passage", "none", *(n for n in registry.names() if registry.get(n).passage_features)])}


def query_options(f):
    """One click option per field of the search options schema (ldr.search.options.QueryOptions)
    that has a flag; values reach `cli_query_options` under the field's name."""
    from dataclasses import fields

    from ..search.options import QueryOptions, help_with_default

    for fd in reversed(fields(QueryOptions)):
        flags = fd.metadata.get("cli")
        if isinstance(flags, str):    # why `ldr search` has no flag for it
            continue
        kw = {"help": _CLI_HELP.get(fd.name, help_with_default(fd.name)), "default": None}
        if fd.type == "bool":
            kw.update(is_flag=True, default=False)
        elif fd.name == "filters":
            kw.update(multiple=True, metavar="FIELD=VALUE", default=())
        elif fd.name == "stages":
            kw.update(multiple=True, metavar="NAME[:SETTING=VALUE,...]", default=())
        elif fd.name in _CLI_TYPES:
            kw["type"] = _CLI_TYPES[fd.name]
        elif fd.type.startswith("int"):
            kw["type"] = int
        elif fd.type.startswith("float"):
            kw["type"] = float
        if fd.name == "k":
            kw.update(default=10, show_default=True)
        f = click.option(*flags, fd.name, **kw)(f)
    return f


def cli_query_options(values: dict, no_rerank: bool = False) -> dict:
    """The schema's fields from the CLI's values: weights and filters parsed, `--rerank none` and
    `--no-rerank` as rerank=False, unset options left out (the index's defaults)."""
    from ..errors import ConfigError
    from ..search import filters as _filters
    from ..search.fusion import parse_weights

    out = {k: v for k, v in values.items() if v is not None and v != ()}
    if "weights" in out:
        try:
            out["weights"] = parse_weights(out["weights"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if "filters" in out:
        out["filters"] = _filters.parse(out["filters"])
    if "stages" in out:
        out["stages"] = parse_stages(out["stages"])
    if no_rerank or out.get("rerank") == "none":
        out["rerank"] = False
    return out


def parse_stages(values) -> dict:
    """`--stage boost:field=year,weight=0.1` (repeatable) → {"boost": {"field": "year", "weight": "0.1"}}
    (each stage's settings dataclass converts and checks its values)."""
    from ..errors import ConfigError

    out = {}
    for v in values:
        name, _, rest = v.partition(":")
        settings = {}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, val = part.partition("=")
            if not eq:
                raise ConfigError(f"--stage {v!r}: write NAME:SETTING=VALUE,... (e.g. boost:field=year)")
            settings[key.strip()] = val.strip()
        out[name.strip()] = settings
    return out


@main.command("search")
@click.argument("query", required=False)
@click.option("-i", "--index", "index_path", required=True, type=click.Path(), help="Index directory.")
@query_options
@click.option("--no-rerank", is_flag=True, help="Skip the second stage (same as --rerank none).")
@click.option("--queries", "queries_file", type=click.Path(), default=None,
              help="Batch search: a TSV file (qid<TAB>text) or BEIR queries.jsonl; writes a TREC run.")
@click.option("-o", "--output", type=click.Path(), default=None, help="With --queries: the TREC run file (default stdout).")
@click.option("--run-tag", default="ldr", show_default=True, help="With --queries: the run's tag column.")
@click.option("--device", default=None, help="cpu, cuda (default: cuda when available).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--explain", is_flag=True, help="Print the query's plan (its stages, their settings and where each "
                                                "came from) instead of searching.")
@click.option("--trust-remote-code", is_flag=True,
              help="Allow the index's models to run code they ship (an index cannot grant this itself).")
def search_cmd(query, index_path, no_rerank, queries_file, output, run_tag, device, as_json, explain,
               trust_remote_code, **values):
    """Search an index for QUERY: retrievers → fusion → rerank, as the index defines (see `ldr info`).
    With --queries FILE, search every query of the file and write a TREC run."""
    from .. import sharded
    from ..corpus.text import replace_surrogates
    from ..errors import ConfigError
    from ..search.hits import finite
    from ..search.options import QueryOptions

    if (query is None) == (queries_file is None):
        raise ConfigError("give either a QUERY or --queries FILE")
    index = sharded.open(index_path, device=device, trust_remote_code=trust_remote_code)
    options = cli_query_options(values, no_rerank)
    k, with_text, mode = options.pop("k"), options.pop("with_text", False), options.get("mode")
    passages = options.pop("passages", None)
    if queries_file is not None:
        _batch_search(index, queries_file, output, k, run_tag, options)
        return
    query = replace_surrogates(query)   # undecodable argv bytes arrive as lone surrogates
    n_passages = passages if passages is not None else QueryOptions().passages   # the schema's default
    if explain:
        plan = index.plan(query, k=k, passages=n_passages, **options)
        click.echo(json.dumps(plan.to_dict(), ensure_ascii=False) if as_json else plan.explain())
        return
    t0 = time.perf_counter()
    hits = index.search(query, k=k, passages=n_passages, with_text=as_json and with_text,
                        with_meta=as_json, **options)   # texts are read only when shown
    took_ms = round(1e3 * (time.perf_counter() - t0), 2)
    stages = list(hits[0].scores) if hits else []
    if as_json:
        click.echo(json.dumps(finite({"query": query, "mode": mode or index.default_mode(), "stages": stages,
                               "reranker": hits.reranker, "generation": hits.generation, "took_ms": took_ms,
                               "timings_ms": hits.timings_ms,
                               "hits": [h.to_dict(with_text=with_text) for h in hits]}), ensure_ascii=False))
        return
    if not hits:
        click.echo("no hits")
    else:
        _print_hits(hits, stages)
    # how long it took, as Elasticsearch and Meilisearch say it (stderr: the table stays clean); -v: per stage
    per_stage = ", ".join(f"{n} {t:.1f}" for n, t in hits.timings_ms.items())
    verbose = logging.getLogger("ldr").getEffectiveLevel() <= logging.INFO
    click.echo(f"took {took_ms:.0f} ms" + (f" ({per_stage} ms)" if verbose and per_stage else ""), err=True)


def _columns() -> int:
    """The width to fit: COLUMNS, else the terminal's; piped output without COLUMNS is not cut."""
    import os
    import shutil

    if os.environ.get("COLUMNS", "").isdigit():
        return max(60, int(os.environ["COLUMNS"]))
    return max(60, shutil.get_terminal_size().columns) if sys.stdout.isatty() else 10_000


def _print_hits(hits, stages) -> None:
    """The table, as wide as the terminal (COLUMNS): long ids and titles are cut, and stage
    columns that do not fit are left out (--json has them all)."""
    from ..search.snippets import snippet

    columns = _columns()
    width = min(max(len(h.id) for h in hits), max(12, columns // 3))
    shown = [s for s in stages if "." not in s]
    while shown and 4 + 2 + width + 2 + 9 + 2 + 11 * len(shown) + 12 > columns:
        shown.pop()                    # the stage columns that do not fit (the final score stays)
    room = max(10, columns - (4 + 2 + width + 2 + 9 + 2 + 11 * len(shown)))

    def cut(text: str, n: int) -> str:
        return text if len(text) <= n else text[:n - 1] + "…"

    click.echo(f"{'rank':>4}  {'id':<{width}}  {'score':>9}  " + "".join(f"{s[:9]:>9}  " for s in shown) + "title")
    finder = hits.finder
    qterms = finder.query_terms(hits.query) if finder is not None else set()
    for h in hits:
        cols = "".join(f"{h.scores[s]:>9.4f}  " if s in h.scores else f"{'-':>9}  " for s in shown)
        click.echo(f"{h.rank:>4}  {cut(h.id, width):<{width}}  {h.score:>9.4f}  {cols}{cut(h.title or '', room)}")
        if h.passages:
            p = h.passages[0]
            pages = f"p. {p.page}" + (f"-{p.page_end}" if p.page_end and p.page_end != p.page else "") if p.page else ""
            where = f"[{p.start}:{p.end}{', ' + pages if pages else ''}] "
            # query terms in bold (click drops the styling when output is not a terminal)
            text = snippet(p.text, finder.marks(p.text, qterms), max(40, min(160, columns - 8 - len(where))),
                           lambda t: click.style(t, bold=True))
            click.echo(f"{'':>6}{where}{text}")


def _read_queries(path: str) -> list[tuple[str, str]]:
    """qid/text pairs from a TSV (qid<TAB>text) or a BEIR queries.jsonl file."""
    from pathlib import Path

    from ..errors import ConfigError

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

    from ..eval.runs import needs_escape, run_line

    queries = _read_queries(queries_file)
    tag = "".join(run_tag.split()) or "ldr"
    out = Path(output) if output else None
    tmp = out.with_name(f".{out.name}.part-{os.getpid()}") if out else None
    fh = open(tmp, "w", encoding="utf-8") if tmp else sys.stdout
    skipped, lines, escaped = [], 0, []
    try:
        with tqdm(total=len(queries), desc="searching", unit="q", disable=out is None, leave=False) as bar:
            # a run holds ids and scores: no passages, no relevance (unless --min-score cuts on it)
            for qid, res in index.search_many(queries, k=k, progress=bar.update, with_meta=False,
                                               **{"passages": 0, "relevance": False, **options}):
                if isinstance(res, Exception):
                    skipped.append(f"{qid} ({res})")
                    continue
                for h in res:      # ids with whitespace escaped (ldr/eval/runs.py): read back exactly
                    fh.write(run_line(qid, h.id, h.rank, h.score, tag))
                    lines += 1
                    for i in (qid, h.id):
                        if needs_escape(i) and len(escaped) < 3 and i not in escaped:
                            escaped.append(i)
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
    if escaped:
        click.echo(f"note: ids holding whitespace or '%' ({', '.join(map(repr, escaped))}) are written as %XX, since "
                   "TREC columns split on whitespace; `ldr eval` and `ldr compare` read them back exactly, other tools "
                   "need qrels escaped alike (ldr.eval.runs.write_qrels; `ldr eval` writes them beside its runs)",
                   err=True)
    if skipped:
        click.echo(f"{len(skipped)} queries skipped: " + "; ".join(skipped[:10]), err=True)


