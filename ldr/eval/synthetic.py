"""Synthetic LongEmbed tasks generated locally, deterministic by seed, in the official layout.

Personalized passkey (LongEmbed): filler sentences repeated to ≤ 0.75·L words with
"NAME's pass key is N. Remember it. N is the pass key for NAME." at a random position; query
"what is the passkey for NAME?". 100 documents and 50 queries per context length.
"""
from __future__ import annotations

import random
from pathlib import Path
from dataclasses import dataclass, field

LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


@dataclass
class SyntheticTask:
    """Rows as in LongEmbed: corpus (doc_id, text, context_length), queries (qid, text,
    context_length), qrels (qid, doc_id, context_length)."""

    name: str
    corpus: list[dict] = field(default_factory=list)
    queries: list[dict] = field(default_factory=list)
    qrels: list[dict] = field(default_factory=list)

    def split(self, length: int) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
        """(corpus {id: text}, queries {qid: text}, qrels) of one context length."""
        corpus = {r["doc_id"]: r["text"] for r in self.corpus if r["context_length"] == length}
        queries = {r["qid"]: r["text"] for r in self.queries if r["context_length"] == length}
        qrels: dict[str, dict[str, int]] = {}
        for r in self.qrels:
            if r["context_length"] == length:
                qrels.setdefault(r["qid"], {})[r["doc_id"]] = 1
        return corpus, queries, qrels

    @property
    def lengths(self) -> list[int]:
        return sorted({r["context_length"] for r in self.corpus})


def _names(n: int, seed: int) -> list[str]:
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    names: list[str] = []
    seen = set()
    while len(names) < n:
        name = fake.name()
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def passkey_document(name: str, key: int, length: int, rng: random.Random, depth: float | None = None) -> str:
    """Filler with the pass-key sentence at a random position, or at `depth` (0 = start, 1 = end)."""
    needle = f"{name}'s pass key is {key}. Remember it. {key} is the pass key for {name}."
    budget = int(0.75 * length) - len(needle.split())
    reps = max(0, budget // len(FILLER.split()))
    filler = [FILLER] * reps
    filler.insert(rng.randint(0, reps) if depth is None else round(depth * reps), needle)
    return " ".join(filler)


def passkey(lengths=LENGTHS, n_docs: int = 100, n_queries: int = 50, seed: int = 0) -> SyntheticTask:
    task = SyntheticTask("passkey")
    for length in lengths:
        rng = random.Random(f"{seed}-{length}")
        names = _names(n_docs, seed * 100003 + length)
        for i, name in enumerate(names):
            key = rng.randint(10000, 99999)
            doc_id = f"passkey_{length}_{i}"
            task.corpus.append({"doc_id": doc_id, "text": passkey_document(name, key, length, rng),
                                "context_length": length})
            if i < n_queries:
                qid = f"passkey_q_{length}_{i}"
                task.queries.append({"qid": qid, "text": f"what is the passkey for {name}?", "context_length": length})
                task.qrels.append({"qid": qid, "doc_id": doc_id, "context_length": length})
    return task


# Needle facts written for ldr: "<person>'s <thing> is <value>", asked back as a question.
_THINGS = [
    ("favourite sailing knot", ["the bowline", "the clove hitch", "the sheet bend", "the figure eight", "the reef knot"]),
    ("secret pancake ingredient", ["cardamom", "brown butter", "ricotta", "orange zest", "buttermilk"]),
    ("lucky number", ["seventeen", "forty-two", "three hundred", "eleven", "ninety-nine"]),
    ("childhood pet", ["a tortoise named Basil", "a parrot named Echo", "a ferret named Pip", "a goat named Clover"]),
    ("first car", ["a green Volvo estate", "a red Fiat Panda", "a blue Saab 900", "a white Citroen 2CV"]),
    ("favourite mountain", ["Mont Blanc", "Ben Nevis", "Kilimanjaro", "Mount Fuji", "Denali"]),
    ("hidden talent", ["juggling knives", "whistling Bach", "solving cubes blindfolded", "speaking Icelandic"]),
]


def _haystack_words(folder: Path) -> list[str]:
    files = sorted(Path(folder).glob("*.txt"))
    words = []
    for f in files:
        words.extend(f.read_text(encoding="utf-8", errors="replace").split())
    if len(words) < 1000:
        raise ValueError(f"haystack {folder} has too little text ({len(words)} words in {len(files)} .txt files)")
    return words


def needle(haystack: Path, lengths=LENGTHS, n_docs: int = 100, n_queries: int = 50, seed: int = 0) -> SyntheticTask:
    """A fact about a person inserted at a random depth of a window of the haystack essays."""
    words = _haystack_words(haystack)
    ring = words + words   # windows may wrap around the end of the haystack
    task = SyntheticTask("needle")
    for length in lengths:
        rng = random.Random(f"needle-{seed}-{length}")
        names = _names(n_docs, seed * 7919 + length)
        budget = int(0.75 * length)
        for i, name in enumerate(names):
            thing, values = _THINGS[rng.randrange(len(_THINGS))]
            value = rng.choice(values)
            fact = f"{name}'s {thing} is {value}."
            n = max(0, budget - len(fact.split()))
            start = rng.randrange(0, max(1, len(words) - n))
            window = ring[start:start + n]
            while len(window) < n:   # budgets longer than the whole haystack repeat it
                window += words[: n - len(window)]
            window.insert(rng.randint(0, len(window)), fact)
            doc_id = f"needle_{length}_{i}"
            task.corpus.append({"doc_id": doc_id, "text": " ".join(window), "context_length": length})
            if i < n_queries:
                qid = f"needle_q_{length}_{i}"
                task.queries.append({"qid": qid, "text": f"What is {name}'s {thing}?", "context_length": length})
                task.qrels.append({"qid": qid, "doc_id": doc_id, "context_length": length})
    return task
