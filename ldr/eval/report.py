"""metrics.json aggregation (benchmark definitions), report.md and PNG plots."""
from __future__ import annotations

import json

from pathlib import Path

import numpy as np

from .published import PUBLISHED

from ..stages import Stage


def stage_order() -> tuple[str, ...]:
    """Every retriever kind, then the fused list, the window stage's, any registered stage's and
    the reranked one."""
    from .. import components as registry
    from ..search.stages import registered
    from ..stages import Stage

    return registry.names() + (Stage.FUSED.value, Stage.WINDOWS.value, *registered(), Stage.RERANKED.value)




def aggregate(bench: str, per_task: dict) -> dict:
    tasks: dict = {}
    for name, r in per_task.items():
        group = r.get("group")
        if group:
            g = tasks.setdefault(group, {"per_length": {}, "stages": {}, "analyzer": r.get("analyzer")})
            g["per_length"][str(r["length"])] = r["stages"]
        else:
            tasks[name] = {"stages": r["stages"], "analyzer": r.get("analyzer")}
    for name, t in tasks.items():
        if "per_length" in t:
            stages = set().union(*[set(s) for s in t["per_length"].values()])
            for st in stages:
                vals = {m: float(np.mean([pl[st][m] for pl in t["per_length"].values() if st in pl]))
                        for m in ("acc@1", "ndcg@10", "recall@100", "mrr@10")}
                t["stages"][st] = {m: round(v, 2) for m, v in vals.items()}
            t["main_metric"] = "acc@1"       # LongEmbed scores passkey/needle by Acc@1 over lengths
        else:
            t["main_metric"] = "ndcg@10"
    stages = [s for s in stage_order() if any(s in t["stages"] for t in tasks.values())]
    averages = {}
    for st in stages:
        vals = [t["stages"][st][t["main_metric"]] for t in tasks.values() if st in t["stages"]]
        averages[st] = round(float(np.mean(vals)), 2) if vals else None
    return {"bench": bench, "tasks": tasks, "averages": averages, "raw": per_task}


def _published_for(bench: str, task: str) -> str:
    pub = PUBLISHED.get(bench, {}).get(task, {})
    return "; ".join(f"{k} {v}" for k, v in pub.items())


def write_report(metrics: dict, out: Path) -> None:
    bench, tasks = metrics["bench"], metrics["tasks"]
    stages = [s for s in stage_order() if s in metrics["averages"]]
    s = metrics.get("settings", {})
    lines = [f"# ldr eval — {bench}", ""]
    partial = s.get("partial")
    lines.append(f"Settings: {', '.join(f'{k}={v}' for k, v in s.items() if k not in ('build',))}")
    if partial:
        lines.append("")
        lines.append(f"**Partial run** ({partial}): not comparable with published full-benchmark numbers.")
    lines += ["", "## Main metric per task (nDCG@10; Acc@1 averaged over lengths for passkey/needle)", ""]
    runs_as = metrics.get("stage_runs") or {}
    if runs_as:
        lines += [f"- **{st}**: {runs_as[st]}" for st in stages if st in runs_as] + [""]
    default = metrics.get("default_stage")
    lines.append("| task | metric | " + " | ".join(f"{st} (default)" if st == default else st for st in stages)
                 + " | published |")
    lines.append("|---|---|" + "---|" * len(stages) + "---|")
    for name, t in tasks.items():
        m = t["main_metric"]
        cells = [f"{t['stages'][st][m]:.1f}" if st in t["stages"] else "–" for st in stages]
        lines.append(f"| {name} | {m} | " + " | ".join(cells) + f" | {_published_for(bench, name)} |")
    avg = [f"**{metrics['averages'][st]:.1f}**" if metrics["averages"].get(st) is not None else "–" for st in stages]
    # a partial run's average is over other queries (or lengths, or tasks) than the published ones
    pub_avg = "not comparable (partial run)" if partial else _published_for(bench, "average")
    lines.append(f"| **average** ({len(tasks)} tasks) | | " + " | ".join(avg) + f" | {pub_avg} |")
    sig = [(n, t["significance"]) for n, t in metrics.get("raw", {}).items() if t.get("significance")]
    if sig:
        lines += ["", "## Significance (nDCG@10; paired t-test and randomisation test, Holm-corrected)", ""]
        for name, g in sig:
            rows = [f"{st} {100 * r['delta']:+.2f} (p {r['p_t_holm']:.2g}/{r['p_randomisation_holm']:.2g})"
                    + (" †" if r["significant"] else "") for st, r in g["vs_baseline"].items()]
            lines.append(f"- {name}, against {g['baseline']}: " + "; ".join(rows))
            for stage in (Stage.WINDOWS.value, Stage.RERANKED.value):
                if f"{stage}_vs_fused" in g:
                    r = g[f"{stage}_vs_fused"]
                    lines.append(f"- {name}, {stage} against fused: {100 * r['delta']:+.2f} "
                                 f"(p {r['p_t_holm']:.2g}/{r['p_randomisation_holm']:.2g})" + (" †" if r["significant"] else ""))
    lines += ["", "## Recall@100 per task", "", "| task | " + " | ".join(stages) + " |", "|---|" + "---|" * len(stages)]
    for name, t in tasks.items():
        cells = [f"{t['stages'][st]['recall@100']:.1f}" if st in t["stages"] else "–" for st in stages]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for name, t in tasks.items():
        if "per_length" not in t:
            continue
        lengths = sorted(t["per_length"], key=int)
        lines += ["", f"## {name}: Acc@1 per context length", "",
                  "| stage | " + " | ".join(lengths) + " | mean |", "|---|" + "---|" * (len(lengths) + 1)]
        for st in stages:
            vals = [t["per_length"][L].get(st, {}).get("acc@1") for L in lengths]
            cells = [f"{v:.0f}" if v is not None else "–" for v in vals]
            lines.append(f"| {st} | " + " | ".join(cells) + f" | {t['stages'].get(st, {}).get('acc@1', float('nan')):.1f} |")
        lines.append("")
        lines.append(f"![{name} heatmap]({name}_heatmap.png)")
    analyzers = {name: t.get("analyzer") for name, t in tasks.items() if t.get("analyzer")}
    if len({json.dumps(a, sort_keys=True) for a in analyzers.values()}) > 1 or bench == "mldr":
        lines += ["", "## BM25 analyzer per task", "", "| task | language | stemming | stop words |", "|---|---|---|---|"]
        for name, a in analyzers.items():
            lines.append(f"| {name} | {a['language']} | {a['stemming']} | {a['stopwords']} |")
    lines += ["", "![nDCG@10 per task and stage](tasks.png)", ""]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    plot(metrics, out)


def plot(metrics: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = metrics["tasks"]
    stages = [s for s in stage_order() if s in metrics["averages"]]
    for name, t in tasks.items():
        if "per_length" not in t:
            continue
        lengths = sorted(t["per_length"], key=int)
        grid = np.array([[t["per_length"][L].get(st, {}).get("acc@1", np.nan) for L in lengths] for st in stages])
        fig, ax = plt.subplots(figsize=(max(5.0, 1.5 + 0.8 * len(lengths)), 1.2 + 0.5 * len(stages)))
        im = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
        ax.set_xticks(range(len(lengths)), lengths)
        ax.set_yticks(range(len(stages)), stages)
        for i in range(len(stages)):
            for j in range(len(lengths)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=8)
        ax.set_xlabel("context length (tokens)")
        ax.set_title(f"{name}: Acc@1 by stage and length")
        fig.colorbar(im, ax=ax, fraction=0.03)
        fig.tight_layout()
        fig.savefig(out / f"{name}_heatmap.png", dpi=120)
        plt.close(fig)
    fig = bars_figure(metrics, stages)
    fig.savefig(out / "tasks.png", dpi=120)
    plt.close(fig)


def bars_figure(metrics: dict, stages: list[str]):
    """The main metric per task and stage as grouped bars, the legend beside them."""
    import matplotlib.pyplot as plt

    tasks = metrics["tasks"]
    names = list(tasks)
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(names) * len(stages) / 3) + 1.5, 4))
    width = 0.8 / max(len(stages), 1)
    for i, st in enumerate(stages):
        vals = [tasks[n]["stages"].get(st, {}).get(tasks[n]["main_metric"], 0) for n in names]
        ax.bar(np.arange(len(names)) + i * width, vals, width, label=st)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, rotation=30, ha="right")
    ax.set_ylabel("nDCG@10 (Acc@1 for passkey/needle)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)   # beside the bars, never on them
    ax.set_title(f"{metrics['bench']}: main metric per task and stage")
    fig.tight_layout()
    return fig
