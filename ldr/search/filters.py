"""Metadata filters: which documents a search may return.

A filter names a field of the metadata given at indexing (JSONL fields, Parquet columns), `id`,
`title`, or ldr's own `ldr.path` (the file a document came from), `ldr.source` (the file and
line), `ldr.type` (the file's extension: `.pdf`) and `ldr.folder` (its folder in the corpus); `path` is the document's own `path` field where it has one, else `ldr.path`. A condition:

    {"lang": "de"}                      equal (a value with * ? [ is a glob: {"path": "contracts/*"})
    {"lang": ["de", "fr"]}              any of
    {"year": {">=": 2020, "<": 2024}}   comparisons: = != < <= > >= (numbers compare as numbers)
    {"lang": {"!=": ["de", "fr"]}}      none of

Conditions on different fields must all hold. On the command line: `--filter lang=de
--filter 'path=contracts/*' --filter 'year>=2020'`; the same field given twice with `=` means any
of the values. A document without the field fails every condition but `!=`.

The filter becomes a mask over the generation's documents that every retriever applies before
fusion, so a filtered-out document never takes one of the k places.
"""
from __future__ import annotations

import fnmatch
import json
import re
import threading
from collections import OrderedDict

import numpy as np

from ..errors import QueryError

OPS = ("=", "!=", "<", "<=", ">", ">=")
MAX_CHARS = 1024        # a filter's field name or value (a glob is compiled: its size is its cost)
MAX_VALUES = 256        # values of one field's `=` list
BUILTIN = ("id", "title", "path", "ldr.path", "ldr.source", "ldr.type", "ldr.folder")
_EXPR = re.compile(r"^\s*([^=!<>\s][^=!<>]*?)\s*(!=|<=|>=|=|<|>)\s*(.*)$", re.S)
_GLOB = re.compile(r"[*?\[]")


def parse(exprs: list[str]) -> dict:
    """CLI filters ('lang=de', 'year>=2020') as the API's dict."""
    out: dict = {}
    for e in exprs:
        m = _EXPR.match(e)
        if not m:
            raise QueryError(f"bad filter {e!r}: write FIELD=VALUE (or !=, <, <=, >, >=), e.g. lang=de")
        key, op, value = m.group(1), m.group(2), m.group(3)
        cond = out.setdefault(key, {})
        if op == "=":
            cond.setdefault("=", []).append(value)
        elif op in cond:
            raise QueryError(f"filter {key}{op} given twice")
        else:
            cond[op] = value
    return out


def normalise(filters) -> dict[str, dict]:
    """Every filter as {field: {op: value or [values] for "="}}; QueryError on anything else."""
    if not filters:
        return {}
    if not isinstance(filters, dict):
        raise QueryError(f"filters must be an object of field: condition (got {type(filters).__name__})")
    out = {}
    for key, cond in filters.items():
        if not isinstance(key, str) or not key:
            raise QueryError(f"a filter field must be a non-empty string (got {key!r})")
        if isinstance(cond, dict):
            bad = set(cond) - set(OPS)
            if bad or not cond:
                raise QueryError(f"filter {key}: unknown operator(s) {sorted(bad) or '(none given)'}; use {', '.join(OPS)}")
            c = dict(cond)
        else:
            c = {"=": cond}
        if len(key) > MAX_CHARS:
            raise QueryError(f"a filter field has {len(key)} characters; at most {MAX_CHARS}")
        for op, v in c.items():
            vals = v if isinstance(v, list) else [v]
            if op not in ("=", "!=") and isinstance(v, list):
                raise QueryError(f"filter {key}{op} takes one value (got a list)")
            if not vals or any(not isinstance(x, (str, int, float, bool)) for x in vals):
                raise QueryError(f"filter {key}{op}: values must be strings, numbers or booleans (got {v!r})")
            if len(vals) > MAX_VALUES:
                raise QueryError(f"filter {key}{op} lists {len(vals)} values; at most {MAX_VALUES}")
            long = [x for x in vals if len(str(x)) > MAX_CHARS]
            if long:
                raise QueryError(f"filter {key}{op}: a value has {len(str(long[0]))} characters; at most {MAX_CHARS}")
        for op in ("=", "!="):          # `=`: one of the values; `!=`: none of them
            if op in c and not isinstance(c[op], list):
                c[op] = [c[op]]
        out[key] = c
    return out


def _text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _number(v):
    """A number to compare by, or None. Integers stay integers: Python compares an int with a
    float exactly, so a value beyond a float's range (10**400) still compares, never overflows."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        pass
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _compare(a, op: str, b) -> bool:
    x, y = _number(a), _number(b)
    if x is None or y is None:       # not both numbers: compare as text
        x, y = _text(a), _text(b)
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


def matches(value, cond: dict) -> bool:
    """Does one field value (None: the document lacks the field) satisfy a normalised condition?
    A list value matches when one of its elements does (`tags=urgent`), and `!=` when none is equal."""
    if isinstance(value, (list, tuple)):
        if not value:
            value = None
        else:
            neg = {op: w for op, w in cond.items() if op == "!="}
            pos = {op: w for op, w in cond.items() if op != "!="}
            return all(matches(v, neg) for v in value) and (not pos or any(matches(v, pos) for v in value))
    for op, want in cond.items():
        if op == "!=":
            if value is not None and any(_equal(value, w) for w in (want if isinstance(want, list) else [want])):
                return False
            continue
        if value is None:
            return False
        if op == "=":
            if not any(_equal(value, w) for w in want):
                return False
        elif not _compare(value, op, want):
            return False
    return True


def _equal(value, want) -> bool:
    if isinstance(want, str) and _GLOB.search(want):
        return _glob(want).match(_text(value)) is not None
    x, y = _number(value), _number(want)
    if x is not None and y is not None and not isinstance(value, str) and not isinstance(want, str):
        return x == y
    return _text(value) == _text(want)


# compiled globs, least recently used dropped first: the standard library's own cache keeps
# 32,768 patterns of any size, so distinct patterns from clients grew a server without bound
_GLOBS: OrderedDict = OrderedDict()
_GLOBS_MAX = 256
_GLOBS_LOCK = threading.Lock()


def _glob(pattern: str) -> re.Pattern:
    with _GLOBS_LOCK:
        got = _GLOBS.get(pattern)
        if got is not None:
            _GLOBS.move_to_end(pattern)
            return got
    compiled = re.compile(fnmatch.translate(pattern), re.S)
    with _GLOBS_LOCK:
        _GLOBS[pattern] = compiled
        while len(_GLOBS) > _GLOBS_MAX:
            _GLOBS.popitem(last=False)
    return compiled


def key(filters: dict) -> str:
    return json.dumps(filters, sort_keys=True, default=str)


def _values(segments, field: str) -> list:
    """A built-in field's value per docno (None where a document lacks it)."""
    if field == "id":
        return list(segments.ids)
    if field == "title":
        return list(segments.titles)
    docs = segments.all_meta()
    if field == "ldr.path":
        return [d.path for d in docs]
    if field == "ldr.source":
        return [d.source for d in docs]
    if field in ("ldr.type", "ldr.folder"):     # the file's extension and folder (search/facets.py)
        from .facets import file_fields
        return [file_fields(d.path).get(field) for d in docs]
    return [d.meta.get("path", d.path) for d in docs]      # "path": the user's own field wins


def check_fields(filters: dict, fields: set) -> None:
    """QueryError when a filter names a field no document has (`fields`: the metadata fields of
    every document a search covers: one index's, or all of a sharded index's shards')."""
    known = set(BUILTIN) | set(fields)
    unknown = sorted(set(filters) - known)
    if unknown:
        raise QueryError(f"no document has the field(s) {', '.join(unknown)}; fields: {', '.join(sorted(known))}")


def _check_bounds(field: str, cond: dict, values: list) -> None:
    """`year>=abc` on a field of numbers compares nothing (text against numbers: no document would
    pass, silently): a QueryError naming the bound instead."""
    bounds = [(op, b) for op, b in cond.items() if op in ("<", "<=", ">", ">=") and _number(b) is None]
    if bounds and any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        op, b = bounds[0]
        raise QueryError(f"filter {field}{op}{b}: {field} holds numbers; give a number to compare with")


def mask(filters: dict, segments, check: bool = True) -> np.ndarray:
    """Boolean mask over the generation's docnos: live and passing every filter. `check=False`:
    the caller checked the fields against a larger whole (a shard lacking a field the others have
    simply has no document that passes it)."""
    allow = segments.live.copy()
    if check:
        check_fields(filters, segments.meta_fields())
    for field, cond in filters.items():
        if field not in BUILTIN:        # a user's field: matched once per distinct metadata
            codes, metas = segments.meta_codes()
            values = [m.get(field) for m in metas]
            _check_bounds(field, cond, values)
            if len(codes):
                allow &= np.array([matches(v, cond) for v in values], dtype=bool)[codes]
            continue
        values = _values(segments, field)
        _check_bounds(field, cond, values)
        cache: dict = {}   # few distinct values: each is matched once
        for d in np.flatnonzero(allow).tolist():
            v = values[d]
            try:
                ok = cache[(type(v), v)]
            except KeyError:
                ok = cache[(type(v), v)] = matches(v, cond)
            except TypeError:          # an unhashable value given through the API (a list)
                ok = matches(v, cond)
            allow[d] = ok
    return allow
