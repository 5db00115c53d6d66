"""One-line excerpts of a passage for a terminal or a result list: where the query's words show
best (best_span), and the excerpt around it (snippet)."""
from __future__ import annotations

import math
from collections import Counter


def best_span(text: str, marks: list[tuple[int, int]], width: int) -> int:
    """Where the `width` characters of `text` that show the most distinct marked words begin (then
    the tightest): the match a reader wants to see, not the first mention of one word. A word
    counts 1 / its marks in `text` (a query word met everywhere, "what", locates little), less
    the share of `width` the marks spread over."""
    words = [text[a:b].lower() for a, b in marks]
    seen = Counter(words)
    best, start = (-math.inf, 0.0), marks[0][0] if marks else 0
    for i, (s, _) in enumerate(marks):
        inside = [j for j in range(i, len(marks)) if marks[j][1] <= s + width]
        # less for a spread span: a word 80 characters before the match must be worth the room
        spread = (marks[inside[-1]][1] - s) / width
        score = (round(sum(1 / seen[w] for w in {words[j] for j in inside}) - spread, 9), -spread)
        if score > best:
            best, start = score, s
    return start


def snippet(text: str, marks: list[tuple[int, int]], width: int = 160, style=None) -> str:
    """A one-line excerpt of `text` of about `width` characters from just before the span with the
    most distinct marked words (best_span), marked words passed through `style` (e.g. bold in a
    terminal). A short lead, then the match and what follows it: an answer follows the words a
    question shares with it ("X's first car is a blue Saab"), so the space goes after the match."""
    lead = min(width // 5, 16)
    centre = best_span(text, marks, width - lead) if marks and len(text) > width else 0
    a = max(0, centre - lead)
    if a:
        sp = text.find(" ", a)
        a = sp + 1 if 0 <= sp < centre else a
    e = min(len(text), a + width)
    parts, pos = [], a
    for s, t in marks:
        if s < a or t > e:
            continue
        parts.append(text[pos:s])
        parts.append(style(text[s:t]) if style else text[s:t])
        pos = t
    parts.append(text[pos:e])
    body = " ".join("".join(parts).split())
    return ("…" if a > 0 else "") + body + ("…" if e < len(text) else "")
