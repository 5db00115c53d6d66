"""Facet counts of an index's metadata, for the search page's field list (Kibana's field sidebar):
per field, how many live documents have it, the types of its values, its most common values and
a number field's range. Each shard counts its own documents (`count`); the coordinator adds the
shards' counts (`merge`). Counts are exact while a field has at most DISTINCT values in a shard;
past that, new values are not counted and the field says `truncated`."""
from __future__ import annotations

from collections import Counter

DISTINCT = 1000      # values counted per field and shard
LONGEST = 200        # characters: a longer string (a description) is no facet value


def _type(v) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    return "object" if isinstance(v, dict) else "null"


FILE_FIELDS = ("ldr.type", "ldr.folder")     # of a document read from a file: facets and filters


def file_fields(path: str | None) -> dict:
    """{"ldr.type": ".pdf", "ldr.folder": "contracts/2024"} of a document read from `path` (its
    path in the corpus folder), {} for one that came from no file (the API, a JSONL record keeps
    its file's)."""
    if not path:
        return {}
    folder, _, name = path.rpartition("/")
    dot = name.rfind(".")
    return {"ldr.type": name[dot:].lower() if dot > 0 else "(none)", "ldr.folder": folder or "."}


def file_counts(docs, live) -> list[tuple[dict, int]]:
    """(file fields, live documents holding them) over `docs` (text-less Docs per docno)."""
    counts: Counter = Counter()
    for d, alive in zip(docs, live):
        if alive and d.path:
            f = file_fields(d.path)
            counts[(f["ldr.type"], f["ldr.folder"])] += 1
    return [({"ldr.type": t, "ldr.folder": f}, n) for (t, f), n in counts.items()]


def count(metas, documents: int) -> dict:
    """{"documents": live documents, "fields": {name: counts}} over `metas`, (metadata, number of
    live documents holding it) pairs; a list's scalar items are counted as values, as filters
    match them."""
    fields: dict = {}
    for meta, n in metas:
        for name, v in meta.items():
            f = fields.get(name)
            if f is None:
                f = fields[name] = {"documents": 0, "types": Counter(), "values": Counter(), "min": None,
                                    "max": None, "truncated": False}
            f["documents"] += n
            f["types"][_type(v)] += n
            for x in (v if isinstance(v, list) else [v]):
                t = _type(x)
                if t in ("list", "object", "null") or (t == "string" and len(x) > LONGEST):
                    continue
                if t == "number":
                    f["min"] = x if f["min"] is None else min(f["min"], x)
                    f["max"] = x if f["max"] is None else max(f["max"], x)
                k = (t, x)          # typed: 1 and True are different values (JSON tells them apart)
                if k in f["values"] or len(f["values"]) < DISTINCT:
                    f["values"][k] += n
                else:
                    f["truncated"] = True
    for f in fields.values():
        f["types"] = dict(f["types"])
        f["values"] = [[t, x, n] for (t, x), n in f["values"].items()]
    return {"documents": documents, "fields": fields}


def merge(parts: list, top: int = 10) -> dict:
    """The shards' counts added: {"documents", "fields": [{name, documents, types, distinct,
    values: [[value, count], ...] (the `top` most common), min, max, truncated}, ...]}, the
    fields most documents have first. A shard that did not answer (None) adds nothing."""
    total, fields = 0, {}
    for part in parts:
        if part is None:
            continue
        total += part["documents"]
        for name, f in part["fields"].items():
            g = fields.setdefault(name, {"documents": 0, "types": Counter(), "values": Counter(), "min": None,
                                         "max": None, "truncated": False})
            g["documents"] += f["documents"]
            g["types"].update(f["types"])
            for t, x, n in f["values"]:
                g["values"][(t, x)] += n
            for k, pick in (("min", min), ("max", max)):
                if f[k] is not None:
                    g[k] = f[k] if g[k] is None else pick(g[k], f[k])
            g["truncated"] |= f["truncated"]
    out = []
    for name, g in sorted(fields.items(), key=lambda kv: (-kv[1]["documents"], kv[0])):
        common = sorted(g["values"].items(), key=lambda kv: (-kv[1], str(kv[0][1])))[:top]
        out.append({"name": name, "documents": g["documents"], "types": dict(g["types"]),
                    "distinct": len(g["values"]), "values": [[x, n] for (_, x), n in common],
                    "min": g["min"], "max": g["max"], "truncated": g["truncated"]})
    return {"documents": total, "fields": out}
