"""The words of a passage that match a query's terms, as character ranges (its highlights).

A word matches when one of its terms (the index's analyzer, through the window-term cache) is one
of the query's. A passage repeats its words, so each distinct word is looked up once, on the text
lowered once, and only the words that match are placed (str.find): each regex scan of a
~1,000-character passage costs ~25 us, and a search highlights ten (64 -> 43 us a passage)."""
from __future__ import annotations

import re

from .window_terms import WindowTerms

WORD = re.compile(r"\w+", re.UNICODE)

# English question and function words outside Lucene's stop list (which BM25 keeps scoring): not
# marked in a passage when it holds other query words
QUIET_WORDS = frozenset("""what who whom whose which when where why how does do did done has have had having i
you he she we me my your his her its our them can could would should may might must shall from about than so
too very just also am were been being any all some each other own same only both few more most""".split())


def marks(cache: WindowTerms, text: str, qterms: set[str]) -> list[tuple[int, int]]:
    """Character ranges of the words in `text` that match a query term (for highlighting); the
    question and function words BM25's stop list keeps ("what", "does") are not marked where
    other words are: marked everywhere, they hide the words that answer."""
    low = text.lower()
    # Lowered whole, a text's words are its words lowered one by one (each character lowers alone
    # and keeps its \w class), except where a character lowers to two (İ) or by its context (Σ)
    if len(low) != len(text) or "Σ" in text:
        return word_by_word(cache, text, qterms)
    distinct = list(dict.fromkeys(WORD.findall(low)))    # first seen first: new words get term ids in text order
    hit = [w for w, is_hit in zip(distinct, _matching(cache, distinct, qterms)) if is_hit]
    spans = []
    for word in [w for w in hit if w not in QUIET_WORDS] or hit:
        # a word's places: where it stands whole, between characters outside \w (str.isalnum or _,
        # exactly re's \w, checked over every code point)
        at = low.find(word)
        while at >= 0:
            end = at + len(word)
            if (not at or not _in_word(low[at - 1])) and (end == len(low) or not _in_word(low[end])):
                spans.append((at, end))
            at = low.find(word, end)       # no place inside this one stands whole
    spans.sort()
    return spans


def _in_word(c: str) -> bool:
    return c.isalnum() or c == "_"


def word_by_word(cache: WindowTerms, text: str, qterms: set[str]) -> list[tuple[int, int]]:
    """marks() a word at a time: for any text, and the reference its faster path is tested against."""
    found = list(WORD.finditer(text))
    words = [m.group(0).lower() for m in found]
    hit = [(m, w) for m, w, is_hit in zip(found, words, _matching(cache, words, qterms)) if is_hit]
    content = [m.span() for m, w in hit if w not in QUIET_WORDS]
    return content or [m.span() for m, _ in hit]


def _matching(cache: WindowTerms, words: list[str], qterms: set[str]) -> list[bool]:
    """Whether each lowered word has a term of `qterms`."""
    if not cache.pretokenizes:                 # a word is one piece: its terms are the word's
        ids, vocab = cache.word_ids(words)
        wanted = {vocab[t] for t in qterms if t in vocab}
        return [not wanted.isdisjoint(got) for got in ids]
    pieces = [cache.words(w) for w in words]
    ids, vocab = cache.word_ids([p for ps in pieces for p in ps])
    wanted = {vocab[t] for t in qterms if t in vocab}
    out, at = [], 0
    for ps in pieces:
        out.append(any(not wanted.isdisjoint(ids[j]) for j in range(at, at + len(ps))))
        at += len(ps)
    return out
