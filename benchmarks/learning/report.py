"""Turn the per-run JSON records of `benchmarks.learning.run` into ``results.md``, ``summary.json`` and PNG plots.

Can be re-run on saved records: ``python -m benchmarks.learning.report benchmarks/results``.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.learning import records  # noqa: E402
from benchmarks.learning.task import FAMILIES  # noqa: E402

# the learning targets are stated for HiR's default (hir_cla, the CLA reward); the binary-reward HiR is reported
# against the same targets
TARGET_METHODS = ("hir_cla", "hir")
#: Each method's name in tables and plots (`benchmarks.learning.run.METHODS`).
METHOD_LABELS = {"hir": "HiR, ILA reward", "hir_paper": "HiR (paper advantage)", "random": "Random replay",
                 "rl_ir": "RL-IR", "rl_cr": "RL-CR", "hir_cla": "HiR (default: CLA reward)",
                 "hir_paper_rpp": "HiR (paper recipe: Reinforce++, KL)", "rl_cr_rpp": "RL-CR (Reinforce++, KL)",
                 "rl_ir_rpp": "RL-IR (Reinforce++, KL)"}
COLORS = {"hir": "tab:red", "hir_paper": "tab:purple", "random": "tab:orange", "rl_ir": "tab:blue",
          "rl_cr": "tab:green", "hir_cla": "tab:brown", "hir_paper_rpp": "tab:pink", "rl_cr_rpp": "tab:olive",
          "rl_ir_rpp": "tab:cyan"}
#: The order of methods in tables and plots: each HiR arm before the baselines, each family together.
METHOD_ORDER = ("hir", "hir_cla", "hir_paper", "hir_paper_rpp", "random", "rl_ir", "rl_ir_rpp", "rl_cr", "rl_cr_rpp")
#: Steps over which the per-step cost is compared "at the start", where every method's policy is still close to
#: the shared SFT checkpoint (and failures are plentiful).
EARLY_STEPS = 10


def _mean(values: list[float]) -> float:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else float("nan")


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _by_method(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for run in sorted(runs, key=lambda r: (r["method"], r["seed"])):
        out.setdefault(run["method"], []).append(run)
    return out


def _curve(runs: list[dict[str, Any]], key: str) -> tuple[list[int], list[float], list[float]]:
    """Mean and sd over seeds of an eval metric, at the eval points every run shares."""
    steps = sorted(set.intersection(*[{e["step"] for e in r["evals"]} for r in runs]))
    means, sds = [], []
    for s in steps:
        values = [next(e[key] for e in r["evals"] if e["step"] == s) for r in runs]
        means.append(_mean(values))
        sds.append(_sd(values))
    return steps, means, sds


def _family_matrix(runs: list[dict[str, Any]], families=FAMILIES) -> tuple[list[int], list[list[float]]]:
    steps = sorted(set.intersection(*[{e["step"] for e in r["evals"]} for r in runs]))
    matrix = []
    for family in families:
        row = []
        for s in steps:
            row.append(_mean([next(e["family"][family] for e in r["evals"] if e["step"] == s) for r in runs]))
        matrix.append(row)
    return steps, matrix


def _prompts_to_reach(steps: list[int], means: list[float], target: float, per_step: int) -> int | None:
    for s, v in zip(steps, means):
        if v >= target - 1e-12:
            return s * per_step
    return None


def _cost(runs: list[dict[str, Any]], first: int | None = None) -> dict[str, float]:
    """Mean per-step cost over all steps of all seeds (or over each run's first ``first`` steps)."""
    rows = [s for r in runs for s in (r["steps"][:first] if first else r["steps"])]
    keys = ("step_seconds", "generation", "verification", "nograd_pass", "selection", "trl_scoring", "optimizer",
            "generated_tokens", "generated_sequences", "peak_memory_mb")
    out = {k: _mean([s[k] for s in rows]) for k in keys}
    out["peak_memory_mb_max"] = max(s["peak_memory_mb"] for s in rows)
    cuda = [r["cuda_max_memory_mb"] for r in runs if r.get("cuda_max_memory_mb") is not None]
    out["cuda_max_memory_mb"] = max(cuda) if cuda else None
    supp = [lg.get("hir/supplementary_samples", 0.0) for r in runs for lg in (r["logs"][:first] if first else r["logs"])]
    out["supplementary_samples"] = _mean(supp) if supp else 0.0
    return out


def summarize(runs: list[dict[str, Any]], bench: dict[str, Any]) -> dict[str, Any]:
    by = _by_method(runs)
    per_step = bench["prompts_per_step"]
    learning = {}
    for method, rs in by.items():
        steps, ila, ila_sd = _curve(rs, "ila")
        _, cla, cla_sd = _curve(rs, "cla")
        _, secs, _ = _curve(rs, "train_seconds")
        learning[method] = {
            "seeds": [r["seed"] for r in rs], "steps": steps, "prompts": [s * per_step for s in steps],
            "ila": ila, "ila_sd": ila_sd, "cla": cla, "cla_sd": cla_sd, "train_seconds": secs,
            "final_ila_per_seed": [r["evals"][-1]["ila"] for r in rs],
            "final_cla_per_seed": [r["evals"][-1]["cla"] for r in rs],
            "wall_seconds": _mean([r["wall_seconds"] for r in rs]),
        }
    costs = {method: {"all": _cost(rs), "early": _cost(rs, EARLY_STEPS)} for method, rs in by.items()}

    targets: dict[str, Any] = {"learning": {}}
    for method in TARGET_METHODS:
        if method not in learning or "rl_ir" not in learning:
            continue
        hir, ir = learning[method], learning["rl_ir"]
        budget = ir["prompts"][-1]
        reach = _prompts_to_reach(hir["steps"], hir["ila"], ir["ila"][-1], per_step)
        margins = {b: 100 * (hir["ila"][-1] - learning[b]["ila"][-1]) for b in ("rl_ir", "rl_cr") if b in learning}
        needed = {"rl_ir": 3.0, "rl_cr": 0.0}  # the targets: at least RL-IR's + 3 points, and at least RL-CR's
        targets["learning"][method] = {
            "sample_efficiency": {
                "rl_ir_final_ila": ir["ila"][-1], "rl_ir_start_ila": ir["ila"][0], "hir_prompts_to_reach": reach,
                "rl_ir_prompts": budget,
                "fraction": (reach / budget) if reach is not None and budget else None,
                "met": reach is not None and reach <= 0.6 * budget,
            },
            "final_ila_margin": {"points_above": margins, "hir_final_ila": hir["ila"][-1],
                                 "met": bool(margins) and all(v >= needed[b] for b, v in margins.items())},
        }
    if "hir" in learning and "rl_ir" in learning:  # cost per step: HiR vs GRPO at the same trained group size
        for scope in ("early", "all"):
            h, g = costs["hir"][scope], costs["rl_ir"][scope]
            targets[f"tokens_{scope}"] = {"hir": h["generated_tokens"], "grpo": g["generated_tokens"],
                                          "ratio": h["generated_tokens"] / g["generated_tokens"],
                                          "met": h["generated_tokens"] <= 0.8 * g["generated_tokens"]}
            targets[f"step_time_{scope}"] = {"hir": h["step_seconds"], "grpo": g["step_seconds"],
                                             "ratio": h["step_seconds"] / g["step_seconds"],
                                             "met": h["step_seconds"] <= g["step_seconds"]}
    return {"learning": learning, "costs": costs, "targets": targets}


# ------------------------------------------------------------------------------------------------ plots


def _plots(summary: dict[str, Any], runs: list[dict[str, Any]], out: Path) -> list[str]:
    """Write the PNGs; returns their names (none when matplotlib is not installed)."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)", file=sys.stderr)
        return []

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    learning = summary["learning"]
    order = [m for m in METHOD_ORDER if m in learning]

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, title in ((axes[0], "ila", "held-out ILA"), (axes[1], "cla", "held-out CLA")):
        for m in order:
            d = learning[m]
            lo = [a - b for a, b in zip(d[key], d[key + "_sd"])]
            hi = [a + b for a, b in zip(d[key], d[key + "_sd"])]
            ax.plot(d["prompts"], d[key], label=METHOD_LABELS[m], color=COLORS[m], marker="o", ms=3)
            ax.fill_between(d["prompts"], lo, hi, color=COLORS[m], alpha=0.15)
        ax.set_xlabel("training prompts consumed")
        ax.set_title(f"{title} (mean ± sd over {len(learning[order[0]]['seeds'])} seeds)")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "ila_vs_prompts.png", dpi=90)
    plt.close(fig)
    files.append("ila_vs_prompts.png")

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for m in order:
        d = learning[m]
        ax.plot(d["train_seconds"], d["ila"], label=METHOD_LABELS[m], color=COLORS[m], marker="o", ms=3)
    ax.set_xlabel("training wall time (s, evaluation excluded)")
    ax.set_ylabel("held-out ILA")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "ila_vs_time.png", dpi=90)
    plt.close(fig)
    files.append("ila_vs_time.png")

    by = _by_method(runs)
    families = summary.get("families") or list(FAMILIES)
    fig, axes = plt.subplots(1, len(order), figsize=(3.4 * len(order) + 1, 3.6), sharey=True)
    axes = [axes] if len(order) == 1 else list(axes)
    image = None
    for ax, m in zip(axes, order):
        steps, matrix = _family_matrix(by[m], families)
        image = ax.imshow(matrix, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        per_step = summary["learning"][m]["prompts"][1] // steps[1] if len(steps) > 1 and steps[1] else 1
        ticks = list(range(0, len(steps), max(1, math.ceil((len(steps) - 1) / 4))))
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(steps[i] * per_step) for i in ticks])
        ax.set_xlabel("training prompts")
        ax.set_title(METHOD_LABELS[m])
    axes[0].set_yticks(range(len(families)))
    axes[0].set_yticklabels(list(families))
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="held-out accuracy")
    fig.savefig(out / "constraint_heatmap.png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    files.append("constraint_heatmap.png")

    costs = summary["costs"]
    parts = ("generation", "verification", "nograd_pass", "selection", "trl_scoring", "optimizer")
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    left = {m: 0.0 for m in order}
    for part, color in zip(parts, ("tab:blue", "tab:purple", "tab:orange", "tab:red", "tab:gray", "tab:green")):
        widths = [costs[m]["all"][part] for m in order]
        ax.barh([METHOD_LABELS[m] for m in order], widths, left=[left[m] for m in order], label=part, color=color)
        for m, w in zip(order, widths):
            left[m] += w
    ax.set_xlabel("seconds per optimizer step (mean over all steps and seeds)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(out / "step_cost.png", dpi=90)
    plt.close(fig)
    files.append("step_cost.png")
    return files


# ------------------------------------------------------------------------------------------------ markdown


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def method_estimators(runs: list[dict[str, Any]], bench: dict[str, Any]) -> dict[str, str]:
    """Each run's method -> its advantage estimator: the method's own (the paper family's Reinforce++), else the
    benchmark's ``extra`` override (a JSON string of HiRConfig settings, as BenchConfig holds it), else ``grpo``."""
    extra = bench.get("extra") or {}
    default = (json.loads(extra) if isinstance(extra, str) else extra).get("advantage_estimator", "grpo")
    return {r["method"]: r["overrides"].get("advantage_estimator", default) for r in runs}


def _estimators(estimators: dict[str, str], order: list[str]) -> str:
    """``"`grpo` estimator"`` when every method shares one, else each estimator with the methods using it."""
    used = {}
    for m in order:
        used.setdefault(estimators.get(m, "grpo"), []).append(METHOD_LABELS[m])
    if len(used) == 1:
        return f"`{next(iter(used))}` estimator"
    return "estimators " + "; ".join(f"`{e}` ({', '.join(ms)})" for e, ms in used.items())


def _markdown(summary: dict[str, Any], meta: dict[str, Any], bench: dict[str, Any], task: dict[str, Any],
              timing: dict[str, Any], files: list[str]) -> str:
    learning, costs, targets = summary["learning"], summary["costs"], summary["targets"]
    order = [m for m in METHOD_ORDER if m in learning]
    n_seeds = len(learning[order[0]]["seeds"])
    lines = ["# HiR learning benchmark: results", ""]
    start = (f"{meta['description']} ({meta['parameters'] / 1e6:.1f}M parameters; base model's held-out ILA "
             if meta.get("description") else
             f"Synthetic 3-6-constraint IFEval task (8 constraint types), {meta['parameters'] / 1e6:.2f}M-parameter "
             "Qwen2 warm-started by SFT (held-out ILA ")
    lines += [f"{start}{_pct(meta['eval_sft_model']['ila'])}%, CLA "
              f"{_pct(meta['eval_sft_model']['cla'])}%). {n_seeds} seeds per method, "
              f"{bench['prompts']} training prompts per run ({bench['prompts_per_step']} per step, "
              f"{bench['prompts'] // bench['prompts_per_step']} steps), {bench['m'] + bench['k']} trained rows per group "
              f"(HiR: m = {bench['m']}, k = {bench['k']}; RL-IR / RL-CR: {bench['m'] + bench['k']} samples), "
              f"{_estimators(summary.get('estimators', {}), order)}, lr {bench['learning_rate']}, temperature {bench['temperature']}, device "
              f"`{bench['device']}`, {bench['jobs']} run(s) at a time x {bench['threads']} thread(s)."
              + (f" Extra HiRConfig settings for every method: `{bench['extra']}`." if bench.get("extra") else ""), ""]
    lines += [f"Held-out: {bench['eval_prompts']} prompts x {bench['eval_samples']} sample(s) at temperature "
              f"{bench['eval_temperature']} every {bench['eval_every']} steps. Wall time: SFT "
              f"{timing['sft_seconds'] / 60:.1f} min{' (cached)' if timing.get('sft_cached') else ''}, runs "
              f"{timing['runs_seconds'] / 60:.1f} min, total {timing['total_seconds'] / 60:.1f} min.", ""]

    lines += ["## Held-out accuracy", "",
              "| method | ILA at start | final ILA (mean ± sd) | final CLA (mean ± sd) | best ILA | final ILA per seed "
              "| train time / run (s) |", "|---|---|---|---|---|---|---|"]
    for m in order:
        d = learning[m]
        lines.append(f"| {METHOD_LABELS[m]} | {_pct(d['ila'][0])} | {_pct(d['ila'][-1])} ± {_pct(d['ila_sd'][-1])} | "
                     f"{_pct(d['cla'][-1])} ± {_pct(d['cla_sd'][-1])} | {_pct(max(d['ila']))} | "
                     f"{', '.join(_pct(x) for x in d['final_ila_per_seed'])} | {d['train_seconds'][-1]:.0f} |")
    lines += ["", "ILA after each block of training prompts (mean over seeds, %):", ""]
    prompts = learning[order[0]]["prompts"]
    lines += ["| prompts | " + " | ".join(str(p) for p in prompts) + " |",
              "|---|" + "---|" * len(prompts)]
    for m in order:
        lines.append(f"| {METHOD_LABELS[m]} | " + " | ".join(_pct(x) for x in learning[m]["ila"]) + " |")

    lines += ["", "## Cost per optimizer step", "",
              f"Mean over all steps of all seeds (first {EARLY_STEPS} steps in brackets, where every policy is still "
              "near the SFT checkpoint). Seconds; tokens = completion tokens generated in the step (supplementary "
              "samples included); peak memory = the largest per-step peak over all steps and seeds: resident set size "
              "of the run's process (CPU; Python and torch included) or `torch.cuda.max_memory_allocated` (GPU).", "",
              "| method | generated tokens | sequences | step | generation | verification | no-grad pass | "
              "selection + rewrite | TRL scoring | loss + backward + optimizer | peak memory (MiB) | "
              "supplementary samples |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in order:
        a, e = costs[m]["all"], costs[m]["early"]

        def both(key, fmt="{:.3f}", a=a, e=e):
            return f"{fmt.format(a[key])} ({fmt.format(e[key])})"

        memory = f"{a['peak_memory_mb_max']:.0f}"
        lines.append(f"| {METHOD_LABELS[m]} | {both('generated_tokens', '{:.0f}')} | {both('generated_sequences', '{:.1f}')} "
                     f"| {both('step_seconds')} | {both('generation')} | {both('verification')} | "
                     f"{both('nograd_pass')} | {both('selection')} | {both('trl_scoring')} | {both('optimizer')} | "
                     f"{memory} | {both('supplementary_samples', '{:.2f}')} |")

    lines += ["", "## Targets", ""]
    for method, t in targets.get("learning", {}).items():
        se, fm = t["sample_efficiency"], t["final_ila_margin"]
        reach = (f"{se['hir_prompts_to_reach']} of {se['rl_ir_prompts']} prompts ({_pct(se['fraction'])}%)"
                 if se["hir_prompts_to_reach"] is not None else f"not reached within {se['rl_ir_prompts']} prompts")
        trivial = " (RL-IR ended no higher than it started)" if se["rl_ir_final_ila"] <= se["rl_ir_start_ila"] else ""
        lines.append(f"- {METHOD_LABELS[method]} reaches RL-IR's final held-out ILA ({_pct(se['rl_ir_final_ila'])}%, from "
                     f"{_pct(se['rl_ir_start_ila'])}%) with at most 60% of RL-IR's prompts: {reach}{trivial} -> "
                     f"**{'met' if se['met'] else 'missed'}**")
        margins = ", ".join(f"{METHOD_LABELS[b]} {v:+.1f}" for b, v in fm["points_above"].items())
        lines.append(f"- {METHOD_LABELS[method]}: final ILA ({_pct(fm['hir_final_ila'])}%) at least RL-IR's + 3 points and "
                     f"at least RL-CR's: {margins} points -> **{'met' if fm['met'] else 'missed'}**")
    if "tokens_early" in targets:
        for scope, label in (("early", f"first {EARLY_STEPS} steps"), ("all", "all steps")):
            t = targets[f"tokens_{scope}"]
            lines.append(f"- HiR tokens per step <= 0.8x GRPO's ({label}): {t['hir']:.0f} vs {t['grpo']:.0f} = "
                         f"{t['ratio']:.2f}x -> **{'met' if t['met'] else 'missed'}**")
        for scope, label in (("early", f"first {EARLY_STEPS} steps"), ("all", "all steps")):
            t = targets[f"step_time_{scope}"]
            lines.append(f"- HiR step time <= GRPO's ({label}): {t['hir']:.3f} s vs {t['grpo']:.3f} s = "
                         f"{t['ratio']:.2f}x -> **{'met' if t['met'] else 'missed'}**")
    lines += ["", "## Plots", ""] + ([f"![{f}]({f})" for f in files] or ["(matplotlib not installed: no plots)"])
    lines += ["", "Regenerate this file from the saved runs: `python -m benchmarks.learning.report <results dir>`.", ""]
    return "\n".join(lines)


def write_report(runs: list[dict[str, Any]], meta: dict[str, Any], bench, task, timing: dict[str, Any],
                 out: Path) -> dict[str, Any]:
    import dataclasses

    bench_d = dataclasses.asdict(bench) if dataclasses.is_dataclass(bench) else dict(bench)
    task_d = dataclasses.asdict(task) if dataclasses.is_dataclass(task) else dict(task)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(runs, bench_d)
    summary["families"] = list(meta.get("families") or FAMILIES)
    summary["estimators"] = method_estimators(runs, bench_d)
    files = _plots(summary, runs, out)
    summary.update(bench=bench_d, task=task_d, timing=timing, description=meta.get("description"),
                   sft_model={k: meta[k] for k in ("key", "parameters", "vocab_size", "sft", "eval_sft_model")})
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "results.md").write_text(_markdown(summary, meta, bench_d, task_d, timing, files))
    return summary


def main(argv: list[str] | None = None) -> None:
    out = Path((argv or sys.argv[1:] or [str(REPO_ROOT / "benchmarks" / "results")])[0])
    runs = records.load_records(out)
    old = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    bench = old.get("bench") or runs[0]["bench"]
    task = old.get("task", {})
    meta = {"parameters": old.get("sft_model", {}).get("parameters", 0), **old.get("sft_model", {}),
            "families": old.get("families"), "description": old.get("description")}
    timing = old.get("timing", {"sft_seconds": 0.0, "runs_seconds": 0.0, "total_seconds": 0.0})
    write_report(runs, meta, bench, task, timing, out)
    print(out / "results.md")


if __name__ == "__main__":
    main()
