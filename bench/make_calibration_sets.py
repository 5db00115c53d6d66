"""Two evaluation sets made from text on this machine, as BEIR folders, for the calibration's
leave-one-dataset-out check (bench/fit_calibration.py): queries whose answer sits in one document.

- needles: 80 documents of 1k-8k words cut from the Paul Graham essays (../shared/data), each with
  one made-up sentence inserted at a random place; half the queries quote that sentence, half
  give 60% of its words in order.
- manuals: the HTML manuals and READMEs under /usr/share/doc as text; per document one sentence
  from its middle quoted, and its four rarest words as a keyword query.

    python bench/make_calibration_sets.py OUT_DIR
"""
from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ldr.corpus.html import html_to_text  # noqa: E402

ESSAYS = ROOT.parent / "shared" / "data" / "paul-graham-essays"


def _write(folder: Path, corpus: list[dict], queries: list[dict], qrels: list[tuple[str, str]]) -> None:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in qrels))
    print(f"{folder}: {len(corpus)} documents, {len(queries)} queries")


def needles(out: Path, n: int = 80, seed: int = 0) -> None:
    from faker import Faker

    rng = random.Random(seed)
    fake = Faker("en_US")
    fake.seed_instance(seed)
    words = " ".join(p.read_text("utf-8", "replace") for p in sorted(ESSAYS.rglob("*.txt"))).split()
    corpus, queries, qrels = [], [], []
    for i in range(n):
        length = rng.randint(1000, 8000)
        start = rng.randrange(0, max(1, len(words) - length))
        body = words[start:start + length]
        needle = (f"The {fake.color_name().lower()} {fake.word()} of {fake.city()} was sold to "
                  f"{fake.name()} for {rng.randint(10, 999)} {fake.currency_name().lower()}.")
        at = rng.randrange(len(body))
        corpus.append({"_id": f"n{i}", "title": "", "text": " ".join(body[:at] + [needle] + body[at:])})
        if i % 2 == 0:
            q = needle
        else:
            toks = needle.rstrip(".").split()
            keep = sorted(rng.sample(range(len(toks)), max(3, int(0.6 * len(toks)))))
            q = " ".join(toks[j] for j in keep)
        queries.append({"_id": f"q{i}", "text": q})
        qrels.append((f"q{i}", f"n{i}"))
    _write(out / "needles", corpus, queries, qrels)


def manuals(out: Path, seed: int = 0) -> None:
    rng = random.Random(seed)
    docs = {}
    for p in sorted(Path("/usr/share/doc").rglob("*")):
        if p.suffix.lower() in (".html", ".htm") or p.name.lower() in ("readme", "readme.md", "readme.txt"):
            try:
                raw = p.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            text = html_to_text(raw)[1] if p.suffix.lower() in (".html", ".htm") else raw
            if 800 <= len(text.split()) <= 60000 and text not in docs.values():
                docs[str(p.relative_to("/usr/share/doc"))] = text
    names = sorted(docs)[:80]
    vocab = Counter(w.lower() for name in names for w in re.findall(r"[A-Za-z]{4,}", docs[name]))
    corpus = [{"_id": f"m{i}", "title": "", "text": docs[name]} for i, name in enumerate(names)]
    queries, qrels = [], []
    for i, name in enumerate(names):
        text = " ".join(docs[name].split())
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if 10 <= len(s.split()) <= 30]
        middle = sentences[len(sentences) // 3: 2 * len(sentences) // 3] or sentences
        unique = [s for s in middle if sum(s in " ".join(docs[o].split()) for o in names) == 1]
        if not unique:
            continue
        s = rng.choice(unique)
        queries.append({"_id": f"quote{i}", "text": s})
        qrels.append((f"quote{i}", f"m{i}"))
        rare = sorted(set(w.lower() for w in re.findall(r"[A-Za-z]{4,}", s)), key=lambda w: (vocab[w], w))[:4]
        if len(rare) == 4:
            queries.append({"_id": f"words{i}", "text": " ".join(rare)})
            qrels.append((f"words{i}", f"m{i}"))
    _write(out / "manuals", corpus, queries, qrels)


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "calibration-sets")
    needles(out)
    manuals(out)
