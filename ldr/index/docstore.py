"""Parquet docstore: row i = internal document number i (id, title, text, length, meta)."""
from __future__ import annotations

import bisect
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..corpus import Doc

FILE = "docstore.parquet"
SCHEMA = pa.schema([
    ("id", pa.string()),
    ("title", pa.string()),
    ("text", pa.large_string()),
    ("length", pa.int64()),   # whitespace-separated words; tokens depend on the model
    ("meta", pa.string()),    # JSON object
])


class DocstoreWriter:
    """Streams documents to Parquet in row groups so memory stays bounded."""

    def __init__(self, root: Path, rows_per_group: int = 512):
        self.path = Path(root) / FILE
        self._writer = pq.ParquetWriter(self.path, SCHEMA, compression="zstd")
        self._rows: list[Doc] = []
        self._group = rows_per_group
        self.count = 0

    def add(self, doc: Doc) -> int:
        self._rows.append(doc)
        self.count += 1
        if len(self._rows) >= self._group:
            self._flush()
        return self.count - 1

    def _flush(self) -> None:
        if not self._rows:
            return
        rows = self._rows
        table = pa.table({
            "id": [d.id for d in rows],
            "title": [d.title for d in rows],
            "text": [d.text for d in rows],
            "length": [len(d.text.split()) for d in rows],
            "meta": [json.dumps(d.meta, ensure_ascii=False) if d.meta else "{}" for d in rows],
        }, schema=SCHEMA)
        self._writer.write_table(table)
        self._rows = []

    def close(self) -> None:
        self._flush()
        self._writer.close()

    def abort(self) -> None:
        self._writer.close()


class Docstore:
    """Read side: ids and lengths in memory, text fetched per row group on demand."""

    def __init__(self, root: Path):
        self._pf = pq.ParquetFile(Path(root) / FILE)
        small = self._pf.read(columns=["id", "title", "length"])
        self.ids: list[str] = small.column("id").to_pylist()
        self.titles: list[str] = small.column("title").to_pylist()
        self.lengths = small.column("length").to_numpy()
        self._row_of = {d: i for i, d in enumerate(self.ids)}
        md = self._pf.metadata
        self._starts = [0]
        for g in range(md.num_row_groups):
            self._starts.append(self._starts[-1] + md.row_group(g).num_rows)
        self._cache: tuple[int, list] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, doc_id: str) -> int:
        return self._row_of[doc_id]

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._row_of

    def text(self, row: int) -> str:
        g = bisect.bisect_right(self._starts, row) - 1
        if self._cache is None or self._cache[0] != g:
            self._cache = (g, self._pf.read_row_group(g, columns=["text"]).column("text").to_pylist())
        return self._cache[1][row - self._starts[g]]

    def meta(self, row: int) -> dict:
        g = bisect.bisect_right(self._starts, row) - 1
        return json.loads(self._pf.read_row_group(g, columns=["meta"]).column("meta")[row - self._starts[g]].as_py())

    def doc(self, row: int) -> Doc:
        return Doc(self.ids[row], self.text(row), self.titles[row], self.meta(row))

    def iter_docs(self, batch_size: int = 256):
        """Stream all documents in row order (used to re-encode an index)."""
        row = 0
        for batch in self._pf.iter_batches(batch_size=batch_size, columns=["id", "title", "text"]):
            d = batch.to_pydict()
            for i in range(batch.num_rows):
                yield row, Doc(d["id"][i], d["text"][i], d["title"][i])
                row += 1
