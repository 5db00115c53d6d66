"""Text analysis shared by the BM25 backends and the query side's passage windows (a setting
and tantivy's analyzers built from it, not a kind's storage).

English by default (stop words + stemming). Languages are ISO 639-1 codes. `cjk` analyses
Chinese/Japanese/Korean text as overlapping character bigrams (plus unigrams), the usual choice
for BM25 on CJK without a segmenter; `none` only lowercases.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ..corpus import Doc
from ..errors import ConfigError

# ISO code → Snowball stemmer / stop-word list names used by tantivy.
SNOWBALL = {
    "ar": "arabic", "da": "danish", "nl": "dutch", "en": "english", "fi": "finnish", "fr": "french",
    "de": "german", "el": "greek", "hu": "hungarian", "it": "italian", "no": "norwegian",
    "pt": "portuguese", "ro": "romanian", "ru": "russian", "es": "spanish", "sv": "swedish",
    "ta": "tamil", "tr": "turkish",
}
STOPWORD_LISTS = {"danish", "dutch", "english", "finnish", "french", "german", "hungarian", "italian",
                  "norwegian", "portuguese", "russian", "spanish", "swedish"}
CJK_ALIASES = {"cjk", "zh", "ja", "ko"}
LANGUAGES = sorted(set(SNOWBALL) | CJK_ALIASES | {"none"})

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]+", re.UNICODE)
_CJK_RUN = re.compile(rf"[{_CJK}]")


@dataclass(frozen=True)
class Analyzer:
    language: str = "en"
    stemming: bool = True
    stopwords: bool = True
    fold: bool = False          # accents folded (an index written before it has none: it reads as it was)

    def __post_init__(self):
        if self.language not in LANGUAGES:
            raise ConfigError(f"unknown analyzer language {self.language!r}; choose one of {', '.join(LANGUAGES)}")

    @property
    def stems(self) -> bool:
        """Stemming happens only for a language that has a stemmer: `none` never stems."""
        return self.stemming and self.language in SNOWBALL

    @property
    def drops_stopwords(self) -> bool:
        return self.stopwords and SNOWBALL.get(self.language) in STOPWORD_LISTS

    @property
    def is_cjk(self) -> bool:
        return self.language in CJK_ALIASES

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Analyzer":
        return cls(**d)


def cjk_pretokenize(text: str) -> str:
    """Space-separated tokens: CJK runs → unigrams + bigrams, other words lowercased."""
    out = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if _CJK_RUN.match(tok):
            out.extend(tok)
            out.extend(tok[i:i + 2] for i in range(len(tok) - 1))
        else:
            out.append(tok.lower())
    return " ".join(out)


# under Lucene's 1,024-clause limit, so every backend answers alike (ldr/search/query.py)
MAX_QUERY_TERMS = 1_000


def first_terms(tokens: list[str]) -> list[str]:
    """A query's BM25 terms, bounded (see ldr/search/query.py)."""
    return tokens[:MAX_QUERY_TERMS]


def index_text(doc: Doc) -> str:
    """What BM25 sees of a document: title and body."""
    return f"{doc.title}\n{doc.text}" if doc.title else doc.text


def text_analyzer(a: Analyzer) -> "tantivy.TextAnalyzer":
    """tantivy's analyzer for `a` (the native backend and the passage windows analyse with it too)."""
    import tantivy

    if a.is_cjk:
        # Text is pre-tokenised in Python (cjk_pretokenize); tantivy only splits on spaces.
        return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()
    b = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(40))
    b = b.filter(tantivy.Filter.lowercase())
    if a.fold:
        b = b.filter(tantivy.Filter.ascii_fold())
    lang = SNOWBALL.get(a.language)
    if lang and a.stopwords and lang in STOPWORD_LISTS:
        b = b.filter(tantivy.Filter.stopword(lang))
    if lang and a.stemming:
        b = b.filter(tantivy.Filter.stemmer(lang))
    return b.build()
