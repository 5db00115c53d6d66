"""Options shared by several commands (index settings, Ray, writers) and what they build."""
from __future__ import annotations

import click

from ..encode.chunking import STRATEGIES
from ..encode.runtime import BACKENDS


INDEX_OPTIONS = [
    click.option("--bm25", type=click.Choice(["tantivy", "lucene", "native", "none"]), default="tantivy",
                 show_default=True, help="BM25 backend: tantivy; lucene (pyserini); native (ldr's own index, any k1/b)."),
    click.option("--language", default="auto", show_default=True,
                 help="The corpus language (ISO code such as en, de, fr, ru, zh; cjk for CJK bigrams; none for no "
                      "stemming): the BM25 analyzer's, and for any language but English the `auto` models are "
                      "multilingual. auto: detected from the first documents."),
    click.option("--no-stem", is_flag=True, help="Do not stem terms."),
    click.option("--keep-stopwords", is_flag=True, help="Do not remove stop words."),
    click.option("--k1", type=float, default=None, help="BM25 k1 (default: the backend's)."),
    click.option("--b", "b", type=float, default=None, help="BM25 b (default: the backend's)."),
    click.option("--threads", type=int, default=0, help="Threads (0: all cores)."),
    click.option("--max-doc-mb", type=float, default=64.0, show_default=True,
                 help="Skip (and count) documents larger than this; raise it to index them (memory grows with it)."),
    click.option("--dense", "dense_model", default="auto", show_default=True,
                 help="Dense model: a packaged name, a Hugging Face name or a local folder; `none` for no dense index; "
                      "auto: all-MiniLM-L6-v2 for English, e5-small-multilingual (ldr[multilingual]) otherwise."),
    click.option("--doc-strategy", type=click.Choice(STRATEGIES), default="maxp", show_default=True,
                 help="How long documents are encoded."),
    click.option("--max-length", type=int, default=None, help="Tokens per pass (default: the model's)."),
    click.option("--stride", type=int, default=None, help="maxp: tokens between passage starts (default: max length)."),
    click.option("--target-length", type=int, default=None,
                 help="Extension strategies: tokens encoded in one pass (default: 4x the model's trained window)."),
    click.option("--ntk-lambda", type=float, default=None, help="ntk: rotary base scale λ (default by scale factor)."),
    click.option("--group", type=int, default=None, help="selfextend: group size g."),
    click.option("--window", type=int, default=None, help="selfextend: neighbour window w."),
    click.option("--attn-scaling", is_flag=True, help="Scale attention logits by log(n)/log(L_o) beyond the trained length."),
    click.option("--dim", type=int, default=None, help="Matryoshka: keep the first DIM dimensions."),
    click.option("--query-prefix", default=None, help="Text put before queries (default: the model's prompt)."),
    click.option("--doc-prefix", default=None, help="Text put before documents (default: the model's prompt)."),
    click.option("--batch-tokens", type=int, default=None,
                 help="Token budget per forward pass (default: 4096 on a CPU, 16384 on a GPU)."),
    click.option("--trust-remote-code", is_flag=True, help="Allow models that ship their own code."),
    click.option("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)."),
    click.option("--backend", type=click.Choice(list(BACKENDS)), default="auto",
                 show_default=True,
                 help="Engine for the dense and sparse models: auto is ONNX Runtime fp32 on a CPU (same vectors "
                      "as PyTorch), bf16 for the dense model on CPUs with AMX (vectors at cosine 0.9999 to "
                      "fp32), PyTorch on a GPU; onnx-int8 is faster with slightly different vectors (first "
                      "layer in fp32). Recorded in the index; queries use the same (bf16 indexes: fp32 queries)."),
    click.option("--faiss", "faiss_index", type=click.Choice(["auto", "flat", "hnsw", "ivfpq"]), default="auto",
                 show_default=True,
                 help="FAISS index type; auto: exact (flat) per segment up to 50,000 vectors, HNSW past that."),
    click.option("--sparse", "sparse_model", default="auto", show_default=True,
                 help="Learned-sparse model (packaged name, HF name or folder); `none` for no sparse index; "
                      "auto: splade-tiny for English, none otherwise (an English vocabulary)."),
    click.option("--sparse-kind", type=click.Choice(["splade", "head"]), default="splade", show_default=True,
                 help="splade: MLM head; head: linear term-weight head (mGTE/BGE-M3 style)."),
    click.option("--sparse-head", default=None, help="kind=head: the head weights (default MODEL/sparse_linear.pt)."),
    click.option("--sparse-top-k", type=int, default=256, show_default=True,
                 help="Keep the k heaviest terms of a document (0: all), see --sparse-top-k-per."),
    click.option("--sparse-top-k-per", type=click.Choice(["document", "window"]), default="document", show_default=True,
                 help="Apply --sparse-top-k per document, or per window of it (the cap grows with length)."),
    click.option("--sparse-threshold", type=float, default=0.0, help="Drop term weights at or below this."),
    click.option("--colbert", "colbert_model", default="none", show_default=True,
                 help="Late-interaction (ColBERT) model: colbert-small (packaged, ldr[models]), a Hugging Face "
                      "name or a folder; its token vectors are kept and scored by MaxSim. `none`: no colbert index."),
    click.option("--colbert-dims", type=int, default=128, show_default=True,
                 help="Keep the first N dimensions of each token vector (0: all)."),
    click.option("--colbert-pool", type=int, default=2, show_default=True,
                 help="Token pooling factor (1: every token vector; 2 halves storage and scoring)."),
]


def index_options(f):
    for opt in reversed(INDEX_OPTIONS):
        f = opt(f)
    return f


def build_config(bm25, language, no_stem, keep_stopwords, k1, b, threads, max_doc_mb, dense_model, doc_strategy, max_length,
                 stride, target_length, ntk_lambda, group, window, attn_scaling, dim, query_prefix, doc_prefix,
                 batch_tokens, trust_remote_code, device, backend, faiss_index, sparse_model, sparse_kind, sparse_head,
                 sparse_top_k, sparse_top_k_per, sparse_threshold, colbert_model="none", colbert_dims=None,
                 colbert_pool=2):
    from ..encode.dense import DenseSettings
    from ..encode.sparse import SparseSettings
    from ..index.build import BuildConfig
    from ..components.faiss_store import FaissSettings

    dense = None if dense_model == "none" else DenseSettings(
        model=dense_model, strategy=doc_strategy, max_length=max_length, stride=stride, target_length=target_length,
        ntk_lambda=ntk_lambda, group=group, window=window, attn_scaling=attn_scaling, dim=dim,
        query_prefix=query_prefix, doc_prefix=doc_prefix, batch_tokens=batch_tokens,
        trust_remote_code=trust_remote_code, device=device, backend=backend)
    sparse = None if sparse_model == "none" else SparseSettings(
        model=sparse_model, kind=sparse_kind, head=sparse_head, top_k=sparse_top_k or None, top_k_per=sparse_top_k_per,
        threshold=sparse_threshold, device=device, backend=backend)
    components = {}
    if colbert_model != "none":
        from ..encode.colbert import ColbertSettings
        components["colbert"] = ColbertSettings(model=colbert_model, dims=colbert_dims or None, pool_factor=colbert_pool,
                                                device=device)
    return BuildConfig(bm25=None if bm25 == "none" else bm25, language=language, stemming=not no_stem,
                       stopwords=not keep_stopwords, k1=k1, b=b, threads=threads, max_doc_mb=max_doc_mb,
                       dense=dense, sparse=sparse, faiss=FaissSettings(index=faiss_index), components=components)


RAY_OPTIONS = [
    click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                 help="Encode on a Ray cluster: ADDRESS as ray.init takes it (auto, ray://head:10001, host:6379); "
                      "without one, a local cluster on this machine. The index directory must be on storage "
                      "every node mounts at the same path. Needs ldr[ray]."),
    click.option("--ray-workers", type=int, default=None,
                 help="Encoder actors (default: one per GPU, else the cluster's CPUs / --ray-cpus-per-worker)."),
    click.option("--ray-cpus-per-worker", type=float, default=None,
                 help="CPUs per encoder actor (default: 1 with GPUs, else up to 4)."),
    click.option("--ray-shard-docs", type=int, default=None,
                 help="Documents per shard, each one segment (default: ~4 shards per worker, at most 1000)."),
]


def ray_options(f):
    for opt in reversed(RAY_OPTIONS):
        f = opt(f)
    return f


def make_ray_options(ray_address, ray_workers, ray_cpus_per_worker, ray_shard_docs):
    from ..index.ray_build import RayOptions
    given = [n for n, v in (("--ray-workers", ray_workers), ("--ray-cpus-per-worker", ray_cpus_per_worker),
                            ("--ray-shard-docs", ray_shard_docs)) if v is not None]
    if ray_address is None:
        if given:
            from ..errors import ConfigError
            raise ConfigError(f"{', '.join(given)} only apply with --ray")
        return None
    return RayOptions(address=None if ray_address == "local" else ray_address, workers=ray_workers,
                      cpus_per_worker=ray_cpus_per_worker, shard_docs=ray_shard_docs)


def _echo_ray(info: dict) -> None:
    if info:
        retried = f", shards retried: {info['retried']}" if info["retried"] else ""
        click.echo(f"encoded on Ray: {info['workers']} workers x {info['cpus_per_worker']:g} CPUs"
                   + (f" + {info['gpus_per_worker']:g} GPU" if info["gpus_per_worker"] else "")
                   + f" on {info['nodes']} node{'s' if info['nodes'] != 1 else ''}, {info['shards']} shards{retried}")


WRITE_OPTIONS = [
    click.option("-i", "--index", "index_path", required=True, type=click.Path(), help="Index directory."),
    click.option("--wait", is_flag=True, help="Wait for another writer of the index to finish instead of failing."),
    click.option("--trust-remote-code", is_flag=True, help="Allow the index's models to run code they ship."),
    click.option("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)."),
]


def write_options(f):
    for opt in reversed(WRITE_OPTIONS):
        f = opt(f)
    return f


