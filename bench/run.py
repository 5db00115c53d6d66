"""The maintained benchmarks behind one entry point. Each compares ldr with its peer (or with
itself before a change) in the same run on the same data; bench/README.md holds today's figures
with the command that gave each. One-off sweeps that chose a default live in bench/sweeps/ (their
findings: docs/findings.md).

    python bench/run.py                      # the groups and their benchmarks
    python bench/run.py speed                # one group's benchmarks, with what each measures
    python bench/run.py run_speed -- ARGS    # run one (bench/bench_run_speed.py ARGS)
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# group → (name, script, what it measures)
GROUPS: dict[str, list[tuple[str, str, str]]] = {
    "speed": [
        ("run_speed", "bench_run_speed.py", "a --mode bm25 run through search_many against bm25s, top 10 and 1,000"),
        ("bm25", "bench_bm25.py", "BM25 backends against pyserini and bm25s: index time, peak RSS, q/s, nDCG@10"),
        ("pipeline", "bench_pipeline.py", "warm latency per stage on a real index; cold `ldr search`"),
        ("query_encoders", "bench_query_encoders.py", "the query encoders in a warm default search: the sparse query over the index's terms or the whole vocabulary, paired"),
        ("encode", "bench_encode.py", "encoding tokens/s per engine against sentence-transformers, share of GEMM peak"),
        ("index_vs_st", "bench_index_vs_st.py", "`ldr index` (dense only), the whole command, against sentence-transformers on the same passages"),
        ("build", "bench_build.py", "`ldr index` time and peak RSS at 1x/4x/16x; --compare REF: a commit against this one"),
        ("serve", "bench_serve.py", "`ldr serve` under 8 clients for 60 s, then with a commit every 5 s"),
        ("ray_serve", "bench_ray_serve.py", "`ldr serve --ray` throughput for 1/2/4 shards x 1/2 replicas"),
        ("serve_ray_start", "bench_serve_ray_start.py", "seconds from `ldr serve --ray` to its first answer"),
        ("colbert", "bench_colbert.py", "the colbert kind: build tokens/s, bytes per token, query latency per stage"),
    ],
    "memory": [
        ("memory", "bench_memory.py", "peak RSS of `ldr index`: one 200 MB file against 20k files"),
        ("bounds", "bench_bounds.py", "a server's RSS under 2,000 distinct filters and add-search-delete rounds"),
        ("replica_memory", "bench_replica_memory.py", "a shard replica's RSS, imports and models while it answers"),
        ("coordinator", "bench_coordinator.py", "what a coordinator holds at N documents in S shards; bytes a query"),
        ("train_memory", "bench_train_memory.py", "peak memory of `ldr train reranker` with and without mini-batches"),
        ("slow_bodies", "bench_slow_bodies.py", "a server's memory while clients withhold the end of 32 MB bodies"),
        ("ingest_worker", "bench_ingest_worker.py", "the bounded parsing worker's cost per file; a hostile folder"),
    ],
    "quality": [
        ("passages", "bench_passages.py", "does a hit's best passage hold the answer (needle per length, qmsum-train)"),
        ("multilingual", "bench_multilingual.py", "multilingual-e5-small on ldr's engines against sentence-transformers"),
        ("train_cv", "bench_train_cv.py", "cross-validated `ldr tune` / `ldr train` on a BEIR folder"),
        ("relevance_labels", "bench_relevance_labels.py",
         "`ldr tune --relevance` on 10/20/40/80 judged queries: held-out ECE, precision at its min_score"),
        ("relevance_small", "bench_relevance_small.py",
         "the shipped relevance on random sub-corpora of 1-40 documents: answered and unanswered queries"),
        ("adapt_from_corpus", "bench_adapt_from_corpus.py",
         "`ldr train dense --from-corpus` (no labels): dense leg and default search before and after"),
        ("sharded", "bench_sharded.py", "a resharded default index: same top 10 in every mode, nDCG@10, time a query"),
        ("documents", "bench_documents.py", "PDF text: pypdf against pdfminer.six on real documents"),
    ],
    "scale": [
        ("scale", "bench_scale.py", "a real index of 10k/100k/1M synthetic documents: cold and warm search, RSS"),
        ("compressed", "bench_compressed.py", "compressed passage vectors: bytes, recall, speed at up to 1M documents"),
        ("grow", "bench_grow.py", "adding 1% to an HNSW index against building it again"),
        ("faiss_auto", "bench_faiss_auto.py", "HNSW against flat over a real index's passage vectors"),
        ("living", "bench_living.py", "add 1% against a rebuild, merge cost, latency over 50/10/1 segments"),
        ("sparse", "bench_sparse.py", "the learned-sparse inverted index against scipy at 10k/100k/1M"),
        ("open", "bench_open.py", "opening an index of a million documents"),
        ("ray", "bench_ray.py", "`ldr index --ray` against a local build"),
        ("replica", "bench_replica.py", "`ldr replicate` after a small add copies only that commit's files"),
        ("replica_restart", "bench_replica_restart.py", "a killed Ray Serve replica: seconds until answers are whole"),
    ],
    "reliability": [
        ("attack", "attack.py", "the hardening list against the real CLI: hostile files, paths, damaged indexes"),
        ("ray_point_in_time", "stress_ray_point_in_time.py",
         "searches on Ray Serve beside a writer: every answer checked against its generation"),
    ],
    "fit": [
        ("fit_calibration", "fit_calibration.py", "fits the calibrated relevance across datasets (--write: shipped)"),
        ("fit_own_calibration", "fit_own_calibration.py", "fits the first relevance estimate on one BEIR folder"),
        ("language_defaults", "language_defaults.py", "chooses each language's search defaults by cross-validation"),
        ("calibration_sets", "make_calibration_sets.py", "makes the man page sets the relevance is checked on"),
    ],
    "gpu": [
        ("gpu_smoke", "gpu_smoke.py", "ldr's GPU paths end to end on a lent GPU machine"),
        ("encode_gpu", "bench_encode_gpu.py", "encoding on a GPU against the CPU engines"),
    ],
    "structure": [
        ("architecture", "architecture.py", "imports against the layer table, cycles, kind branches, largest modules"),
    ],
}


def main(argv: list[str]) -> int:
    names = {name: (script, what) for group in GROUPS.values() for name, script, what in group}
    if not argv:
        for group, items in GROUPS.items():
            print(f"{group:12} {', '.join(name for name, _, _ in items)}")
        print("\npython bench/run.py GROUP (what each measures) | NAME -- ARGS (run it)")
        return 0
    if argv[0] in GROUPS:
        for name, script, what in GROUPS[argv[0]]:
            print(f"{name:20} bench/{script:28} {what}")
        return 0
    if argv[0] not in names:
        print(f"no benchmark or group {argv[0]!r}; `python bench/run.py` lists them", file=sys.stderr)
        return 2
    script = HERE / names[argv[0]][0]
    args = argv[2:] if argv[1:2] == ["--"] else argv[1:]
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(HERE))
    runpy.run_path(str(script), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
