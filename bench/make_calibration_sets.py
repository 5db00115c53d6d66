"""Two evaluation sets made from text on this machine, as BEIR folders, for the calibration's
leave-one-dataset-out check (bench/fit_calibration.py): queries whose answer sits in one document.

- needles: 80 documents of 1k-8k words cut from the Paul Graham essays (../shared/data), each with
  one made-up sentence inserted at a random place; half the queries quote that sentence, half
  give 60% of its words in order.
- manuals: the HTML manuals and READMEs under /usr/share/doc as text; per document one sentence
  from its middle quoted, and its four rarest words as a keyword query.
- manpages: summary queries, one relevant document: 200 long man pages (sections 1, 5, 7, 8;
  1k-20k words) as text without their NAME line; a query is that line's description ("Record
  changes to the repository").
- man-bundles: summary queries, several relevant documents (LongBench's passage-retrieval
  construction, in English): 200 documents, each 8 man pages of 150-1,000 words run together,
  every page in 4 of them; a query is one page's NAME description, relevant = every document
  holding the page.

    python bench/make_calibration_sets.py OUT_DIR [SET ...]
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


MAN = Path("/usr/share/man")


def _render(path: Path) -> str:
    import subprocess
    env = {"MANWIDTH": "100", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    man = subprocess.run(["man", "--nh", "--nj", "-l", str(path)], capture_output=True, env=env, timeout=60)
    return subprocess.run(["col", "-bx"], input=man.stdout, capture_output=True, env=env).stdout.decode("utf-8", "replace")


def _man_pages(min_words: int, max_words: int, min_gz: int = 0) -> dict[str, tuple[str, str]]:
    """{page: (its NAME description, its text without the title lines and the NAME section)} of the
    English man pages of sections 1, 5, 7 and 8 (the Google Cloud SDK's ~16k generated pages left
    out), each description of 4+ words and unique (a shared one cannot say which page it means)."""
    from concurrent.futures import ThreadPoolExecutor

    files = [p for sec in ("man1", "man5", "man7", "man8") for p in sorted((MAN / sec).glob("*.gz"))
             if not p.name.startswith("gcloud") and p.stat().st_size >= min_gz]
    with ThreadPoolExecutor(2) as pool:
        texts = list(pool.map(_render, files))
    pages, seen = {}, Counter()
    for p, text in zip(files, texts):
        lines = text.splitlines()[1:-1]                     # the running title and footer
        try:
            at = next(i for i, line in enumerate(lines) if line.strip() == "NAME")
        except StopIteration:
            continue
        end = next((i for i in range(at + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
        name = " ".join(" ".join(lines[at + 1:end]).split())
        desc = re.split(r"\s+[-\u2010\u2013\u2014]+\s+", name, maxsplit=1)
        body = "\n".join(lines[:at] + lines[end:]).strip()
        words = len(body.split())
        if len(desc) == 2 and len(desc[1].split()) >= 4 and "manual page" not in desc[1].lower() \
                and min_words <= words <= max_words:
            pages[p.name] = (desc[1].rstrip("."), body)
            seen[desc[1].lower()] += 1
    return {k: v for k, v in pages.items() if seen[v[0].lower()] == 1}


def manpages(out: Path, n: int = 200, seed: int = 0) -> None:
    pages = _man_pages(1000, 20000, min_gz=3000)
    names = sorted(random.Random(seed).sample(sorted(pages), min(n, len(pages))))
    corpus = [{"_id": f"p{i}", "title": "", "text": pages[k][1]} for i, k in enumerate(names)]
    queries = [{"_id": f"q{i}", "text": pages[k][0]} for i, k in enumerate(names)]
    _write(out / "manpages", corpus, queries, [(f"q{i}", f"p{i}") for i in range(len(names))])


def man_bundles(out: Path, docs: int = 200, per_doc: int = 8, copies: int = 4, queries: int = 200,
                seed: int = 0) -> None:
    rng = random.Random(seed)
    pages = _man_pages(150, 1000)
    chosen = rng.sample(sorted(pages), docs * per_doc // copies)
    # every page in `copies` documents, never twice in one: shuffles drawn until one deals no page
    # twice into a document (rejection sampling, uniform over such deals; ~10^4 draws, ~5 s)
    while True:
        slots = [k for k in chosen for _ in range(copies)]
        rng.shuffle(slots)
        bundles = [slots[i * per_doc:(i + 1) * per_doc] for i in range(docs)]
        if all(len(set(b)) == per_doc for b in bundles):
            break
    corpus = [{"_id": f"b{i}", "title": "", "text": "\n\n".join(pages[k][1] for k in b)} for i, b in enumerate(bundles)]
    asked = sorted(rng.sample(chosen, min(queries, len(chosen))))
    qs = [{"_id": f"q{j}", "text": pages[k][0]} for j, k in enumerate(asked)]
    qrels = [(f"q{j}", f"b{i}") for j, k in enumerate(asked) for i, b in enumerate(bundles) if k in b]
    _write(out / "man-bundles", corpus, qs, qrels)


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "calibration-sets")
    which = sys.argv[2:] or ["needles", "manuals", "manpages", "man-bundles"]
    for name in which:
        {"needles": needles, "manuals": manuals, "manpages": manpages, "man-bundles": man_bundles}[name](out)
