"""A process that encodes a corpus (`ldr index`, `ldr add`) sets libgomp's wait before torch
loads (encode/omp_wait.py), and never overrides a user's setting or a torch already loaded."""
import json
import os
import subprocess
import sys

from ldr.encode.omp_wait import SETTINGS

_PROBE = """
import json, os, sys
{before}
from ldr.encode.omp_wait import spin_before_sleeping
did = spin_before_sleeping()
print(json.dumps({{"did": did, "env": {{k: os.environ.get(k) for k in {keys!r}}}}}))
"""


def _probe(before: str = "", **env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(before=before, keys=list(SETTINGS))],
                         env={**clean, **env}, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_it_sets_both_before_torch_and_leaves_a_users_choice_alone():
    assert _probe() == {"did": True, "env": SETTINGS}
    assert _probe(OMP_WAIT_POLICY="PASSIVE") == {"did": False, "env": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}}
    assert _probe(GOMP_SPINCOUNT="0")["env"] == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "0"}
    # libgomp read its settings when torch loaded: too late to change them, so nothing is set
    assert _probe("import torch") == {"did": False, "env": {k: None for k in SETTINGS}}


def test_ldr_index_and_add_set_it_before_torch_loads(tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text("a meeting about the remote control and its battery", encoding="utf-8")
    script = f"""
import os, sys
from ldr.cli import main
seen = []
import ldr.encode.omp_wait as w
real = w.spin_before_sleeping
w.spin_before_sleeping = lambda: seen.append(("torch" in sys.modules, real())) or True
for args in (["index", {str(corpus)!r}, "-o", {str(tmp_path / "idx")!r}, "-q", "--dense", "none", "--sparse", "none"],
             ["add", {str(corpus)!r}, "-i", {str(tmp_path / "idx")!r}]):
    try:
        main(args)
    except SystemExit as e:
        assert not e.code, e.code
print(seen, os.environ.get("OMP_WAIT_POLICY"))
"""
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    out = subprocess.run([sys.executable, "-c", script], env=clean, capture_output=True, text=True, check=True)
    # the index command set it (torch not loaded); add, in the same process, found it set
    assert out.stdout.strip().splitlines()[-1] == "[(False, True), (False, False)] ACTIVE"
    # `ldr eval` builds its indexes too
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"remote control {i} battery"}) + "\n"
                                               for i in range(3)), encoding="utf-8")
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "battery"}) + "\n", encoding="utf-8")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    script = script.split("for args in")[0] + f"""
try:
    main(["eval", "--bench", "beir", "--data", {str(data)!r}, "--out", {str(tmp_path / "ev")!r},
          "--dense", "none", "--sparse", "none"])
except SystemExit as e:
    assert not e.code, e.code
print(seen, os.environ.get("OMP_WAIT_POLICY"))
"""
    out = subprocess.run([sys.executable, "-c", script], env=clean, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[(False, True)] ACTIVE"


def test_a_pipelines_encoder_loads_on_the_worker_that_runs_it():
    """One OpenMP team: the model is loaded on the thread that runs it (encode/pipeline.py)."""
    import threading

    from ldr.encode.pipeline import BatchedWriter, Pipeline

    where = {}

    class Writer(BatchedWriter):
        def _prepare_batch(self, docnos, texts, body_starts):
            return self.encoder(texts)          # the loader runs at the first batch

        def _write_prepared(self, prepared):
            where["ran"] = threading.current_thread().name

    def load():
        where["loaded"] = threading.current_thread().name
        return lambda texts: texts

    from ldr.corpus import Doc

    def on_a_pipeline(cls):
        where.clear()
        pipe = Pipeline()
        w = cls(docs_per_batch=1, pipeline=pipe, encoder=load)
        w.add(0, Doc(id="a", text="some text"))
        w._finish()
        pipe.close()
        return where["loaded"] == where["ran"] and where["loaded"].startswith("ldr-encode")

    assert on_a_pipeline(Writer)

    # a writer that first asks for its encoder on the worker gets it there (no wait for itself)
    class Late(Writer):
        def _prepare_batch(self, docnos, texts, body_starts):
            return texts

        def _write_prepared(self, prepared):
            self.encoder(prepared)
            where["ran"] = threading.current_thread().name

    assert on_a_pipeline(Late)
    # without a pipeline, on the caller's thread as before
    where.clear()
    Writer(docs_per_batch=1, encoder=load).add(0, Doc(id="b", text="more"))
    assert where["loaded"] == where["ran"] == threading.current_thread().name

