"""Ray in processes of their own, as users start it: `ldr index --ray` from a folder holding another
`ldr`, without the extra, and Ray joined beside the Lucene backend's JVM, each on the Ray modules'
shared local cluster (conftest). (The builds in this process are in test_ray.py.)"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import ldr
from ldr.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_ray_options_without_ray_flag_and_without_the_extra(tmp_path, sample_corpus):
    r = CliRunner().invoke(main, ["index", str(sample_corpus), "-o", str(tmp_path / "i"), "--ray-workers", "2"])
    assert r.exit_code != 0 and "--ray-workers only apply with --ray" in r.output
    # a real interpreter where `import ray` fails: a clear error naming the extra, no traceback
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(textwrap.dedent("""
        import builtins
        _real = builtins.__import__
        def _imp(name, *a, **k):
            if name == "ray" or name.startswith("ray."):
                raise ImportError("No module named 'ray'")
            return _real(name, *a, **k)
        builtins.__import__ = _imp
    """))
    env = {**os.environ, "PYTHONPATH": str(shim)}
    p = subprocess.run([sys.executable, "-m", "ldr.cli", "index", str(sample_corpus), "-o", str(tmp_path / "j"), "--ray",
                        "-q", "--dense", "none", "--sparse", "none"], capture_output=True, text=True, env=env)
    assert p.returncode != 0
    assert "pip install 'ldr[ray]'" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "j").exists()


def test_workers_import_the_drivers_ldr_whatever_folder_it_runs_from(tmp_path, ray_cluster):
    """Ray puts the driver's working directory first on each worker's sys.path: run from a folder
    holding another `ldr` (an old clone), the workers must still import the driver's package."""
    (tmp_path / "ldr").mkdir()
    (tmp_path / "ldr" / "__init__.py").write_text("raise ImportError('the decoy ldr was imported')\n")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"d{i}.txt").write_text(f"document {i} about herons")
    script = Path(sys.executable).parent / "ldr"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    r = subprocess.run([str(script), "index", "corpus", "-o", "idx", "--dense", "none", "--sparse", "none", "--ray",
                        ray_cluster],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "decoy" not in r.stderr and len(ldr.open(tmp_path / "idx")) == 3


def test_ray_in_the_same_process_as_lucene_keeps_the_jvm_alive(tmp_path, ray_cluster):
    """Ray's init and shutdown replace the fault handlers the JVM runs on (its compiled code faults on
    purpose): the next Lucene call used to kill the process (exit 139) when a safepoint fell in it. Run as
    a user would, in a child; that each Lucene call puts the JVM's handlers back is checked outright."""
    pytest.importorskip("pyserini")
    script = textwrap.dedent(f"""
        import logging, ray, ldr
        from ldr import crash_signals
        docs = [{{"id": f"d{{i}}", "text": " ".join(["heron marsh reed tide"] * 50) + f" w{{i}}"}} for i in range(300)]
        ldr.Index.build(docs, {str(tmp_path / 'a')!r}, bm25="lucene", dense=None, sparse=None)
        ray.init(address={ray_cluster!r}, log_to_driver=False, logging_level=logging.ERROR)   # joining replaces them too
        ray.shutdown()
        print("replaced", not crash_signals.jvm_handlers_intact())
        idx = ldr.Index.build(docs, {str(tmp_path / 'b')!r}, bm25="lucene", dense=None, sparse=None)
        print("intact", crash_signals.jvm_handlers_intact(), idx.search("w7 heron", k=1, window_weight=0)[0].id)
        import sys
        print("torch", "torch" in sys.modules)   # pyserini's searcher without its neural encoders' imports
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "replaced True" in r.stdout and "intact True d7" in r.stdout and "torch False" in r.stdout


def test_workers_and_replicas_get_ldrs_settings_but_never_the_api_key(tmp_path, ray_cluster):
    """ray_session.join, the one way a build and `ldr serve --ray` join Ray: the workers see ldr's
    variables (LDR_THREADS, the export cache), start in the package's folder, and never get the
    server's API key (Ray keeps a job's runtime_env where the cluster's users read it)."""
    script = textwrap.dedent(f"""
        import os, ray, ldr
        from ldr import ray_session
        assert ray_session.join({ray_cluster!r}) is True and ray_session.join({ray_cluster!r}) is False
        seen = ray.get(ray.remote(lambda: (os.environ.get("LDR_THREADS"), os.environ.get("LDR_API_KEY"),
                                           ldr.__file__)).remote())
        ray.shutdown()
        print("seen", seen, os.getcwd())
    """)
    env = {**os.environ, "LDR_THREADS": "3", "LDR_API_KEY": "s3cret"}
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"('3', None, '{ldr.__file__}') {tmp_path}" in r.stdout, r.stdout
