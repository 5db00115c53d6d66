"""Score and compare run files: `ldr eval --qrels QRELS --run A.trec --run B.trec`.

Every metric `ldr eval` reports (trec_eval semantics through pytrec_eval, ldr/eval/metrics.py),
per run, and for each run after the first, paired significance tests against the first over
the queries: Student's paired t-test (scipy) and a paired randomisation test (sign flips of the
per-query differences, seeded). With several runs compared, p-values are Holm-corrected per
metric and test; a difference is marked when the corrected p of both tests is below alpha.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .metrics import evaluate_per_query
from .runs import unescape_id

METRICS = ("ndcg@10", "recall@100", "mrr@10", "map", "acc@1")


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """TREC qrels (`qid 0 docid rel`) or a BEIR qrels TSV (`query-id corpus-id score`, header)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"--qrels takes a file (TREC qrels or a BEIR qrels .tsv), got the folder {p}")
    out: dict[str, dict[str, int]] = {}
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read qrels {p}: {e}") from None
    seen: dict = {}
    for n, line in enumerate(lines, 1):
        tsv = "\t" in line
        parts = line.split("\t") if tsv else line.split()   # a BEIR TSV id may hold spaces
        if not parts or not line.strip():
            continue
        if n == 1 and not _number(parts[-1]):
            continue                                  # a header (`query-id corpus-id score`)
        if len(parts) == 4:
            q, _, d, r = parts
        elif len(parts) == 3:
            q, d, r = parts
        else:
            raise ConfigError(f"{p} line {n}: expected `qid 0 docid relevance` or `qid docid relevance`")
        if not tsv:                                   # TREC columns: ids as ldr's runs escape them
            q, d = unescape_id(q), unescape_id(d)
        if not _number(r):
            raise ConfigError(f"{p} line {n}: relevance {r!r} is not a number")
        if (q, d) in seen:
            raise ConfigError(f"{p} line {n}: query {q!r} judges document {d!r} again (first on line "
                              f"{seen[(q, d)]}); keep one judgement per pair")
        seen[(q, d)] = n
        out.setdefault(q, {})[d] = int(float(r))
    if not out:
        raise ConfigError(f"{p} holds no judgements")
    return out


def _number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def randomisation_p(diff: np.ndarray, n: int = 10000, seed: int = 0) -> float:
    """Two-sided paired randomisation test: how often random sign flips of the per-query
    differences give a mean at least as far from 0 as the observed one."""
    if not len(diff) or not np.any(diff):
        return 1.0
    rng = np.random.default_rng(seed)
    observed = abs(diff.mean())
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n, len(diff)))
    means = np.abs((signs * diff).mean(axis=1))
    return float((np.sum(means >= observed - 1e-12) + 1) / (n + 1))


def t_test_p(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import ttest_rel

    if not np.any(a != b):
        return 1.0
    p = float(ttest_rel(a, b).pvalue)
    return 1.0 if math.isnan(p) else p


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down correction (family-wise error), in the input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def compare(qrels: dict, runs: dict[str, dict], metrics=METRICS, alpha: float = 0.05, permutations: int = 10000,
            seed: int = 0) -> dict:
    """{"queries", "runs": {name: {metric: mean}}, "tests": {name: {metric: {...}}}, "per_query"}."""
    if not runs:
        raise ConfigError("give at least one --run")
    per_query = {name: evaluate_per_query(qrels, run, metrics) for name, run in runs.items()}
    names = list(runs)
    qids = sorted(per_query[names[0]])
    if not qids:
        raise ConfigError("no query in the qrels has a relevant document")
    table = {name: {m: float(np.mean([per_query[name][q][m] for q in qids])) for m in metrics} for name in names}
    tests: dict = {name: {} for name in names[1:]}
    base = names[0]
    for m in metrics:
        a = np.array([per_query[base][q][m] for q in qids])
        raw_t, raw_r = [], []
        for name in names[1:]:
            b = np.array([per_query[name][q][m] for q in qids])
            raw_t.append(t_test_p(b, a))
            raw_r.append(randomisation_p(b - a, permutations, seed))
        cor_t, cor_r = holm(raw_t), holm(raw_r)
        for i, name in enumerate(names[1:]):
            tests[name][m] = {"delta": table[name][m] - table[base][m], "p_t": raw_t[i], "p_randomisation": raw_r[i],
                              "p_t_holm": cor_t[i], "p_randomisation_holm": cor_r[i],
                              "significant": bool(cor_t[i] < alpha and cor_r[i] < alpha)}
    return {"queries": len(qids), "baseline": base, "alpha": alpha, "metrics": list(metrics), "runs": table,
            "tests": tests, "per_query": {n: {q: per_query[n][q] for q in qids} for n in names}}


def format_table(result: dict) -> str:
    """A plain-text table: one row per run, a † where it differs significantly from the first."""
    ms = result["metrics"]
    width = max(12, *(len(n) for n in result["runs"]))
    lines = [f"{result['queries']} queries; † significant against {result['baseline']} "
             f"(paired t-test and randomisation test, Holm-corrected, alpha {result['alpha']})",
             f"{'run':<{width}}" + "".join(f"{m:>13}" for m in ms)]
    for name, vals in result["runs"].items():
        t = result["tests"].get(name, {})
        cells = [f"{100 * vals[m]:.2f}{'†' if t.get(m, {}).get('significant') else ' '}" for m in ms]
        lines.append(f"{name:<{width}}" + "".join(f"{c:>13}" for c in cells))
    for name, t in result["tests"].items():
        lines.append(f"  {name} vs {result['baseline']}: " + ", ".join(
            f"{m} {100 * t[m]['delta']:+.2f} (p {t[m]['p_t_holm']:.3g} / {t[m]['p_randomisation_holm']:.3g})" for m in ms))
    return "\n".join(lines)


def plot_differences(result: dict, metric: str, out: Path) -> None:
    """Per-query differences of each run against the first, sorted: where a run wins and loses."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = result["baseline"]
    others = [n for n in result["runs"] if n != base]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name in others:
        d = sorted(result["per_query"][name][q][metric] - result["per_query"][base][q][metric]
                   for q in result["per_query"][base])
        ax.plot(range(len(d)), [100 * x for x in d], label=f"{name} − {base}")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("queries, sorted by difference")
    ax.set_ylabel(f"Δ {metric} (points)")
    ax.set_title(f"per-query {metric} differences against {base}")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
