"""Code a user asks ldr to load: a module that registers a retriever kind
(`ldr.components.register`) or a plan stage (`ldr.search.stages.register_stage`). Named in the
environment (`LDR_PLUGINS=my_stages,my_kinds`: importable module names) or installed as a package's
entry point in the group `ldr.plugins`. Never read from an index: an index is data."""
from __future__ import annotations

import importlib
import logging
import os
from importlib.metadata import entry_points

from ..errors import ConfigError

log = logging.getLogger(__name__)
_LOADED: set[str] = set()


def load_plugins() -> list[str]:
    """Import every plugin module once; returns the names loaded now."""
    names = [n.strip() for n in os.environ.get("LDR_PLUGINS", "").split(",") if n.strip()]
    found = [(n, None) for n in names] + [(ep.value, ep) for ep in entry_points(group="ldr.plugins")]
    loaded = []
    for name, ep in found:
        if name in _LOADED:
            continue
        try:
            ep.load() if ep is not None else importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"the plugin {name!r} (LDR_PLUGINS or an ldr.plugins entry point) cannot be imported: "
                              f"{e}") from None
        _LOADED.add(name)
        loaded.append(name)
        log.info("plugin %s loaded", name)
    return loaded
