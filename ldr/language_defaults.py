"""Search defaults per language, each chosen on that language's development data by
`bench/language_defaults.py` (5-fold cross-validation, paired tests; bench/README.md) and kept in
language_defaults.json: fusion weights and the window stage's depth, weight and scorer.

An index's language (detected or given at build, `settings.build.language` in its manifest) picks
the profile: English (and `none`, no language) gets "en", chosen on qmsum-train; German "de",
chosen on klexikon-de-dev; a language gets a profile only from data in it, and one without keeps
ldr's language-neutral defaults. A profile applies only to an index whose models
are the ones it was measured with, or ones `ldr train` fine-tuned from them (a user's own model gets
ldr's defaults). The settings follow
the release, like ldr's own defaults; the manifest records which profile an index was built under
(`settings.build.search_profile`), and its `search` entry (`ldr tune`, `Index.set_search_defaults`) overrides it."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).with_name("language_defaults.json")
ENGLISH = ("en", "none")


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(TABLE.read_text(encoding="utf-8"))


def family(code: str | None) -> str | None:
    """The language whose measured defaults a language takes: its own, where its data chose them
    (English and `none` take English's); None for a language with no data of its own, which keeps
    ldr's language-neutral defaults (German's profile, given to every other language before, took
    Chinese below BM25 alone: issue 59)."""
    code = (code or "en").lower()
    if code in ENGLISH:
        return "en"
    return code if code in table() else None


def _model(comp: dict) -> str | None:
    """The model a kind's profile is measured against: the one `ldr train` fine-tuned it from, if any."""
    model = comp.get("model")
    if not isinstance(model, dict):
        return None
    name = model.get("trained_from") or model.get("name")
    return str(name) if name else None


def profile(language: dict | str | None, components: dict, fam: str | None = None) -> dict | None:
    """{"family", "language", "chosen_on", "settings", "held_out", "gpu_second_stage"} for an
    index in `language` (its manifest's language record, or a code) with `components`, from the
    family `fam` (default: the language's); None when no profile applies (the family has none, or
    a kind's model is not the one the profile was measured with)."""
    code = language.get("code") if isinstance(language, dict) else language
    fam = fam or family(code)
    entry = table().get(fam) if fam else None
    if entry is None:
        return None
    measured = entry.get("models", {})
    if any(_model(c) is not None and _model(c) != measured.get(kind) for kind, c in components.items()):
        return None
    return {"family": fam, "language": code or "en", "chosen_on": entry["chosen_on"],
            "settings": dict(entry["settings"]), "held_out": entry.get("held_out"),
            "gpu_second_stage": entry.get("gpu_second_stage")}


def of_manifest(manifest: dict) -> dict | None:
    """The profile an index searches with: the family its build recorded (`search_profile`; none
    when its models matched no profile), else (an index from before profiles) the one its language
    maps to; its settings: today's table's."""
    build = manifest.get("settings", {}).get("build") or {}
    recorded = build.get("search_profile") or {}
    if "family" in recorded and recorded["family"] is None:
        return None
    return profile(build.get("language"), manifest.get("components", {}), recorded.get("family"))


def record(language: dict | str | None, components: dict) -> dict:
    """What a build writes in the manifest (`search_profile`): which profile, chosen on what."""
    found = profile(language, components)
    if found is None:
        code = language.get("code") if isinstance(language, dict) else language
        why = ("its models are not the ones its language's defaults were measured with" if family(code)
               else f"no data in {code} chose defaults for it: ldr's language-neutral ones apply")
        return {"family": None, "why": why}
    return {k: found[k] for k in ("family", "language", "chosen_on")}
