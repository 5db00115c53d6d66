"""The component protocol: everything one retriever kind does over its whole life (a "codec").

The index writer, segments, snapshot, `ldr check`, the Ray build, the search pipeline and
`ldr info` iterate over the registry (ldr/components/__init__.py) and call these methods; none of
them knows a kind by name. A kind keeps its data in up to two places:

- a **segment part**: files in each segment folder (`segments/seg-N/<part>/`), written as the
  segment's documents stream past (`part_writer`), copied without deleted rows on merge
  (`merge_parts`), verified by `check_part`;
- an **index store**: one index of its own for the whole index (tantivy, Lucene), in
  `<store_dir>/gen-N/`, fed by uid, with its own deletes (`store_writer`, `check_store`).

Manifest: `components[kind]` is the kind's index-level entry (`configure` makes it; a part
writer's `about` is merged into it), `segments[i][kind]` its segment part entry.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..corpus import Doc
from .states import MergeState, ReadState, SegmentPart, WriteState


@runtime_checkable
class ComponentWriter(Protocol):
    """A segment part writer: documents stream in by row, in order."""

    def add(self, docno: int, doc: Doc) -> None: ...
    def close(self) -> Any: ...          # finishes the files
    def abort(self) -> None: ...         # stops background work so the build folder can be removed


@runtime_checkable
class DocumentEncoder(Protocol):
    """What the encoder-backed part writers need of an encoder: tokenising a batch (on the
    feeding thread) is split from running the model (on the build pipeline's worker)."""

    def prepare_documents(self, texts: list[str], **kwargs) -> Any: ...
    def finish_documents(self, job: Any, progress=None) -> Any: ...
    def describe(self) -> dict: ...


@runtime_checkable
class Retriever(Protocol):
    """A first-stage reader of a pinned generation: it scores the representation the kind's query
    side made (components/query_side.py) and loads no model."""

    def search_rep(self, rep: Any, k: int) -> list[tuple[int, float]]: ...   # (docno, score), best first
    # optional: `encode(text)`, for a kind whose query side passes the text (its terms, no model);
    # `bound(rep) -> float`, the highest score the query can reach (the calibrated relevance reads
    # a score as a fraction of it: ldr/search/calibration.py)


class Part:
    """What a part writer returns from close(): its segment entry and what it tells the index."""

    def __init__(self, entry: dict | None, about: dict | None = None):
        self.entry, self.about = entry, about or {}


class Component:
    """Base class of a retriever kind. Subclasses set `name` and override what they store."""

    name: str = ""
    store_dir: str | None = None       # top-level folder of the index store's generations
    # document vectors the passage rescorer (--rerank passage) rescores candidates with; every
    # retriever may give it a feature (`exact_scores`), but it needs one kind with this set
    passage_features: bool = False
    # its fusion weight when neither the request nor the index names one: the only place a kind's
    # default weight is written (a kind registered outside ldr fuses at 1 unless it says otherwise)
    default_weight: float = 1.0

    # -- configuration (BuildConfig → manifest) ---------------------------------------------
    def build_settings(self) -> list[tuple[str, type]]:
        """(where in BuildConfig, settings dataclass) of what this kind is built with: the fields
        made with ldr.schema.setting become `ldr index` flags; "components.NAME" is the kind's
        entry of BuildConfig.components. A kind without a settings class of its own (BM25, whose
        settings are BuildConfig fields) has none."""
        return []

    def configure(self, config) -> tuple[dict, Any] | None:
        """(index-level manifest entry, encoder settings or None) when `config` (a BuildConfig)
        asks for this kind; None when it does not. Kinds outside the three built-ins are asked
        for with `BuildConfig(components={name: settings})`."""
        wanted = (getattr(config, "components", None) or {}).get(self.name)
        if wanted is None:
            return None
        return self.entry(wanted), wanted

    def entry(self, settings) -> dict:
        return {"settings": asdict(settings) if hasattr(settings, "__dataclass_fields__") else dict(settings)}

    manifest_keys: dict = {}           # required keys of `components[kind]` and their types

    def from_legacy(self, comp: dict, seg: dict) -> None:
        """Format 2 manifests (one segment at the top level): move per-segment keys into `seg`."""

    # -- encoders ---------------------------------------------------------------------------
    def encoder_settings(self, comp: dict, trust_remote_code: bool, device: str | None, where: str):
        """The encoder settings the kind was built with (None: no model)."""
        return None

    def load_encoder(self, settings):
        raise NotImplementedError

    def settings_from_dict(self, d: dict | None):
        """Encoder settings sent to a Ray worker as a dict, back into their type."""
        return d

    # -- writing ----------------------------------------------------------------------------
    def uses_store(self, comp: dict) -> bool:
        """Whether this index keeps the kind in an index store (one index for all segments)."""
        return False

    def store_writer(self, work: Path, comp: dict, threads: int, append: bool):
        """A writer of the index store in `work`: add(uid, doc), delete(uids), close(), abort()."""
        raise NotImplementedError

    def part_writer(self, state: WriteState):
        """A writer of this kind's part of a new segment (in `state.folder`), or None when the kind
        stores nothing per segment. `state.encoder()` loads the model on first use."""
        return None

    def merge_parts(self, state: MergeState) -> dict | None:
        """Copy the live rows of `state.sources` into `state.folder`; returns the part's entry
        (states.part_entry), None when the kind stores nothing per segment."""
        return None

    # -- reading ----------------------------------------------------------------------------
    def open(self, state: ReadState):
        """The kind's reader over every segment of a pinned generation: its files, no model."""
        raise NotImplementedError

    def query_side(self, comp: dict, encoder):
        """The kind's query side (components/query_side.py): what turns a query into the
        representation its readers score; `encoder()` loads the kind's query model (None: none).
        By default the text itself, which the reader's own `encode` (if any) turns into its terms."""
        from .query_side import Terms
        return Terms(self.name)

    def collection_stats(self, comp: dict) -> bool:
        """Whether the kind scores with statistics of the whole collection that a search over
        shards must sum (`collection_stats(query)` of each shard's retriever, then
        `with_collection_stats(rep, parts)` of the query side)."""
        return False

    # -- passages a hit shows (ldr/search/passages.py) -----------------------------------------
    def passage_analyzer(self, comp: dict) -> dict | None:
        """The analyzer (Analyzer.to_dict) term windows are matched with, for a lexical kind."""
        return None

    def passage_vectors(self, comp: dict) -> bool:
        """Whether the retriever's vectors are passages with character spans (`passage_scores`)."""
        return False

    # -- verification and description ---------------------------------------------------------
    def check_part(self, part: SegmentPart | None, comp: dict) -> list[str]:
        """Full verification of one segment's part (`ldr check`; None: the segment has none of this
        kind); problems, empty when sound."""
        return []

    def check_store(self, root: Path, comp: dict, manifest: dict, segments) -> list[str]:
        """Full verification of the index store against the generation's `segments` (Segments)."""
        return []

    def describe(self, comp: dict, segments: list[dict]) -> dict:
        """The component's entry for `ldr info`, with totals over the segments."""
        return dict(comp)

    def model_name(self, comp: dict) -> str | None:
        """The name of the model the kind's scores come from (None: no model). Scores read under
        one model mean nothing under another (the calibrated relevance checks it)."""
        model = comp.get("model")
        return str(model["name"]) if isinstance(model, dict) and model.get("name") else None

    def summary(self, comp: dict) -> list[str]:
        """Lines for `ldr info`."""
        return [", ".join(f"{k}={v}" for k, v in comp.items() if not isinstance(v, (dict, list)))]


def backend_label(model: dict) -> str:
    """The engine an encoder runs on, as `ldr info` shows it."""
    b = model.get("backend") or {"name": model.get("settings", {}).get("backend", "torch")}
    q = b.get("int8")
    return b["name"] + (f" ({q['isa']}, per-channel={q['per_channel']}, reduce-range={q['reduce_range']})" if q else "")


def model_lines(comp: dict, line: str) -> list[str]:
    """An encoder-backed kind's `ldr info` lines: its own, then where the model is loaded from (a
    manifest names it, the user decides whether to trust it)."""
    m = comp["model"]
    st = m.get("settings", {})
    return [line, f"model path {m.get('path') or st.get('model')}"
            + ("  [needs --trust-remote-code: the model ships its own code]" if st.get("trust_remote_code") else "")]


class ModelComponent(Component):
    """A kind with an encoder from ldr.encode (dense, sparse): its settings class and loader are
    named once, and the manifest's `model.settings` go through model_settings (which never takes
    trust_remote_code from an index)."""

    encoder_module: str = ""           # e.g. "ldr.encode.dense"
    settings_class: str = ""           # e.g. "DenseSettings"
    loader: str = ""                   # e.g. "load_dense"

    def _module(self):
        import importlib
        return importlib.import_module(self.encoder_module)

    def encoder_settings(self, comp, trust_remote_code, device, where):
        from ..encode.models import model_settings

        cls = getattr(self._module(), self.settings_class)
        return model_settings(comp, cls, trust_remote_code, device, f"{where} ({self.name})")

    def load_encoder(self, settings):
        return getattr(self._module(), self.loader)(settings)

    def settings_from_dict(self, d):
        return getattr(self._module(), self.settings_class)(**d) if d is not None else None

    config_field: str = ""             # the BuildConfig field holding its settings ("": components.NAME)

    def build_settings(self) -> list[tuple[str, type]]:
        return [(self.config_field or f"components.{self.name}", getattr(self._module(), self.settings_class))]


class EncodedPart:
    """A segment part written by an encoder-backed writer (ldr.encode.pipeline.BatchedWriter):
    its close() info split into the segment entry (`entry_keys`) and what the index learns
    (`about_keys`: dimension, vocabulary, the model's description)."""

    def __init__(self, writer, entry_keys: tuple, about_keys: tuple):
        self.writer, self.entry_keys, self.about_keys = writer, entry_keys, about_keys

    @property
    def tokens(self) -> int:
        return self.writer.tokens

    @property
    def encoded(self) -> int:
        return self.writer.encoded

    def add(self, row, doc):
        self.writer.add(row, doc)

    def close(self) -> Part:
        info = self.writer.close()
        return Part({k: info[k] for k in self.entry_keys if k in info}, {k: info[k] for k in self.about_keys if k in info})

    def abort(self):
        self.writer.abort()
