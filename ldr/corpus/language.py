"""Which language a corpus is written in (`--language auto`): py3langid over a sample of the
first documents, so that a German or Chinese corpus gets its own analyzer and a multilingual
dense model instead of English ones.

Only clear evidence moves a corpus away from English: enough letters, and one language holding
most of the sampled text (each document votes with its letters when langid gives its language a
probability of at least MIN_CONFIDENCE; Chinese scores only ~0.6, its characters shared with
Japanese). Short, odd or mixed samples (test fixtures, numbers, code) stay English, which is
what ldr did before detection."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Iterator

from .doc import Doc

SAMPLE_DOCS = 32          # documents read ahead to decide (they are indexed as usual afterwards)
SAMPLE_CHARS = 4000       # of each document: enough for langid, cheap on a 100k-token book
MIN_LETTERS = 200         # below this the sample says nothing reliable
MIN_CONFIDENCE = 0.5      # a document whose language langid is less sure of does not vote
MIN_SHARE = 0.6           # of the sampled letters, in documents voting for one language
DEFAULT = "en"
# langid's regional codes → the language whose analyzer and models serve them; zxx: no language
ALIASES = {"wuu": "zh", "yue": "zh", "nn": "no", "zxx": None}


@dataclass
class Detected:
    language: str
    share: float          # of the sample's letters in documents detected as `language`
    sampled: int          # documents looked at
    letters: int
    fallback: bool = False   # the evidence was too thin or split: DEFAULT, not a detection

    def to_dict(self) -> dict:
        return {"code": self.language, "detected": True, "share": round(self.share, 3), "sampled": self.sampled,
                **({"fallback": True} if self.fallback else {})}


_identifier = None


def _classify(text: str) -> tuple[str, float]:
    global _identifier
    if _identifier is None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
        _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    lang, prob = _identifier.classify(text)
    return lang, float(prob)


def detect(texts: Iterable[str]) -> Detected:
    """The language of most of `texts` (English unless the evidence is clear)."""
    weight: dict[str, int] = {}
    total = n = 0
    for text in texts:
        n += 1
        sample = text[:SAMPLE_CHARS]
        letters = sum(c.isalpha() for c in sample)
        total += letters
        if letters < 20:
            continue
        lang, prob = _classify(sample)
        lang = ALIASES.get(lang, lang)
        if lang and prob >= MIN_CONFIDENCE:
            weight[lang] = weight.get(lang, 0) + letters
    if total < MIN_LETTERS or not weight:
        return Detected(DEFAULT, 0.0, n, total, fallback=True)
    lang, w = max(weight.items(), key=lambda kv: kv[1])
    share = w / total
    if share < MIN_SHARE:
        return Detected(DEFAULT, share, n, total, fallback=True)
    return Detected(lang, share, n, total)


def detect_docs(docs: Iterable[Doc]) -> tuple[Detected, Iterator[Doc]]:
    """(the detected language, the same documents): the sample is read ahead and put back in front."""
    it = iter(docs)
    head = list(itertools.islice(it, SAMPLE_DOCS))
    return detect(d.text for d in head), itertools.chain(head, it)
