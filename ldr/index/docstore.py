"""Parquet docstore of one segment: row i = the segment's document i (uid, id, title, text, length, meta).

`uid` is the document's number for the life of the index: it never changes when segments merge,
so the BM25 backends that keep their own index (tantivy, Lucene) refer to documents by it."""
from __future__ import annotations

import bisect
import json
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..corpus import Doc
from ..corpus.text import count_words
from ..errors import IndexFormatError
from .docstore_columns import SmallColumns, StringColumn, arrow_rows, int64s
from .doctexts import FRAMES, Texts, TextsWriter

FILE = "docstore.parquet"
SCHEMA = pa.schema([
    ("uid", pa.int64()),
    ("id", pa.string()),
    ("title", pa.string()),
    ("text", pa.large_string()),
    ("length", pa.int64()),   # whitespace-separated words; tokens depend on the model
    ("meta", pa.string()),    # JSON object: the user's fields only
    ("source", pa.string()),  # ldr's own: where the document was read ("c.jsonl line 3"), or null
    ("path", pa.string()),    # the file it came from, or null
    ("root", pa.string()),    # the corpus folder `path` is relative to (absolute), or null
    ("stamp", pa.string()),   # "size:digest" of that file's bytes when read: `ldr add` skips it unchanged
])
# what opening a segment reads, beside the Parquet file: uid, id, title and length as one Arrow IPC file
# (from the Parquet file's 64-row groups they took 1.3 s of a cold search at 1M documents; older segments do)
KEYS = "docstore.keys.arrow"
KEY_COLUMNS = ["uid", "id", "title", "length"]
KEYS_SCHEMA = pa.schema([f for f in SCHEMA if f.name in KEY_COLUMNS])
KEYS_BATCH = 1 << 16
SMALL = ("meta", "source", "path", "root", "stamp")     # what a hit shows besides id and title
TEXTS_KEY = "ldr.texts"    # Parquet metadata: the rows' texts are in this file of the segment (doctexts)
WRITTEN_SCHEMA = SCHEMA.with_metadata({TEXTS_KEY: FRAMES})


def rows_table(docs: list[Doc], uids: list[int], lengths: list[int] | None = None, texts: bool = True) -> pa.Table:
    """Documents as docstore rows (the Ray staging files share the layout); `texts=False`: the
    text column empty (a segment keeps its texts in doctexts' file)."""
    return pa.table({
        "uid": uids,
        "id": [d.id for d in docs],
        "title": [d.title for d in docs],
        "text": [d.text if texts else "" for d in docs],
        "length": lengths if lengths is not None else [count_words(d.text) for d in docs],
        "meta": [json.dumps(d.meta, ensure_ascii=False) if d.meta else "{}" for d in docs],
        "source": [d.source for d in docs],
        "path": [d.path for d in docs],
        "root": [d.root for d in docs],
        "stamp": [d.stamp for d in docs],
    }, schema=SCHEMA)


def legacy_origin(meta: dict) -> tuple[dict, str | None, str | None]:
    """(user meta, source, path) of a row written before ldr kept its bookkeeping apart: `source`
    was always ldr's (it overwrote the user's); `path` was ldr's when it names the file `source`
    points into, else the user's own."""
    if "source" not in meta:
        return meta, None, None
    meta = dict(meta)
    source = meta.pop("source")
    path = meta.get("path")
    if isinstance(source, str) and isinstance(path, str) and (source == path or source.startswith(path + " ")):
        del meta["path"]
    elif not isinstance(source, str):
        source = None
    return meta, source, path if isinstance(path, str) else source


def doc_of(columns: dict, i: int) -> Doc:
    """Row `i` of a batch of docstore columns as a Doc (older docstores lack source and path)."""
    meta = json.loads(columns["meta"][i]) if columns["meta"][i] else {}
    if "source" in columns:
        get = lambda c: columns[c][i] if c in columns else None     # noqa: E731  (later columns: root, stamp)
        return Doc(columns["id"][i], columns["text"][i], columns["title"][i], meta,
                   columns["source"][i], columns["path"][i], get("root"), get("stamp"))
    meta, source, path = legacy_origin(meta)
    return Doc(columns["id"][i], columns["text"][i], columns["title"][i], meta, source, path)


class DocstoreWriter:
    """Streams documents to Parquet in row groups so memory stays bounded."""

    def __init__(self, root: Path, rows_per_group: int = 64, bytes_per_group: int = 4 << 20):
        self.path = Path(root) / FILE
        # page checksums: a flipped byte in a page is an error on read, not different metadata; the
        # text column stays in the schema (empty): the texts are in doctexts' file, as it says
        self._writer = pq.ParquetWriter(self.path, WRITTEN_SCHEMA, compression="zstd",
                                        write_page_checksum=True, write_statistics=["uid", "id", "length"],
                                        use_dictionary=["id", "title", "meta", "root"])
        self._rows: list[Doc] = []
        self._uids: list[int] = []
        self._group, self._group_bytes, self._pending = rows_per_group, bytes_per_group, 0
        self.count = 0
        self._texts = TextsWriter(Path(root))
        self._keys_sink = pa.OSFile(str(Path(root) / KEYS), "wb")
        self._keys = pa.ipc.new_file(self._keys_sink, KEYS_SCHEMA)
        self._key_tables: list[pa.Table] = []
        self._key_rows = 0

    def add(self, doc: Doc, uid: int | None = None) -> int:
        self._texts.add(doc.text)
        self._rows.append(doc)
        self._uids.append(self.count if uid is None else uid)
        self.count += 1
        self._pending += len(doc.text)
        # a row group holds at most 64 documents or ~4 MB of text (the documents kept until it is
        # written): reading one hit's metadata reads its row group, so small groups keep reads
        # proportional to what is shown
        if len(self._rows) >= self._group or self._pending >= self._group_bytes:
            self._flush()
        return self.count - 1

    def _flush(self) -> None:
        if not self._rows:
            return
        table = rows_table(self._rows, self._uids, texts=False)
        self._writer.write_table(table)
        self._key_tables.append(table.select(KEY_COLUMNS))
        self._key_rows += len(table)
        if self._key_rows >= KEYS_BATCH:
            self._flush_keys()
        self._rows, self._uids, self._pending = [], [], 0
        del table
        # Parquet encoding holds several copies of a long text; hand them back before the next
        # component copies the same document (arrow's allocator would keep them otherwise)
        pa.default_memory_pool().release_unused()

    def _flush_keys(self) -> None:
        if self._key_tables:
            self._keys.write_table(pa.concat_tables(self._key_tables).combine_chunks())
        self._key_tables, self._key_rows = [], 0

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._flush_keys()
        self._keys.close()
        self._keys_sink.close()
        self._texts.close()

    def abort(self) -> None:
        self._writer.close()
        self._keys_sink.close()
        self._texts.abort()


def read_keys(root: Path, pf: pq.ParquetFile) -> pa.Table | None:
    """The keys file (None for a segment written before it): a table of KEY_COLUMNS that must have the
    Parquet file's rows."""
    path = root / KEYS
    if not path.is_file():
        return None
    # read, not mapped: the columns are copied into Python lists and arrays at open anyway, and a
    # file replaced under a live mapping would be a bus error rather than an exception
    with pa.OSFile(str(path), "rb") as fh:
        table = pa.ipc.open_file(fh).read_all()
    if table.schema != KEYS_SCHEMA or table.num_rows != pf.metadata.num_rows:
        raise ValueError(f"{KEYS} does not match {FILE} ({table.num_rows} rows, {pf.metadata.num_rows} there)")
    return table


def _damaged(path: Path, e: Exception) -> IndexFormatError:
    return IndexFormatError(f"{path} is damaged ({type(e).__name__}: {str(e)[:200]}); run `ldr check` on the index "
                            "and rebuild it with `ldr index`")


class Docstore:
    """Read side: ids and lengths in memory; texts read per document (doctexts), or per row group
    from a segment written before its texts file; metadata per row group, on demand."""

    def __init__(self, root: Path, expected_rows: int | None = None):
        self.path = Path(root) / FILE
        try:
            self._pf = pq.ParquetFile(self.path, page_checksum_verification=True)
            names = self._pf.schema_arrow.names
            has_uid = "uid" in names   # format 2 docstores have none: uid = row
            self._columns = [c for c in ("id", "title", "text", "meta", "source", "path", "root", "stamp") if c in names]
            small = read_keys(Path(root), self._pf) if has_uid else None
            if small is None:
                small = self._pf.read(columns=(["uid"] if has_uid else []) + ["id", "title", "length"])
            ids = small.column("id").combine_chunks()
            self.ids = StringColumn(ids)
            self.uids = int64s(small.column("uid")) if has_uid else np.arange(len(self.ids), dtype=np.int64)
            self.titles = StringColumn(small.column("title").combine_chunks())
            self.lengths = int64s(small.column("length"))
            md = self._pf.metadata
        except Exception as e:  # pyarrow raises OSError, ArrowInvalid, KeyError... for damaged files
            raise _damaged(self.path, e) from None
        if expected_rows is not None and len(self.ids) != expected_rows:
            raise IndexFormatError(f"{self.path} has {len(self.ids)} documents, the manifest says {expected_rows}; "
                                   "rebuild the index with `ldr index`")
        if ids.null_count:
            raise IndexFormatError(f"{self.path} has documents without an id; rebuild the index with `ldr index`")
        try:
            # the Parquet file (listed and checked by the manifest) says whether its texts are in
            # the texts file: a stray file beside a segment written before it is never read
            marked = (self._pf.schema_arrow.metadata or {}).get(TEXTS_KEY.encode()) == FRAMES.encode()
            self.text_file = Texts(Path(root), len(self.ids)) if marked else None
        except Exception as e:
            raise _damaged(Path(root) / FRAMES, e) from None
        self._row_of: dict[str, int] | None = None     # built at the first lookup by id: a search needs none
        self._starts = [0]
        for g in range(md.num_row_groups):
            self._starts.append(self._starts[-1] + md.row_group(g).num_rows)
        self._cache: tuple[int, list] | None = None
        # one reader at a time: a ParquetFile and the row-group cache are not thread-safe
        self._lock = threading.Lock()
        self._small = SmallColumns(self._pf, [c for c in self._columns if c in SMALL])

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def row_of(self) -> dict[str, int]:
        """{id: row}, checked for duplicates (the writer never makes them: a damaged or foreign file)."""
        if self._row_of is None:
            row_of = {d: i for i, d in enumerate(self.ids)}
            if len(row_of) != len(self.ids):
                raise IndexFormatError(f"{self.path} has duplicate document ids; rebuild the index with `ldr index`")
            self._row_of = row_of
        return self._row_of

    def row(self, doc_id: str) -> int:
        return self.row_of[doc_id]

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self.row_of

    def _column(self, g: int, name: str) -> list:
        try:
            return self._pf.read_row_group(g, columns=[name]).column(name).to_pylist()
        except Exception as e:
            raise _damaged(self.path, e) from None

    def text(self, row: int) -> str:
        if self.text_file is not None:
            return self._texts([row])[0]
        g = bisect.bisect_right(self._starts, row) - 1
        with self._lock:
            if self._cache is None or self._cache[0] != g:
                self._cache = (g, self._column(g, "text"))
            return self._cache[1][row - self._starts[g]]

    def _texts(self, rows) -> list[str]:
        try:
            if isinstance(rows, range) and rows.step == 1:      # consecutive rows: one read
                return self.text_file.span(rows.start, rows.stop)
            return self.text_file.get(rows)
        except Exception as e:
            raise _damaged(self.text_file.path, e) from None

    def _rows(self, rows: list[int], names: list[str]) -> dict[str, list]:
        """Columns `names` of `rows`, in that order, read with one call for all their row groups
        (a call per row group costs ~0.5 ms of fixed overhead); texts from their own file."""
        if self.text_file is not None and "text" in names:
            out = self._rows(rows, [c for c in names if c != "text"]) if len(names) > 1 else {}
            return {**out, "text": self._texts(rows)}
        at = [bisect.bisect_right(self._starts, r) - 1 for r in rows]
        groups = sorted(set(at))
        first, n = {}, 0
        for g in groups:
            first[g] = n
            n += self._starts[g + 1] - self._starts[g]
        take = arrow_rows([first[g] + r - self._starts[g] for g, r in zip(at, rows)])
        try:
            with self._lock:
                t = self._pf.read_row_groups(groups, columns=names, use_threads=False)
            return {c: t.column(c).take(take).to_pylist() for c in names}
        except Exception as e:
            raise _damaged(self.path, e) from None

    def texts(self, rows: list[int]) -> list[str]:
        """The texts of `rows` (one read for all of them)."""
        return self._rows(rows, ["text"])["text"] if rows else []

    def meta_docs(self, rows: list[int]) -> list[Doc]:
        """meta_doc of each of `rows` (one read for all of them)."""
        if not rows:
            return []
        cols = self._small.take(rows, self._read_small)
        if cols is None:
            cols = self._rows(rows, self._small.names)
        blank = {"id": [""] * len(rows), "title": [""] * len(rows), "text": [""] * len(rows)}
        return [doc_of({**blank, **cols}, i) for i in range(len(rows))]

    def meta_doc(self, row: int) -> Doc:
        """Row `row` without its text: the user's metadata and ldr's source and path."""
        return self.meta_docs([row])[0]

    def meta(self, row: int) -> dict:
        """The metadata given at indexing: the user's fields only."""
        return self.meta_doc(row).meta

    def _read_small(self) -> pa.Table:
        try:
            with self._lock:
                return self._pf.read(columns=self._small.names)
        except Exception as e:
            raise _damaged(self.path, e) from None

    def all_meta(self) -> list[Doc]:
        """Every row's metadata, source and path as text-less Docs (filters read them; one pass
        over the small columns)."""
        names = self._small.names
        t = self._read_small()
        try:
            cols = {c: t.column(c).to_pylist() for c in names}
            n = len(cols["meta"])
            blank = {"id": [""] * n, "title": [""] * n, "text": [""] * n}
            return [doc_of({**blank, **cols}, i) for i in range(n)]
        except Exception as e:
            raise _damaged(self.path, e) from None

    def meta_column(self):
        """The raw metadata column (JSON text per row, Arrow), or None for a docstore older than the
        source column (its metadata carries ldr's origin: read through all_meta)."""
        if "source" not in self._columns:
            return None
        try:
            with self._lock:
                return self._pf.read(columns=["meta"]).column("meta")
        except Exception as e:
            raise _damaged(self.path, e) from None

    def origins(self) -> tuple[list, list, list]:
        """(path, root, stamp) of every row: the file each document was read from, the corpus folder
        that path is relative to, the file's size and digest then (None where unknown or not kept)."""
        cols = [c for c in ("path", "root", "stamp") if c in self._columns]
        try:
            with self._lock:
                t = self._pf.read(columns=cols) if "root" in cols else None
            return tuple(t.column(c).to_pylist() if t is not None and c in cols else [None] * len(self.ids)
                         for c in ("path", "root", "stamp"))
        except Exception as e:
            raise _damaged(self.path, e) from None

    def doc(self, row: int) -> Doc:
        return self.docs([row])[0]

    def docs(self, rows: list[int]) -> list[Doc]:
        """The whole documents at `rows` (one read for all of them)."""
        if not rows:
            return []
        cols = self._rows(rows, self._columns)
        return [doc_of(cols, i) for i in range(len(rows))]

    def iter_docs(self, batch_size: int = 64):
        """Stream (row, uid, Doc) in row order, meta included (merges copy documents this way)."""
        row = 0
        names = [c for c in self._columns if c != "text" or self.text_file is None]
        try:
            for batch in self._pf.iter_batches(batch_size=batch_size, columns=names):
                d = batch.to_pydict()
                if self.text_file is not None:
                    d["text"] = self._texts(range(row, row + batch.num_rows))
                for i in range(batch.num_rows):
                    yield row, int(self.uids[row]), doc_of(d, i)
                    row += 1
        except IndexFormatError:
            raise
        except Exception as e:
            raise _damaged(self.path, e) from None
