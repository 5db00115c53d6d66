from .build import BuildConfig, build_index
from .manifest import read_manifest, verify_files

__all__ = ["BuildConfig", "build_index", "read_manifest", "verify_files"]
