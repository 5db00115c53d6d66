"""Where a writer's commits live when it is not a folder of this machine: a URI that pyarrow's
filesystems resolve (s3://, gs://, abfs://, hdfs://, file://) or, when fsspec is installed, any
fsspec URI. Replication (replica.py) reads commits from it and publishes commits to it; nothing
else of ldr opens an index through it (a replica serves its own local copy).

Object stores have no rename and no lock, so the order of writes is the commit protocol: every
immutable file first, each shard's manifest after its files, the cluster manifest last. A
reader copies a manifest's files only after reading the manifest, and refuses any file whose
SHA-256 is not the manifest's (index/replica.py)."""
from __future__ import annotations

from ..errors import ConfigError, IndexFormatError


def is_uri(location) -> bool:
    """A URI (scheme://...), not a local path; a Windows drive (C:\\) is a path."""
    s = str(location)
    head, sep, _ = s.partition("://")
    return bool(sep) and len(head) > 1 and head.replace("+", "").replace("-", "").isalnum()


class Remote:
    """A folder of a pyarrow filesystem named by a URI: list, read, copy in, copy out. Streams are
    opened with compression=None: pyarrow would otherwise (de)compress a `.zst` file on the way."""

    def __init__(self, uri: str):
        import pyarrow.fs as pafs

        self.uri = uri.rstrip("/")
        try:
            self.fs, self.base = pafs.FileSystem.from_uri(self.uri)
        except Exception as e:              # pyarrow: unknown scheme, missing credentials, no network
            self.fs, self.base = _fsspec(self.uri, e)
        self.base = self.base.rstrip("/")
        self._pafs = pafs

    def _path(self, rel: str = "") -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def name(self, rel: str = "") -> str:
        return f"{self.uri}/{rel}" if rel else self.uri

    def names(self, rel: str = "") -> list[str]:
        """The file names directly in the folder `rel` ([] when it does not exist)."""
        try:
            infos = self.fs.get_file_info(self._pafs.FileSelector(self._path(rel), allow_not_found=True))
        except OSError as e:
            raise IndexFormatError(f"cannot list {self.name(rel)}: {e}") from None
        return [i.base_name for i in infos if i.type == self._pafs.FileType.File]

    def size(self, rel: str) -> int | None:
        info = self.fs.get_file_info(self._path(rel))
        return None if info.type == self._pafs.FileType.NotFound else info.size

    def read_text(self, rel: str, limit: int = 64 << 20) -> str:
        """A small file's text (a manifest); larger than `limit` is not one of ldr's."""
        try:
            with self.fs.open_input_stream(self._path(rel), compression=None) as f:
                data = f.read(limit + 1)
        except FileNotFoundError:
            raise IndexFormatError(f"{self.name(rel)} does not exist (any more)") from None
        except OSError as e:
            raise IndexFormatError(f"cannot read {self.name(rel)}: {e}") from None
        if len(data) > limit:
            raise IndexFormatError(f"{self.name(rel)} is over {limit} bytes: not an ldr manifest")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise IndexFormatError(f"{self.name(rel)} is not UTF-8 text: not an ldr manifest") from None

    def open(self, rel: str):
        """A binary stream of the file `rel` (read(n) until b"")."""
        try:
            return self.fs.open_input_stream(self._path(rel), compression=None)
        except FileNotFoundError:
            raise IndexFormatError(f"{self.name(rel)} is gone from the source: its writer collected that commit "
                                   "while it was copied; run the copy again (it takes the newest commit)") from None

    def put(self, local, rel: str, chunk: int = 1 << 20) -> None:
        """The local file `local` written as `rel` (an object store makes it visible whole, on close)."""
        parent = self._path(rel).rpartition("/")[0]
        if parent:
            self.fs.create_dir(parent, recursive=True)
        with open(local, "rb") as fin, self.fs.open_output_stream(self._path(rel), compression=None) as fout:
            while data := fin.read(chunk):
                fout.write(data)


def _fsspec(uri: str, why: Exception):
    """fsspec's filesystem for `uri` behind pyarrow's interface, or a clear error."""
    try:
        import fsspec
        import pyarrow.fs as pafs
    except ImportError:
        raise ConfigError(f"cannot open {uri}: {why} (pyarrow resolves s3://, gs://, abfs://, hdfs:// and "
                          "file://; `pip install fsspec` and its backend for other schemes)") from None
    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError, OSError) as e:
        raise ConfigError(f"cannot open {uri}: {e}") from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path
