"""The results as pictures, written by ``python -m benchmarks.learning.experiments report`` beside the tables:

- ``benchmarks/experiments/decision.svg`` (`forest_data`, `draw_forest`): a forest plot of every pair of
  ``decision.json`` (each decisive pair, each pair of a round, each round's primary difference and its secondary
  difference against RL-CR), its mean difference in final held-out ILA and 95% t-interval over seeds, grouped by
  task and objective family, with the zero line and the decisive rule's "useful gain" line (`paired.decide`);
- ``benchmarks/experiments/<name>/curves.svg`` (`curves_data`, `draw_curves`), shown in that experiment's
  ``report.md``: per arm, held-out ILA at each evaluation step, the training rewards (ILA and CLA of the sampled
  completions) and the share of completions cut at the length limit, mean over seeds and its 95% t-band.

Each picture is drawn from a small JSON-able dict, its data, and the SVG carries the SHA-256 of that data (its
``dc:identifier``, `data_digest`). ``report --check`` compares that digest with the data computed now from
``decision.json`` and the records, not the SVG's bytes: the bytes depend on the matplotlib version (path and number
formatting, text layout), the data does not. So the check passes on any machine, with or without matplotlib, and
fails whenever a picture no longer shows what the records hold; ``report`` redraws only the pictures whose digest
changed, so a newer matplotlib does not rewrite pictures whose data is unchanged. `STYLE` is part of the digest:
bump it when the drawing changes. Drawn by the same matplotlib version a picture is the same byte for byte on any
machine: a fixed ``svg.hashsalt``, no date, text kept as text (``svg.fonttype: none``) with matplotlib's own DejaVu
Sans metrics for the layout. SVG keeps the pictures small (tens of KB), sharp at any width, and diffable.

matplotlib is the ``plot`` extra (also in ``dev``); without it `write` draws nothing and says so in one line, and the
reports and tables are written as usual. Colours are Okabe and Ito's colour-blind-safe palette.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.learning import paired, records

#: Part of every picture's digest: bump it when the drawing changes, so that `report` redraws every picture.
STYLE = 1
FOREST_FILE = records.EXPERIMENTS / "decision.svg"
CURVES_FILE = "curves.svg"
#: The training panels average each run's per-step values over blocks of this many optimizer steps.
BLOCK_STEPS = 8
#: Values are rounded to this many decimals (points, percent) before they are hashed and drawn.
DIGITS = 3
#: Okabe and Ito's colour-blind-safe palette, without yellow (too light on white); black last.
OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
#: The forest plot's colour of an interval: above zero, below zero, including zero.
SIGN_COLOURS = {"above": "#0072B2", "below": "#D55E00", "across": "#000000"}
FAMILY_NAMES = records.FAMILY_NAMES
#: How the curves name each method (with its record folder beside it).
METHOD_NAMES = {"hir": "HiR, ILA reward", "hir_cla": "HiR default", "hir_paper": "HiR paper (GRPO)",
                "hir_paper_rpp": "HiR paper", "random": "random replay", "rl_cr": "RL-CR", "rl_ir": "RL-IR",
                "rl_cr_rpp": "RL-CR", "rl_ir_rpp": "RL-IR"}
#: matplotlib settings of every picture (`save`): matplotlib lays text out with its own DejaVu Sans (so the same on every machine); a browser without that font
#: shows the SVG's text in Arial, Helvetica or its sans-serif.
RC = {"svg.fonttype": "none", "svg.hashsalt": "hir-trl", "font.family": "sans-serif",
      "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"], "font.size": 9,
      "axes.spines.top": False, "axes.spines.right": False, "path.simplify": True}
IDENTIFIER = re.compile(r"<dc:identifier>data-sha256:([0-9a-f]{64})</dc:identifier>")


@dataclass(frozen=True)
class Picture:
    """One generated picture: where it goes, the data it shows, how to draw it (data -> a matplotlib Figure), and
    its title (the SVG's ``<title>``)."""

    path: Path
    data: dict[str, Any]
    draw: Callable[[dict[str, Any]], Any]
    title: str

    @property
    def digest(self) -> str:
        return data_digest(self.data)


def data_digest(data: dict[str, Any]) -> str:
    """SHA-256 of the data a picture shows and of `STYLE` (canonical JSON)."""
    text = json.dumps({"style": STYLE, "data": data}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def committed_digest(path: Path) -> str | None:
    """The data digest an SVG written by `save` carries; ``None`` when the file is missing or carries none."""
    path = Path(path)
    if not path.is_file():
        return None
    match = IDENTIFIER.search(path.read_text(encoding="utf-8", errors="replace"))
    return match.group(1) if match else None


def stale(pictures: Sequence[Picture]) -> list[Path]:
    """The pictures whose file is missing or shows other data than ``pictures`` (no matplotlib needed)."""
    return [p.path for p in pictures if committed_digest(p.path) != p.digest]


def save(picture: Picture) -> None:
    """Draw ``picture`` and write its SVG, byte-reproducible for a given matplotlib version."""
    import matplotlib

    with matplotlib.rc_context(RC):
        fig = picture.draw(picture.data)
        picture.path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(picture.path, format="svg", bbox_inches="tight", pad_inches=0.12,
                    metadata={"Date": None, "Creator": None, "Title": picture.title,
                              "Identifier": f"data-sha256:{picture.digest}"})


def write(pictures: Sequence[Picture], say: Callable[[str], Any] = print) -> list[Path]:
    """Draw the `stale` pictures; return the paths written. Without matplotlib nothing is drawn, and one line
    (``say``) says so and how many pictures are out of date."""
    old = set(stale(pictures))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        say(f"matplotlib is not installed (pip install -e '.[plot]'): reports and tables written, pictures not "
            f"drawn ({len(old)} of {len(pictures)} out of date)")
        return []
    written = []
    for picture in pictures:
        if picture.path in old:
            save(picture)
            written.append(picture.path)
    return written


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), DIGITS)


def family_of(method: str) -> str:
    """A method's objective family: ``paper`` (Reinforce++ with KL, the ``*_rpp`` methods) or ``trl`` (GRPO)."""
    return "paper" if method.endswith("_rpp") else "trl"


def _preregistration(name: str) -> dict[str, Any]:
    import yaml

    path = records.experiment_dir(name) / records.PREREGISTRATION_FILE
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


# ================================================================================================ forest plot


def _row(experiment: str, pair: str, rule: str, preregistered: bool, source: dict[str, Any],
         entry: dict[str, Any]) -> dict[str, Any]:
    """A pair's row from the entry of ``decision.json`` it belongs to (``source`` the pair's own figures: the
    entry, or one of its ``pairs``; a pair not run yet takes the entry's status as its decision)."""
    return {"experiment": experiment, "pair": pair, "rule": rule, "preregistered": preregistered,
            "seeds": len(source.get("seeds") or []), "mean": _round(source.get("mean_diff_points")),
            "low": _round(source.get("ci95_low")), "high": _round(source.get("ci95_high")),
            "decision": source.get("decision") or entry.get("decision", "")}


def pairs_of(entry: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every pair an entry of ``decision.json`` decides or reports: (task, family, forest row). A decisive entry is
    one pair; a round with ``pairs`` has each of them; a round with one difference has it and, where it has one,
    its difference against RL-CR (``versus_rl_cr``)."""
    name = entry.get("experiment", "?")
    if "family" in entry:
        names = records.ARM_NAMES[entry["family"]]
        pair = f"{names[entry['hir_arm']]} − {names[entry['baseline_arm']]}"
        return [(entry["task"], entry["family"],
                 _row(name, pair, "decisive", entry.get("pair_preregistered") is not False, entry, entry))]
    spec = _preregistration(name)
    task = spec.get("task", "unknown task")
    if "pairs" in entry:
        return [(task, family_of(p["a"]["method"]),
                 _row(name, p["name"].replace(" minus ", " − "), p["rule"], True, p, entry))
                for p in entry["pairs"]]
    label = records.ROUND_DIFFERENCES.get(name, name)
    family = family_of(spec.get("arm", ""))
    out = [(task, family, _row(name, label.replace(" - ", " − "), "sign", True, entry, entry))]
    if entry.get("versus_rl_cr"):
        arm, _, change = label.partition(": ")
        out.append((task, family, _row(name, f"{arm}, {change.split(' - ')[0]} − RL-CR", "decisive", True,
                                       entry["versus_rl_cr"], entry)))
    return out


def forest_data(decisions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The forest plot's data: the rule's useful-gain margin (points) and the groups (task, family), in the order
    they first appear in ``decisions``, each with its pairs (`pairs_of`) in ``decisions``' order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in decisions:
        for task, family, row in pairs_of(entry):
            groups.setdefault((task, family), []).append(row)
    return {"useful_gain": paired.USEFUL_GAIN_POINTS,
            "groups": [{"task": task, "family": family, "rows": rows} for (task, family), rows in groups.items()]}


def _side(row: dict[str, Any]) -> str:
    return "above" if row["low"] > 0 else "below" if row["high"] < 0 else "across"


def _outcome_text(row: dict[str, Any]) -> str:
    if row["mean"] is None:
        return f"no interval: {row['decision']}"
    return f"{row['seeds']} seeds: {row['decision']}"


#: The forest plot's layout, inches: the height of a line (a pair or a heading), the space below and above the axes.
LINE, BOTTOM, TOP = 0.2, 1.25, 0.1


def draw_forest(data: dict[str, Any]) -> Any:
    """The forest plot of `forest_data` (a matplotlib Figure): per task and family, each experiment's pairs under
    its name, the interval coloured by where it lies against zero, the marker by the rule that labels the pair."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    blocks = [(g, [r for r in g["rows"] if r["experiment"] == name])
              for g in data["groups"] for name in dict.fromkeys(r["experiment"] for r in g["rows"])]
    lines = sum(1 + len(rows) for _, rows in blocks)
    height = LINE * lines + BOTTOM + TOP
    fig = Figure(figsize=(8.4, height))
    fig.subplots_adjust(left=0.37, right=0.69, bottom=BOTTOM / height, top=1 - TOP / height)
    ax = fig.add_subplot()
    at = ("axes fraction", "data")
    y, values, previous = 0.0, [], None
    for group, rows in blocks:
        if previous is not None and group is not previous:  # a rule across the figure between task and family
            ax.axhline(y + 0.5, color="#888888", lw=0.8, clip_on=False, xmin=-1.35, xmax=1.9)
        previous = group
        family = FAMILY_NAMES.get(group["family"], group["family"])
        ax.annotate(f"{rows[0]['experiment']} ({group['task']}, {family})", (-0.02, y), xycoords=at, ha="right",
                    va="center", fontweight="bold", fontsize=8)
        y -= 1
        for row in rows:
            ax.annotate(row["pair"], (-0.02, y), xycoords=at, ha="right", va="center", fontsize=8)
            ax.annotate(_outcome_text(row), (1.02, y), xycoords=at, ha="left", va="center", fontsize=8)
            if row["mean"] is not None:
                colour = SIGN_COLOURS[_side(row)]
                ax.plot([row["low"], row["high"]], [y, y], color=colour, lw=1.6, solid_capstyle="butt")
                ax.plot([row["mean"]], [y], marker="o" if row["rule"] == "decisive" else "D",
                        ms=5.5 if row["rule"] == "decisive" else 4.5, color=colour,
                        markerfacecolor=colour if row["preregistered"] else "white", markeredgewidth=1.2)
                values += [row["low"], row["high"]]
            y -= 1
    ax.axvline(0, color="#555555", lw=0.9)
    ax.axvline(data["useful_gain"], color="#555555", lw=0.9, ls=(0, (4, 3)))
    low, high = min(values + [0.0]), max(values + [data["useful_gain"]])
    pad = 0.04 * (high - low)
    ax.set_xlim(low - pad, high + pad)
    ax.set_ylim(y + 0.5, 0.5)
    ax.set_yticks([])
    ax.spines["left"].set_visible(False)
    ax.grid(axis="x", color="#e5e5e5", lw=0.5)
    ax.set_axisbelow(True)
    ax.set_xlabel("A − B, final held-out ILA (points):\nmean and 95% t-interval over seeds")
    handles = [Line2D([], [], color=SIGN_COLOURS["above"], marker="o", lw=1.6, label="interval above 0"),
               Line2D([], [], color=SIGN_COLOURS["below"], marker="o", lw=1.6, label="interval below 0"),
               Line2D([], [], color=SIGN_COLOURS["across"], marker="o", lw=1.6, label="interval includes 0"),
               Line2D([], [], color="#555555", marker="o", lw=0, label="labelled by the decisive rule"),
               Line2D([], [], color="#555555", marker="D", ms=4.5, lw=0, label="labelled by a sign rule"),
               Line2D([], [], color="#555555", marker="o", markerfacecolor="white", lw=0,
                      label="not pre-registered"),
               Line2D([], [], color="#555555", lw=0.9, label="0: no difference"),
               Line2D([], [], color="#555555", lw=0.9, ls=(0, (4, 3)),
                      label=f"+{data['useful_gain']:g}: the decisive rule's useful gain")]
    fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False, fontsize=8,
               handlelength=2.2)
    return fig


def forest_picture(decisions: Sequence[dict[str, Any]]) -> Picture:
    return Picture(FOREST_FILE, forest_data(decisions), draw_forest,
                   "Every pair of decision.json: mean paired difference in final held-out ILA and its 95% interval")


# ================================================================================================ learning curves


@dataclass(frozen=True)
class Arm:
    """One arm of an experiment's curves: a method's records in a record folder (``runs``, repository-relative),
    those of ``seeds`` (every seed when ``None``)."""

    label: str
    method: str
    runs: str
    seeds: tuple[int, ...] | None = None


def _folder_label(method: str, runs: str) -> str:
    return f"{METHOD_NAMES.get(method, method)} ({Path(runs).name})"


def experiment_arms(name: str, decisions: Sequence[dict[str, Any]]) -> list[Arm]:
    """The arms an experiment's report compares, from its entries of ``decision.json`` and its pre-registration:

    - a decisive experiment (entries with a ``family``): each family's HiR, RL-CR and RL-IR arms, every record of
      its folder;
    - a round with ``pairs``: each side of each pair (its method and record folder, as decided: after a failed
      pairing check the round's own baselines), the seeds of the pairs it is in;
    - a round with one difference: its arm in its own folder and in the decisive synthetic experiment's (the
      baseline it is paired with), and that experiment's RL-CR of the arm's family where the round reports the
      difference against RL-CR; the seeds decided.
    """
    entries = [d for d in decisions if d.get("experiment") == name]
    own = f"benchmarks/experiments/{name}"
    if any("family" in d for d in entries):
        spec = _preregistration(name)
        from benchmarks.learning import decisive

        arms = []
        for family, block in spec["families"].items():
            names = records.ARM_NAMES[family]
            role_names = {"hir": names[decisive.HIR_ARM_NAMES[family]], "rl_cr": names["rl_cr"],
                          "rl_ir": names["rl_ir"]}
            for role in ("hir", "rl_cr", "rl_ir"):
                arms.append(Arm(f"{role_names[role]} ({FAMILY_NAMES[family]})", block["arms"][role], own))
        return arms
    arms: dict[tuple[str, str], set[int]] = {}
    for entry in entries:
        if "pairs" in entry:
            for pair in entry["pairs"]:
                for side in ("a", "b"):
                    key = (pair[side]["method"], pair[side]["runs"])
                    arms.setdefault(key, set()).update(pair.get("seeds") or [])
        else:
            method, baseline = _preregistration(name).get("arm"), "benchmarks/experiments/decisive-synthetic"
            if method is None:
                continue
            for key in ((method, own), (method, baseline)):
                arms.setdefault(key, set()).update(entry.get("seeds") or [])
            versus = entry.get("versus_rl_cr")
            if versus:
                decisive_spec = _preregistration(Path(baseline).name)
                rl_cr = decisive_spec["families"][family_of(method)]["arms"]["rl_cr"]
                arms.setdefault((rl_cr, baseline), set()).update(versus.get("seeds") or [])
    return [Arm(_folder_label(method, runs), method, runs, tuple(sorted(seeds)))
            for (method, runs), seeds in arms.items() if seeds]


def _stats(values: Sequence[float]) -> dict[str, Any]:
    """Mean of ``values`` and its 95% t-interval (``low``, ``high`` are None below two values), rounded."""
    n = len(values)
    if n < 2:
        return {"n": n, "mean": _round(sum(values) / n), "low": None, "high": None}
    t = paired.t_interval(list(values))
    return {"n": n, "mean": _round(t["mean"]), "low": _round(t["low"]), "high": _round(t["high"])}


def eval_series(runs: Sequence[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """At each held-out evaluation step every run has, the mean over runs of ``100 * evaluation[key]`` with its
    95% t-interval (``step``, ``n``, ``mean``, ``low``, ``high``)."""
    by_run = [{e["step"]: e[key] for e in r.get("evals", []) if e.get(key) is not None} for r in runs]
    steps = sorted(set.intersection(*(set(v) for v in by_run))) if by_run else []
    return [{"step": step, **_stats([100 * v[step] for v in by_run])} for step in steps]


def block_series(runs: Sequence[dict[str, Any]], key: str, block: int = BLOCK_STEPS) -> list[dict[str, Any]]:
    """A logged per-step value (``100 * log[key]``, percent) over training: each run's mean over each block of
    ``block`` optimizer steps, then the mean over runs with its 95% t-interval, at the block's middle step. A block
    counts only where every run logs ``key`` in it; none does in records older than the key."""
    by_run = [{e["step"]: e[key] for e in r.get("logs", []) if e.get(key) is not None} for r in runs]
    if not by_run or not all(by_run):
        return []
    blocks = sorted(set.intersection(*({(s - 1) // block for s in v} for v in by_run)))
    out = []
    for b in blocks:
        means = []
        for v in by_run:
            inside = [100 * v[s] for s in v if (s - 1) // block == b]
            means.append(sum(inside) / len(inside))
        out.append({"step": b * block + (block + 1) / 2, **_stats(means)})
    return out


def curves_data(name: str, decisions: Sequence[dict[str, Any]],
                cache: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any] | None:
    """The learning curves' data of the experiment ``name``: per arm (`experiment_arms`) with records, its label,
    method, record folder, seeds, and the series `eval_series` of held-out ILA and cut share, `block_series` of the
    sampled completions' ILA, CLA and cut share (TRL's ``completions/clipped_ratio``). ``None`` without records.
    ``cache``: record folder -> its records, shared between experiments."""
    cache = {} if cache is None else cache
    arms = []
    for arm in experiment_arms(name, decisions):
        if arm.runs not in cache:
            cache[arm.runs] = records.load_records(records.REPO_ROOT / arm.runs)
        runs = [r for r in cache[arm.runs]
                if r.get("method") == arm.method and (arm.seeds is None or r.get("seed") in arm.seeds)]
        if not runs:
            continue
        arms.append({"label": arm.label, "method": arm.method, "runs": arm.runs, "family": family_of(arm.method),
                     "seeds": sorted(r["seed"] for r in runs),
                     "held_out_ila": eval_series(runs, "ila"),
                     "held_out_cut": eval_series(runs, "truncated_fraction"),
                     "train_ila": block_series(runs, "reward/ila"),
                     "train_cla": block_series(runs, "reward/cla"),
                     "train_cut": block_series(runs, "completions/clipped_ratio")})
    return {"experiment": name, "block_steps": BLOCK_STEPS, "arms": arms} if arms else None


def _styles(arms: Sequence[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(colour, line style) per arm: colours in palette order, GRPO solid, Reinforce++ dashed."""
    return [(OKABE_ITO[i % len(OKABE_ITO)], "-" if arm["family"] == "trl" else (0, (5, 2)))
            for i, arm in enumerate(arms)]


def _band(ax: Any, series: Sequence[dict[str, Any]], colour: str, style: Any, label: str | None,
          marker: str | None = None) -> None:
    xs = [p["step"] for p in series]
    ax.plot(xs, [p["mean"] for p in series], color=colour, ls=style, lw=1.4, marker=marker, ms=4, label=label)
    banded = [p for p in series if p["low"] is not None]
    if banded:
        ax.fill_between([p["step"] for p in banded], [p["low"] for p in banded], [p["high"] for p in banded],
                        color=colour, alpha=0.12, lw=0)


def draw_curves(data: dict[str, Any]) -> Any:
    """The learning curves of `curves_data` (a matplotlib Figure): four panels against the optimizer step."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.2, 5.6), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True)
    block = data["block_steps"]
    panels = [("held-out ILA at each evaluation", "held-out ILA (%)"),
              ("training reward: ILA of sampled completions", f"ILA (%, {block}-step means)"),
              ("training reward: CLA of sampled completions", f"CLA (%, {block}-step means)"),
              ("completions cut at the length limit", "cut (%)")]
    for ax, (title, ylabel) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=8.5, loc="left")
        ax.set_ylabel(ylabel)
        ax.grid(color="#e5e5e5", lw=0.5)
    for ax in axes[1]:
        ax.set_xlabel("optimizer step")
    for arm, (colour, style) in zip(data["arms"], _styles(data["arms"])):
        label = f"{arm['label']}, {len(arm['seeds'])} seeds"
        _band(axes[0, 0], arm["held_out_ila"], colour, style, label, marker="o")
        _band(axes[0, 1], arm["train_ila"], colour, style, None)
        _band(axes[1, 0], arm["train_cla"], colour, style, None)
        _band(axes[1, 1], arm["held_out_cut"], colour, style, None, marker="o")
        if arm["train_cut"]:
            _band(axes[1, 1], arm["train_cut"], colour, (0, (1, 1.5)), None)
    fig.legend(loc="outside upper center", ncol=2, frameon=False, fontsize=8, handlelength=3)
    return fig


def curves_path(name: str) -> Path:
    return records.experiment_dir(name) / CURVES_FILE


def curves_picture(name: str, decisions: Sequence[dict[str, Any]],
                   cache: dict[str, list[dict[str, Any]]] | None = None) -> Picture | None:
    """The experiment's learning curves as a `Picture`, ``None`` when it has no records."""
    data = curves_data(name, decisions, cache)
    if data is None:
        return None
    return Picture(curves_path(name), data, draw_curves,
                   f"{name}: held-out ILA, training rewards and cut share per arm against the optimizer step")


def curves_markdown(data: dict[str, Any]) -> str:
    """The report's section that shows `curves_picture` and says what it holds."""
    seeds = "; ".join(f"{a['label']} {len(a['seeds'])}" for a in data["arms"])
    logged = [a["label"] for a in data["arms"] if a["train_cut"]]
    if len(logged) == len(data["arms"]):
        cut = ("Cut share: the sampled completions per block (dotted; TRL's `completions/clipped_ratio`) and the "
               "held-out completions at each evaluation (markers).")
    elif logged:
        cut = (f"Cut share: the held-out completions at each evaluation (markers); the sampled completions per block "
               f"(dotted; TRL's `completions/clipped_ratio`) only for {', '.join(logged)}, the others' records do "
               "not log it.")
    else:
        cut = ("Cut share: the held-out completions at each evaluation; these records do not log the sampled "
               "completions' share (TRL's `completions/clipped_ratio`, kept in records by later runs).")
    return "\n".join([
        "", "## Learning curves", "",
        f"![Learning curves of {data['experiment']}: held-out ILA, training rewards and cut share per arm]"
        f"({CURVES_FILE})", "",
        f"Mean over seeds and its 95% t-band, against the optimizer step (seeds per arm: {seeds}). Training panels: "
        f"each run's sampled completions of each optimizer step, averaged over blocks of {data['block_steps']} "
        f"steps. {cut} Generated with the report (`benchmarks/learning/figures.py`).", ""])
