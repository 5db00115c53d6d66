"""Settings declared once: a dataclass field made with `setting(...)` carries what every interface
needs to offer it (the `ldr index` / `ldr add` / `ldr eval` flags, their help and choices), so a
new build setting on a kind is one field: the CLI flag, the Python keyword (the dataclass) and the
Ray workers (which receive the settings as they are) follow. Imports nothing from ldr."""
from __future__ import annotations

from dataclasses import MISSING, field


def setting(default=MISSING, *flags: str, help: str, choices=None, cli_default=MISSING, shared: bool = False,
            enables: bool = False, invert: bool = False, zero_none: bool = False, factory=None):
    """A dataclass field with its command-line form.

    flags: the option's names (the first long one is the flag users know); help: its help text
    (the default is appended from the field's default, never written by hand); choices: the
    values it takes; cli_default: the flag's default when it differs from the field's (e.g.
    `auto` resolved later); shared: one flag sets this field on every settings class that shares
    it (device, backend); enables: the value `none` turns the kind off; invert: a flag that sets
    the field to False (--no-stem); zero_none: 0 on the command line means None."""
    meta = {"cli": flags, "help": help, "choices": tuple(choices) if choices else None, "shared": shared,
            "enables": enables, "invert": invert, "zero_none": zero_none}
    if cli_default is not MISSING:
        meta["cli_default"] = cli_default
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def declared(cls) -> list:
    """The fields of a settings dataclass that carry a command-line form."""
    from dataclasses import fields

    return [f for f in fields(cls) if f.metadata.get("cli")]
