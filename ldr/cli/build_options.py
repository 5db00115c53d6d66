"""The build flags of `ldr index`, `ldr add` and `ldr eval`, generated from the settings each part
declares with ldr.schema.setting: BuildConfig's own fields (BM25, language, threads, ...), then
each registered kind's settings classes (`Component.build_settings`), in registry order. A field
shared by several classes (device, backend) is one flag that sets all of them. Nothing here
names a kind."""
from __future__ import annotations

import dataclasses
import typing

import click

from .. import components as registry
from ..index.build import BuildConfig
from ..schema import declared


def _dest(target: str, name: str) -> str:
    """The flag's parameter name: `dense_model`, `faiss_index`, `colbert_pool_factor`, `k1`."""
    return f"{target.split('.')[-1]}_{name}" if target else name


def sources() -> list[tuple[str, type]]:
    """(BuildConfig target, settings class) of every declared setting, BuildConfig's first."""
    out = [("", BuildConfig)]
    for _, kind in registry.kinds(registry.names()):
        out += kind.build_settings()
    return out


def _click_type(cls, f):
    hint = typing.get_type_hints(cls).get(f.name)
    base = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if f.metadata.get("choices"):
        return click.Choice(list(f.metadata["choices"]))
    return {int: int, float: float}.get(base[0])


def options() -> list[click.Option]:
    """One click option per declared setting (a shared one once), of the kinds registered now."""
    out, seen = [], set()
    for target, cls in sources():
        for f in declared(cls):
            m = f.metadata
            dest = f.name if m["shared"] else _dest(target, f.name)
            if dest in seen:
                continue
            seen.add(dest)
            default = m.get("cli_default", f.default if f.default is not dataclasses.MISSING else None)
            if m["invert"] or isinstance(f.default, bool):
                out.append(click.Option([*m["cli"], dest], is_flag=True, help=m["help"]))
                continue
            out.append(click.Option([*m["cli"], dest], type=_click_type(cls, f), default=default,
                                    show_default=default is not None, help=m["help"]))
    return out


class BuildCommand(click.Command):
    """A command taking the build flags, generated each time it parses or shows help: a kind
    registered after ldr's own (a plugin, a test) brings its flags with it."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        names = {p.name for p in params}
        # what most users set first (output, the components), then how to run it; Ray's last
        ray = [p for p in params[:-1] if (p.name or "").startswith("ray")]
        own = [p for p in params[:-1] if p not in ray]
        return own + [o for o in options() if o.name not in names] + ray + params[-1:]   # --help stays last


def build_config(**values) -> BuildConfig:
    """The BuildConfig the flags describe: each settings class built from its flags' values
    (unset flags keep the class's defaults), None where its `enables` flag says `none`."""
    top, parts = {}, {}
    for target, cls in sources():
        given, off = {}, None
        for f in declared(cls):
            m = f.metadata
            dest = f.name if m["shared"] else _dest(target, f.name)
            if dest not in values:
                continue
            v = values[dest]
            if m["invert"]:
                v = not v if v else None          # the flag given: False; absent: the default
            elif isinstance(f.default, bool):
                v = True if v else None
            if v is None:
                continue
            if m["enables"] and v == "none":
                off = f.name
                continue
            given[f.name] = None if m["zero_none"] and v == 0 else v
        if not target:
            top.update(given)
            if off:
                top[off] = None           # BuildConfig's own part turned off (its BM25 backend `none`)
        else:
            parts[target] = None if off else cls(**{**_cli_defaults(cls), **given})
    components = {t.split(".", 1)[1]: s for t, s in parts.items() if t.startswith("components.") and s is not None}
    fields = {t: s for t, s in parts.items() if not t.startswith("components.")}
    return BuildConfig(**top, **fields, components=components)


def _cli_defaults(cls) -> dict:
    """The values a flag's `cli_default` stands for (e.g. a model left at `auto`)."""
    return {f.name: f.metadata["cli_default"] for f in declared(cls)
            if "cli_default" in f.metadata and f.metadata["cli_default"] != "none"}


def models(values: dict) -> list[str]:
    """The model (or backend) each part is asked to use: the values of the `enables` flags."""
    out = []
    for target, cls in sources():
        for f in declared(cls):
            dest = f.name if f.metadata["shared"] else _dest(target, f.name)
            if f.metadata["enables"] and values.get(dest) not in (None, "none"):
                out.append(values[dest])
    return out


def given(values: dict) -> dict:
    """The build flags set to something (for a report of what was built)."""
    return {k: v for k, v in values.items() if v is not None and v is not False}
