"""One local segment written from a stream of documents: the segment's parts (docstore, vectors,
postings) and the index stores (tantivy, Lucene work folders) fed together, document by document.
The writer commits what this returns; a failure aborts every writer opened here."""
from __future__ import annotations

import itertools
import time
from pathlib import Path

from ..corpus import CheckedDocs, check_documents
from ..corpus.text import utf8_len
from .faults import abort_all
from .progress import BuildBar
from .segment import SegmentWriter, segment_rel


class SegmentFeed:
    def __init__(self, root: Path, number: int, components: dict, encoders: dict, stores, allow_small: bool,
                 created: list[Path]):
        self.root, self.number, self.components, self.encoders = root, number, components, encoders
        self.stores, self.allow_small = stores, allow_small
        self.created = created       # grows as folders are made: the caller removes them on failure
        self.profile: dict = {}      # seconds per build stage

    def run(self, docs, report, first_uid: int, progress: bool, total: int | None, max_doc_mb: float):
        """(segment entry, bytes, index-level component info); the stores are closed, not published."""
        stores, seg_writer = self.stores, None
        docs = iter(check_documents(docs, report, max_doc_mb))
        first = next(docs, None)
        if first is None and self.allow_small:
            # an add (the writer's small segments) of nothing new stops here, before a segment, an
            # index store or an encoder is opened; a build still writes its empty segment (an
            # empty shard's parts describe the models)
            return {"path": segment_rel(self.number), "docs": 0, "live": 0}, 0, {}
        docs = CheckedDocs(itertools.chain([first], docs) if first is not None else iter(()))
        stores.prepare()
        self.created.extend(stores.folders)
        try:
            seg_writer = SegmentWriter(self.root, self.number, self.components, self.encoders, self.allow_small)
            self.created.append(seg_writer.path)
            stores.open()
            n_bytes, uid = 0, first_uid
            t_start = time.perf_counter()
            with BuildBar(seg_writer, total, progress) as bar:   # moves while the last batches encode
                for doc in check_documents(docs, report, max_doc_mb):
                    seg_writer.add(doc, uid)
                    stores.add(uid, doc)
                    uid += 1
                    n_bytes += utf8_len(doc.text)
                    bar.fed()
                seg_writer.flush()      # the last batch's tokens counted before the bar gets its total
                bar.all_read()
                t_fed = time.perf_counter()
                entry, about = seg_writer.close()
            t_closed = time.perf_counter()
            stores.close()
            # where the time went: the feeding loop (reading, docstore, index stores, tokenising;
            # it waits only when the encoder is behind), then finishing the encoders and files
            self.profile = {"feed": round(t_fed - t_start, 3), **seg_writer.profile,
                            "finish_segment": round(t_closed - t_fed, 3),
                            "commit_bm25": round(time.perf_counter() - t_closed, 3)}
        except BaseException:
            abort_all(seg_writer, stores)
            raise
        return entry, n_bytes, about
