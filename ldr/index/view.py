"""One pinned, verified generation of an index: what a reader answers from until it refreshes.
Opening checks the manifest's own checksum, that every path stays inside the directory, every
file's size and the SHA-256 of small files (all files with `full=True`), and pins the generation
so the writer's garbage collection keeps its files."""
from __future__ import annotations

from pathlib import Path

from ..errors import IndexFormatError
from . import generations as gens
from .manifest import read_manifest, verify_files
from .snapshot import Segments


class View:
    """A generation's manifest, its docstore segments and the retrievers loaded for it."""

    def __init__(self, manifest: dict, segments: Segments, pin):
        self.manifest, self.segments, self.pin = manifest, segments, pin
        self.retrievers: dict = {}

    @property
    def generation(self) -> int:
        return self.manifest["generation"]

    @property
    def components(self) -> dict:
        return self.manifest["components"]

    def close(self) -> None:
        if self.pin is not None:
            self.pin.close()

    def __del__(self):
        if self.pin is not None:
            self.pin.__del__()      # quiet at interpreter exit


def pin_manifest(path: Path, generation: int | None = None) -> tuple[dict, object]:
    """(the manifest of the newest committed generation, or `generation`; a Pin on it): pinned
    before it is read, so a writer's garbage collection keeps its files. A generation collected
    between listing and pinning makes it take the newer one. Raises IndexFormatError."""
    for _ in range(20):
        found = gens.generations(path) if path.is_dir() else []
        gen = generation if generation is not None else (found[-1] if found else None)
        pin = gens.Pin(path, gen) if gen is not None else None
        try:
            return read_manifest(path, gen), pin
        except IndexFormatError:
            if pin is not None:
                pin.close()
            if generation is None and gen is not None and gens.generations(path)[-1:] != [gen]:
                continue
            raise
    raise IndexFormatError(f"{path} changed too quickly to be opened; try again")


def open_view(path: Path, generation: int | None = None, full: bool = False) -> View:
    """The newest committed generation of `path` (or `generation`), pinned and checked."""
    manifest, pin = pin_manifest(path, generation)
    try:
        verify_files(path, manifest, full=full)
        return View(manifest, Segments(path, manifest), pin)
    except BaseException:
        if pin is not None:
            pin.close()
        raise


def newest(path: Path) -> int | None:
    found = gens.generations(path)
    return found[-1] if found else None


def holds_index(path: Path) -> bool:
    """Whether `path` holds a readable ldr index (a damaged or foreign one is for the writer's own
    checks to refuse, naming what it found)."""
    from .manifest import read_manifest

    try:
        return Path(path).is_dir() and bool(read_manifest(Path(path)))
    except IndexFormatError:
        return False
