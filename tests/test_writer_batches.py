"""A writer's batches (encode/pipeline.py, BatchedWriter): by default at least MIN_DOCS documents
and FULL_CHARS of text, so a bf16 engine's passes are full; an explicit count still rules; every
document in exactly one batch, in order."""
from hypothesis import given, settings, strategies as st


def test_a_writer_batches_short_documents_by_their_text():
    """By default a batch closes at MIN_DOCS documents and FULL_CHARS of text (or MAX_DOCS
    documents), not at a count alone: a bf16 engine's passes are full only over many windows; a
    given docs_per_batch still rules."""
    from ldr.corpus import Doc
    from ldr.encode.pipeline import FULL_CHARS, MAX_DOCS, MIN_DOCS, BatchedWriter

    class Writer(BatchedWriter):
        def _prepare_batch(self, docnos, texts, body_starts):
            return docnos

        def _write_prepared(self, prepared):
            batches.append(len(prepared))

    batches = []
    w = Writer(encoder=lambda: None)
    for i in range(500):
        w.add(i, Doc(id=str(i), text="x" * 1000))
    assert batches == []                       # 500 KB: still one open batch
    w._finish()
    assert batches == [500]
    batches.clear()
    w = Writer(encoder=lambda: None)
    for i in range(MIN_DOCS + 1):               # long documents: MIN_DOCS a batch
        w.add(i, Doc(id=str(i), text="x" * (FULL_CHARS // 8)))
    w._finish()
    assert batches == [MIN_DOCS, 1]
    batches.clear()
    w = Writer(encoder=lambda: None)
    for i in range(MAX_DOCS + 1):
        w.add(i, Doc(id=str(i), text="x"))
    w._finish()
    assert batches == [MAX_DOCS, 1]
    batches.clear()
    w = Writer(docs_per_batch=7, encoder=lambda: None)
    for i in range(10):
        w.add(i, Doc(id=str(i), text="x"))
    w._finish()
    assert batches == [7, 3]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 400), max_size=60), st.sampled_from([None, 1, 4]))
def test_a_writers_batches_hold_every_document_once_in_order_each_closed_when_full(sizes, per_batch):
    """Whatever the documents' sizes: every document in one batch, in the order added; every batch
    but the last closed by its last document (full with it, not without), under the rule in force."""
    import ldr.encode.pipeline as P
    from ldr.corpus import Doc

    class Writer(P.BatchedWriter):
        max_docs = 7

        def _prepare_batch(self, docnos, texts, body_starts):
            return docnos

        def _write_prepared(self, prepared):
            batches.append(prepared)

    full_chars, min_docs, max_chars = 300, 3, 900

    def full(batch):
        chars = sum(sizes[i] for i in batch)
        if chars >= max_chars:
            return True
        if per_batch is not None:
            return len(batch) >= per_batch
        return (len(batch) >= min_docs and chars >= full_chars) or len(batch) >= Writer.max_docs

    batches = []
    old = P.FULL_CHARS, P.MIN_DOCS
    P.FULL_CHARS, P.MIN_DOCS = full_chars, min_docs
    try:
        w = Writer(docs_per_batch=per_batch, chars_per_batch=max_chars, encoder=lambda: None)
        for i, n in enumerate(sizes):
            w.add(i, Doc(id=str(i), text="x" * n))
        w._finish()
    finally:
        P.FULL_CHARS, P.MIN_DOCS = old
    assert [i for b in batches for i in b] == list(range(len(sizes)))
    assert all(batches)
    for b in batches[:-1]:
        assert full(b) and not full(b[:-1])
