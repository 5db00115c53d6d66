"""Retrieval-augmented generation without the generation: find the passages that answer a
question and assemble the prompt an LLM would get, with numbered citations.

    python examples/rag.py IDX "when can the licence be terminated?"          # a local index
    python examples/rag.py http://127.0.0.1:8080 "..."                        # a running `ldr serve`

Send the printed prompt to any LLM; its answer can cite [1], [2], ... which map to the sources
listed under the prompt (document id and character offsets, so a UI can highlight them).
"""
from __future__ import annotations

import argparse
import textwrap

from ldr.integrations.source import open_source, passage_records

PROMPT = """Answer the question using only the numbered sources below. Cite the sources you use
like [1]. If the sources do not contain the answer, say so.

{sources}

Question: {question}
Answer:"""


def build_prompt(question: str, records: list[dict], max_chars: int = 6000) -> tuple[str, list[dict]]:
    """The prompt and the sources it cites, best passages first, within `max_chars` of context."""
    used, blocks, size = [], [], 0
    for r in records:
        text = " ".join(r["text"].split())
        if size + len(text) > max_chars and used:
            break
        used.append(r)
        md = r["metadata"]
        blocks.append(f"[{len(used)}] ({md['title'] or md['doc_id']})\n{text}")
        size += len(text)
    return PROMPT.format(sources="\n\n".join(blocks), question=question), used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", help="an index directory or the URL of `ldr serve`")
    ap.add_argument("question")
    ap.add_argument("-k", type=int, default=3, help="documents")
    ap.add_argument("-p", "--passages", type=int, default=2, help="passages per document")
    ap.add_argument("--filter", action="append", default=[], help="FIELD=VALUE, as in `ldr search`")
    ap.add_argument("--max-chars", type=int, default=6000, help="context budget in characters")
    args = ap.parse_args()

    from ldr.search.filters import parse

    source = open_source(args.index)
    hits = source.search(args.question, k=args.k, passages=args.passages, filters=parse(args.filter) or None)
    prompt, used = build_prompt(args.question, passage_records(hits), args.max_chars)
    print(prompt)
    print("\n--- sources ---")
    for i, r in enumerate(used, 1):
        md = r["metadata"]
        print(f"[{i}] {md['doc_id']} characters {md['start']}-{md['end']} (score {r['score']:.3f}, {md['stage']})")
        print(textwrap.indent(textwrap.shorten(r["text"], 160), "    "))


if __name__ == "__main__":
    main()
