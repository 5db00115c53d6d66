"""Adapting ldr to a user's domain from their own qrels: `ldr train dense` and `ldr train reranker`
(`ldr tune`, which only chooses search settings, lives in ldr/search/tune.py)."""
