"""`ldr serve`, `ldr info`, `ldr check`: run and inspect an index."""
from __future__ import annotations

import json  # noqa: F401
import sys  # noqa: F401

import click
from pathlib import Path

from ..serve.limits import ServerSettings as _Limits
from .app import main

_LIMITS = _Limits()     # the server's limits, written once (ldr/serve/limits.py)


@main.command("serve")
@click.option("-i", "--index", "index_path", required=True, type=click.Path(), help="Index directory.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="0: a free port the system picks (the line that says where it serves names it).")
@click.option("--api-key", default=None, envvar="LDR_API_KEY", show_envvar=True,
              help="Key the write endpoints require (X-API-Key or Authorization: Bearer).")
@click.option("--read-only", is_flag=True, help="Turn the write endpoints off.")
@click.option("--max-body-mb", type=float, default=_LIMITS.max_body_bytes / (1 << 20), show_default=True,
              help="Largest request body of POST /documents (any other request: 1 MB at most).")
@click.option("--max-query-chars", type=int, default=_LIMITS.max_query_chars, show_default=True)
@click.option("--max-pending-mb", type=float, default=_LIMITS.max_pending_bytes / (1 << 20), show_default=True,
              help="What all unfinished request bodies may hold together (past it: 503).")
@click.option("--body-stall-seconds", type=float, default=_LIMITS.body_stall_seconds, show_default=True,
              help="A request body that sends nothing for this long is dropped (408).")
@click.option("--device", default=None, help="cpu, cuda (default: cuda when available).")
@click.option("--trust-remote-code", is_flag=True,
              help="Allow the index's models to run code they ship (an index cannot grant this itself).")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="A sharded index: search its shards on a Ray Serve application (ADDRESS as ray.init takes it; "
                   "without one, a local cluster). The index must be on storage every node mounts. Needs ldr[ray].")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --ray: replicas of each shard.")
@click.option("--replica-root", default=None, type=click.Path(),
              help="With --ray: a folder on each node's own disk where its replicas keep their own copy of "
                   "their shard, catching up with each commit by copying only new files (checksums verified).")
@click.option("--allowed-host", "allowed_hosts", multiple=True,
              help="Another host name requests may name (a proxy's, the machine's DNS name); repeatable. "
                   "Requests naming any other host are refused (DNS rebinding).")
def serve_cmd(index_path, host, port, api_key, read_only, max_body_mb, max_query_chars, max_pending_mb,
              body_stall_seconds, device, trust_remote_code,
              ray_address, replicas, replica_root, allowed_hosts):
    """Serve an index over HTTP: POST /search, GET|POST|DELETE /documents, /info, /health, /metrics, /docs."""
    from ..errors import BackendUnavailable

    try:
        from ..serve.app import ServerSettings, serve
    except ImportError as e:
        raise BackendUnavailable(f"`ldr serve` needs the server extra: pip install 'ldr[server]' ({e.name} is missing)") from None
    from .. import sharded

    if replica_root and not ray_address:
        from ..errors import ConfigError
        raise ConfigError("--replica-root keeps the Ray replicas' own copies of their shards: give it with --ray")
    from ..index.cluster import is_cluster
    from ..index.remote import is_uri
    from ..index.view import holds_index

    # held from the start: a Ray deployment takes seconds, in which its processes could take the port
    sock = _listen(host, port)
    port = sock.getsockname()[1]
    if is_uri(index_path) and not (ray_address and replica_root):
        from ..errors import ConfigError
        raise ConfigError(f"{index_path} is a URI: serve it with --ray and --replica-root (each node's replicas copy "
                          "their shards from there), or copy it here first with `ldr replicate`")
    # a URI is read by the replicas only; with --ray the index need not be here either
    if not is_uri(index_path) and (not ray_address or is_cluster(Path(index_path)) or holds_index(Path(index_path))):
        opened = sharded.open(index_path)   # a clear error before the server starts, not in its log
        opened.close()
        if ray_address and not hasattr(opened, "shards"):
            from ..errors import ConfigError
            raise ConfigError(f"--ray serves a sharded index; {index_path} is not one (build one with `ldr index "
                              "CORPUS -o IDX --shards N`)")
    # with --ray the index need not be here: the replicas read it where they run
    opener = _ray_opener(index_path, ray_address, replicas, device, replica_root) if ray_address else None
    if not (api_key or read_only or host in LOCAL_HOSTS):
        # open to the network: writes need a key; as Elasticsearch does on first start, make one
        import secrets

        api_key = secrets.token_urlsafe(24)
        click.echo(f"{host} is reachable from other machines and no --api-key was given: writes need this key "
                   f"(X-API-Key or Authorization: Bearer):\n  {api_key}", err=True)
    settings = ServerSettings(api_key=api_key or None, read_only=read_only, max_body_bytes=int(max_body_mb * (1 << 20)),
                              max_query_chars=max_query_chars, host=host, allowed_hosts=tuple(allowed_hosts),
                              max_pending_bytes=int(max_pending_mb * (1 << 20)), body_stall_seconds=body_stall_seconds)
    click.echo(f"serving {index_path} on http://{host}:{port} ({'API docs: /docs, ' if _api_docs() else ''}a search page: /)"
               + ("; read-only" if read_only else "; writes need the API key" if settings.api_key else ""), err=True)
    serve(index_path, host, port, settings, device=device, trust_remote_code=trust_remote_code, opener=opener, sock=sock)


def _ray_opener(index_path, address, replicas, device, local=None):
    """Deploy the shards on Ray Serve; the coordinator searches over their handles."""
    from ..errors import BackendUnavailable

    try:
        from ..serve.ray_shards import deploy, open_on_ray
    except ImportError as e:
        raise BackendUnavailable(f"--ray needs the Ray extra: pip install 'ldr[ray]' ({e.name} is missing)") from None
    handles = deploy(index_path, None if address == "local" else address, replicas, device, local=local)
    click.echo(f"{len(handles)} shards deployed on Ray Serve, {replicas} replica(s) each", err=True)
    return lambda: open_on_ray(index_path, handles, device=device)


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def _listen(host: str, port: int):
    """The server's socket, bound and listening before anything slow starts: a busy port is one clear
    line naming --port, and no other process takes the port while the models load (connections wait
    in the backlog until the server answers)."""
    import socket

    from ..errors import ConfigError

    import errno

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)     # not inherited: a child must not hold the port
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as uvicorn: a restart need not wait out TIME_WAIT
    try:
        s.bind((host, port))
        s.listen(2048)                                              # uvicorn's backlog
    except OSError as e:
        s.close()
        hint = ("another program uses that port? choose another with --port (0: any free one)"
                if e.errno == errno.EADDRINUSE else
                "ports below 1024 need privileges: choose another with --port" if e.errno == errno.EACCES else
                "is --host an address of this machine?")
        raise ConfigError(f"cannot serve on {host}:{port} ({e.strerror or e}): {hint}") from None
    return s


@main.command("info")
@click.argument("index_path", type=click.Path())
@click.option("--json", "as_json", is_flag=True)
@click.option("--fields", is_flag=True,
              help="The documents' metadata fields instead: each with its documents, types and most common values "
                   "(what --filter takes).")
def info_cmd(index_path, as_json, fields):
    """Show what an index holds (components, models, counts, sizes)."""
    from .. import sharded

    index = sharded.open(index_path)
    if fields:
        return _echo_fields(index.facets(), as_json)
    info = index.info()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"index       {info['path']}")
    click.echo(f"documents   {info['documents']}")
    deleted = sum(s["deleted"] for s in info["segments"])
    click.echo(f"generation  {info['generation']}, {len(info['segments'])} segments"
               + (f" ({deleted} deleted rows until the next merge)" if deleted else ""))
    if "shards" in info:
        click.echo(f"shards      {len(info['shards'])}: " + ", ".join(
            f"{s['path']} (generation {s['generation']}, {s['documents']} documents"
            + (", ahead of the cluster after a failed write" if s["ahead"] else "") + ")" for s in info["shards"]))
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
    lang = info.get("search_profile")
    if lang:
        fig = lang.get("held_out") or {}
        nearest = f" (this index: {lang['language']}; the nearest measured)" if lang["language"] != lang["family"] else ""
        there = ""
        if "chosen_on_all" in fig:
            held = ("choosing anew did not beat it held out" if fig["chosen_on_all"] == fig.get("today")
                    else f"{fig['ndcg10']:.1f} held out")
            there = f" (nDCG@10 {fig['chosen_on_all']:.1f} there; {held})"
        click.echo(f"{'':<11} defaults for language {lang['family']}{nearest}, chosen on {lang['chosen_on']}{there}; "
                   "the index's own settings override them")
    rel = info.get("relevance")
    if rel:
        ex = rel.get("exact")
        floor = f"; an exact match of a {ex['min_words']}+ word query at least {ex['p']:g}" if ex else ""
        if rel.get("query_fit"):
            small = rel["smaller_indexes"]
            below = (f"; below {rel['min_docs']} documents from {', '.join(small['reads'])}, fitted on {small['fitted_on']}"
                     if small else f"; none below {rel['min_docs']} documents")
            click.echo(f"relevance   calibrated P(relevant) from {', '.join(rel['reads'])} (the query's scores over the "
                       f"index), fitted on {', '.join(rel['fitted_on'])}, each also held out"
                       + "".join(f", checked on {', '.join(never)} (never fitted on)" for never in
                                 [[d for d in rel["held_out"] if d not in rel["fitted_on"]]] if never)
                       + " (bench/README.md)"
                       f"{below}{floor}; `--min-score` cuts on it")
        else:
            click.echo(f"relevance   calibrated P(relevant) from {', '.join(rel['reads'])}, fitted on {rel['fitted_on']} "
                       f"(held out elsewhere: bench/README.md){floor}; `--min-score` cuts on it")
    else:
        click.echo("relevance   none fitted for these models (hits carry no relevance; --min-score is refused)")
    small = (rel or {}).get("small_index")
    if small and not (rel or {}).get("own_fit"):
        from ..search.calibration import small_index_note

        click.echo(f"{'':<11} WARNING: {small_index_note(small['documents'])}")
    own = (rel or {}).get("own_fit")
    if own:
        cut = own["min_score"]
        keeps = (f"; min_score {cut['threshold']:.2f} keeps precision {own['precision']:g} at {cut['confidence']:.0%} "
                 "confidence there" if cut else "; no min_score reached the asked precision there")
        click.echo(f"{'':<11} recalibrated by `ldr tune --relevance` on {own['queries']} judged queries of "
                   f"{own['data']} at {own['at']} (a {'+'.join(own['kinds'])} search's {own['estimate']} estimate): "
                   f"ECE {own['ece']['shipped']:.3f} shipped, {own['ece']['cross_validated']:.3f} cross-validated{keeps}")
    t = info["search_recorded"].get("tuned")
    if t:
        click.echo(f"{'':<11} tuned by `ldr tune` on {t['data']} ({t['split']}, {t['queries']} queries) at "
                   f"{t['at']}: held-out {t['metric']} {t['held_out']['tuned']:.1f} vs {t['held_out']['default']:.1f} "
                   "with the previous defaults")
    else:
        from ..search.options import index_defaults
        comps = info["components"]
        built_in = index_defaults(info["search_recorded"], comps, lang)[0] == index_defaults({}, comps, lang)[0]
        where = ("its language's defaults" if lang else "ldr's built-in defaults") if built_in else "set through the API (Index.set_search_defaults)"
        click.echo(f"{'':<11} ({where}; `ldr tune` chooses them on your own qrels)")
    from .. import components as registry

    for name, comp in info["components"].items():
        for i, line in enumerate(registry.get(name).summary(comp)):
            click.echo(f"{name if i == 0 else '':<11} {line}")


@main.command("check")
@click.argument("index_path", type=click.Path())
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def check_cmd(index_path, quiet):
    """Verify an index in full: every file's SHA-256, array shapes and ranges, counts. Exit 1 on any problem."""
    from tqdm.auto import tqdm

    from ..index.check import check_index

    # a bar only on a terminal: elsewhere its last frame ("checking: 0file") would stay in the log
    with tqdm(desc="checking", unit=" files", disable=quiet or not sys.stderr.isatty(), leave=False) as bar:
        manifest, problems = check_index(index_path, progress=lambda _: bar.update(1))
    if problems:
        click.echo(f"{index_path}: {len(problems)} problem(s)", err=True)
        for p in problems:
            click.echo(f"  - {p}", err=True)
        click.echo("rebuild the index with `ldr index` (or restore it from a backup)", err=True)
        sys.exit(1)
    n_files = len(manifest["files"])
    for note in manifest.get("notes", []):
        click.echo(f"note: {note}", err=True)
    shards = f" in {manifest['shards']} shards" if "shards" in manifest else ""
    click.echo(f"{index_path}: OK ({manifest['doc_count']} documents{shards}, {n_files} files verified, "
               f"components: {', '.join(manifest['components'])})")




@main.command("replicate")
@click.argument("source", type=click.Path())
@click.argument("target", type=click.Path())
@click.option("--generation", type=int, default=None, help="The commit to copy (default: the newest).")
def replicate_cmd(source, target, generation):
    """Bring TARGET, a copy of the index SOURCE (sharded or not) on another disk, to SOURCE's newest
    commit: only the files it lacks are copied, each verified against its manifest's SHA-256 before
    the manifest naming it is written; generations no reader of TARGET holds are then removed.
    Either may be a URI (s3://, gs://, file://, ...): a folder SOURCE is then published to it, or
    TARGET catches up from it."""
    from ..index.replica import catch_up

    r = catch_up(source, target, generation)
    click.echo(f"{target}: generation {r['generation']}, {r['copied']} file(s) copied ({r['bytes']:,} bytes), "
               f"{r['kept']} already there" + (f", {r['shards']} shards" if r["shards"] else ""))


def _api_docs() -> bool:
    """Whether /docs is served (its assets come from the fastapi-offline package)."""
    import importlib.util
    return importlib.util.find_spec("fastapi_offline") is not None


def _echo_fields(facets: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(facets, indent=2))
        return
    click.echo(f"{facets['documents']} documents, generation {facets['generation']}")
    if not facets["fields"]:
        click.echo("no metadata fields (filters can still use id, title, ldr.path, ldr.type and ldr.folder)")
    for f in facets["fields"]:
        rng = f" {f['min']}..{f['max']}" if f["min"] is not None else ""
        values = ", ".join(f"{v} ({n})" for v, n in f["values"])
        more = f", ... {f['distinct']}{'+' if f['truncated'] else ''} values" if f["distinct"] > len(f["values"]) else ""
        click.echo(f"{f['name']:<16} {f['documents']} docs, {'/'.join(f['types'])}{rng}: {values}{more}")
