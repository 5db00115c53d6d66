"""A passage's highlights (ldr/search/marks.py): the words matching a query's terms, found on the
text lowered once, equal those found word by word, for any text in any of the analyzers' languages."""
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ldr.components.analysis import Analyzer
from ldr.search.marks import marks, word_by_word
from ldr.search.window_terms import WindowTerms

# words that lower to two characters (İ), by their context (Σ), the stop list's and the quiet words,
# stems, underscores and digits (\w), CJK runs (pretokenized in Chinese), and what separates words
PIECES = ["bridge", "Bridges", "BEARING", "bearings", "the", "What", "how", "does", "İstanbul", "ΟΔΟΣ",
          "Σ", "ς", "straße", "STRASSE", "Häuser", "foo_bar", "3.5", "x2", "東京都", "的", "天气", "北京大学",
          "running", "ran", "e-mail's", "ǅ", "Ⅻ", "ⅻ"]
GAPS = [" ", "  ", "\n", "\n\n", ". ", ", ", "'", "-", "\u3000", "\xa0", "—", ""]
CACHES = {lang: WindowTerms(Analyzer(language=lang)) for lang in ("en", "de", "zh")}


@st.composite
def texts(draw):
    words = draw(st.lists(st.sampled_from(PIECES) | st.text(min_size=1, max_size=6), max_size=40))
    return "".join(w + draw(st.sampled_from(GAPS)) for w in words)


@pytest.mark.parametrize("lang", sorted(CACHES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts(), query=st.lists(st.sampled_from(PIECES), min_size=1, max_size=5))
def test_marks_equal_the_word_by_word_reference(lang, text, query):
    cache = CACHES[lang]
    qterms = set(cache.terms(" ".join(query)))
    got = marks(cache, text, qterms)
    assert got == word_by_word(cache, text, qterms)
    assert all(re.fullmatch(r"\w+", text[a:e]) for a, e in got)     # whole words of the text


def test_quiet_words_are_marked_only_where_nothing_else_is():
    cache = CACHES["en"]
    qterms = set(cache.terms("what does the bridge bearing do"))
    text = "What does a bridge do? Bearings carry it."
    assert [text[a:e] for a, e in marks(cache, text, qterms)] == ["bridge", "Bearings"]
    quiet = "What does it do?"
    assert [quiet[a:e] for a, e in marks(cache, quiet, qterms)] == ["What", "does", "do"]
    assert marks(cache, "nothing here", qterms) == []


def test_a_text_whose_lowering_changes_its_length_is_marked_where_its_words_are():
    cache = CACHES["en"]
    qterms = set(cache.terms("istanbul bridge"))
    text = "İİ bridge İstanbul bridge"     # İ lowers to two characters: offsets are the text's own
    got = [text[a:e] for a, e in marks(cache, text, qterms)]
    assert got == [w for w in text.split() if w in ("bridge", "İstanbul") and set(cache.terms(w)) & qterms]
    assert "bridge" in got


def test_a_capital_sigma_is_marked_as_its_word_lowered_alone():
    """Lowered in its text, Σ before an apostrophe and a letter is not final (σ); lowered as its
    word, it is (ς), and the two are different terms: such a text is marked word by word."""
    cache = CACHES["en"]
    text = "ΟΔΟΣ'Α ΟΔΟΣ"
    assert text.lower().split()[0] != "ΟΔΟΣ".lower() + "'α"
    for query in ("ΟΔΟΣ", "οδος", "οδοσ"):
        qterms = set(cache.terms(query))
        assert marks(cache, text, qterms) == word_by_word(cache, text, qterms)
    assert marks(cache, text, set(cache.terms("οδος"))) == [(0, 4), (7, 11)]


def test_a_word_is_marked_where_it_stands_whole():
    cache = CACHES["en"]
    text = "abridge bridge _bridge bridge_ bridge2 Bridge, (bridge)bridges"
    qterms = set(cache.terms("bridge"))
    got = marks(cache, text, qterms)
    assert got == word_by_word(cache, text, qterms)
    assert [text[a:e] for a, e in got] == ["bridge", "_bridge", "bridge_", "Bridge", "bridge", "bridges"]
