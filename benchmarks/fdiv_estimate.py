"""F_div from the sampled-token estimate vs the exact token entropy, on real completions.

HiR's diversity score F_div is the token mean (or sum) of the policy's entropy H_t over a response. The estimate
``diversity_entropy="sampled"`` replaces H_t with -log pi(y_t) of the sampled token (its expectation over y_t is
H_t). This script samples completions from the learning benchmark's SFT model (the task's RL prompts, m per prompt,
its temperature and length), with `hir_trl.step.sampling.SamplingRecorder` recording both quantities during ``generate``,
and reports how far the estimate moves the replay selection:

- Spearman rank correlation of per-response F_div (exact vs estimate), over all responses and within groups;
- top-k agreement of Algorithm 1 (`hir_trl.step.replay.select_replays`, per group, the trainer's candidates from the real
  verdicts) at several lambda: the fraction of groups whose chosen set is identical, and the mean overlap; next to
  it the same agreement for an uninformative F_div (the exact values shuffled within each group), the floor;
- a check that the recorded exact entropies equal those of a no-grad forward pass (max absolute difference);
- the recorder's cost: ``generate`` of one trainer-sized batch (``--overhead-batch`` sequences) with and without it,
  under the same seed (so the same tokens), interleaved, median of ``--overhead-repeats`` pairs.

Usage (from the repository root; reads the SFT cache, writes nothing there)::

    python -m benchmarks.fdiv_estimate --cache-dir benchmarks/.cache --prompts 256 --out benchmarks/results-fdiv
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def _task_dir(cache_dir: Path) -> Path:
    found = sorted(p.parent for p in cache_dir.glob("task-*/meta.json"))
    if not found:
        raise SystemExit(f"no finished SFT cache (task-*/meta.json) under {cache_dir}: run benchmarks.learning.run first")
    return found[0]


def sample_with_recorder(model, tokenizer, texts, m, temperature, max_new_tokens, batch_size, seed):
    """m completions per prompt text; per completion its token ids, recorded exact entropies and log-probs."""
    import torch
    from transformers import GenerationConfig

    from hir_trl.step.sampling import SamplingRecorder, record_sampling

    tokenizer.padding_side = "left"
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                              max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)
    expanded = [t for t in texts for _ in range(m)]
    out = []
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    for start in range(0, len(expanded), batch_size):
        chunk = expanded[start: start + batch_size]
        batch = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        recorder = SamplingRecorder(temperature)
        with torch.no_grad(), record_sampling(model, recorder):
            sequences = model.generate(**batch, generation_config=config)
        width = batch["input_ids"].size(1)
        completions = []
        for row in sequences[:, width:].tolist():
            cut = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
            completions.append(row[:cut])
        recorded = recorder.per_row(completions)
        for i, ids in enumerate(completions):
            out.append({"ids": ids, "entropies": recorded["entropies"][i], "logps": recorded["logps"][i],
                        "prompt_ids": batch["input_ids"][i][batch["attention_mask"][i].bool()]})
    torch.random.set_rng_state(generator_state)
    return out


def recorder_overhead(model, tokenizer, texts, batch, temperature, max_new_tokens, repeats, seed):
    """Median seconds of ``generate`` for one batch without and with the recorder (same seed: same tokens)."""
    import statistics

    import torch
    from transformers import GenerationConfig

    from hir_trl.step.sampling import SamplingRecorder, record_sampling

    tokenizer.padding_side = "left"
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                              max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)
    inputs = tokenizer(texts[:batch], return_tensors="pt", padding=True, add_special_tokens=False)
    plain, recorded = [], []
    for r in range(repeats):
        for record, times in ((False, plain), (True, recorded)):
            torch.manual_seed(seed + r)
            recorder = SamplingRecorder(temperature)
            start = time.perf_counter()
            with torch.no_grad():
                if record:
                    with record_sampling(model, recorder):
                        model.generate(**inputs, generation_config=config)
                else:
                    model.generate(**inputs, generation_config=config)
            times.append(time.perf_counter() - start)
    return {"batch": batch, "repeats": repeats, "seconds_without": statistics.median(plain),
            "seconds_with": statistics.median(recorded),
            "ratio": statistics.median(w / p for w, p in zip(recorded, plain))}


def pass_entropies(model, sample, temperature):
    """Exact entropies of one completion from a full no-grad forward (the pass the recorder replaces)."""
    import torch

    ids = torch.cat([sample["prompt_ids"], torch.tensor(sample["ids"])]).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(sample["prompt_ids"]) - 1: -1].float() / temperature
    logp = logits.log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def agreement(verdicts, exact, estimate, m, k, lam, selection):
    """How often Algorithm 1 picks the same replays with the estimate as with the exact F_div (per group)."""
    from hir_trl.step.replay import replay_candidates, select_replays

    a = select_replays(verdicts, exact, m, k, lam, selection=selection)
    b = select_replays(verdicts, estimate, m, k, lam, selection=selection)
    candidates = set(replay_candidates(verdicts))
    same = overlap = chosen = contested = same_contested = 0
    for g, (x, y) in enumerate(zip(a, b)):
        x, y = {c.index for c in x}, {c.index for c in y}
        if not x:
            continue
        chosen += 1
        same += x == y
        overlap += len(x & y) / len(x)
        if sum(1 for r in range(g * m, (g + 1) * m) if r in candidates) > k:  # a real choice among > k candidates
            contested += 1
            same_contested += x == y
    return {"lambda": lam, "selection": selection, "groups_with_replays": chosen,
            "identical_sets": same / max(chosen, 1), "mean_overlap": overlap / max(chosen, 1),
            "groups_with_more_candidates_than_k": contested,
            "identical_sets_when_more_than_k": same_contested / contested if contested else None}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, default=REPO_ROOT / "benchmarks" / ".cache")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--m", type=int, default=6)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pass-check", type=int, default=64, help="completions checked against a no-grad pass")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--overhead-batch", type=int, default=24, help="sequences per generate (HiR: 4 prompts x 6)")
    parser.add_argument("--overhead-repeats", type=int, default=15)
    parser.add_argument("--overhead-only", action="store_true", help="measure only the recorder's cost")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results-fdiv")
    ns = parser.parse_args(argv)

    import torch
    from scipy.stats import spearmanr
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hir_trl import load_hir_dataset
    from hir_trl.rewards import ConstraintReward

    torch.set_num_threads(ns.threads)
    start = time.time()
    task_dir = _task_dir(ns.cache_dir)
    model = AutoModelForCausalLM.from_pretrained(task_dir / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(task_dir / "model")
    rows = load_hir_dataset(task_dir / "rl_prompts.jsonl").select(range(ns.prompts))
    texts = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    groups = [t for t in texts[: max(1, ns.overhead_batch // ns.m)] for _ in range(ns.m)]
    overhead = recorder_overhead(model, tokenizer, groups, ns.overhead_batch, ns.temperature, ns.max_new_tokens,
                                 ns.overhead_repeats, ns.seed)
    if ns.overhead_only:
        print(json.dumps({"recorder_overhead": overhead}, indent=1))
        return
    samples = sample_with_recorder(model, tokenizer, texts, ns.m, ns.temperature, ns.max_new_tokens,
                                   ns.batch_size, ns.seed)
    responses = tokenizer.batch_decode([s["ids"] for s in samples], skip_special_tokens=True)
    expanded = [r for r in rows for _ in range(ns.m)]
    matrix = ConstraintReward().verify([r["prompt"] for r in expanded], responses,
                                       [r["constraints"] for r in expanded])
    verdicts = [matrix.passed(i) for i in range(len(samples))]

    max_diff = 0.0
    for s in samples[: ns.pass_check]:
        max_diff = max(max_diff, (pass_entropies(model, s, ns.temperature) - s["entropies"]).abs().max().item())

    report = {"task_dir": str(task_dir), "prompts": ns.prompts, "m": ns.m, "k": ns.k,
              "temperature": ns.temperature, "max_new_tokens": ns.max_new_tokens, "responses": len(samples),
              "tokens": sum(len(s["ids"]) for s in samples), "ila": sum(matrix.ila()) / len(samples),
              "recorded_vs_pass_max_abs_entropy_diff": max_diff, "recorder_overhead": overhead,
              "aggregations": {}}
    for aggregation in ("mean", "sum"):
        def f_div(values, aggregation=aggregation):
            return float(values.sum() / (len(values) if aggregation == "mean" else 1)) if len(values) else 0.0

        exact = [f_div(s["entropies"]) for s in samples]
        estimate = [f_div(-s["logps"]) for s in samples]
        pooled = spearmanr(exact, estimate).statistic
        within = [spearmanr(exact[g: g + ns.m], estimate[g: g + ns.m]).statistic
                  for g in range(0, len(samples), ns.m)]
        within = [x for x in within if x == x]  # groups with constant values have no rank correlation
        candidates = [i for i, v in enumerate(verdicts) if 0 < sum(v) < len(v)]
        within_candidates = []
        for g in range(0, len(samples), ns.m):
            idx = [i for i in candidates if g <= i < g + ns.m]
            if len(idx) > 2:
                rho = spearmanr([exact[i] for i in idx], [estimate[i] for i in idx]).statistic
                if rho == rho:
                    within_candidates.append(rho)
        errors = torch.tensor(estimate) - torch.tensor(exact)
        rng = random.Random(ns.seed)
        shuffled = []
        for g in range(0, len(samples), ns.m):
            block = exact[g: g + ns.m]
            shuffled += rng.sample(block, len(block))
        lambdas = (2.0, 2.0 * 1.05 ** 32, 2.0 * 1.05 ** 127)
        report["aggregations"][aggregation] = {
            "spearman_all_responses": pooled,
            "spearman_within_group_mean": sum(within) / len(within),
            "spearman_within_group_candidates_mean": (sum(within_candidates) / len(within_candidates)
                                                      if within_candidates else None),
            "f_div_exact_mean": sum(exact) / len(exact), "f_div_estimate_mean": sum(estimate) / len(estimate),
            "estimate_minus_exact_std": errors.std().item(),
            "agreement": [agreement(verdicts, exact, estimate, ns.m, ns.k, lam, "curriculum") for lam in lambdas]
            + [agreement(verdicts, exact, estimate, ns.m, ns.k, 0.0, "diversity")],
            "agreement_shuffled_f_div": [agreement(verdicts, exact, shuffled, ns.m, ns.k, lam, "curriculum")
                                         for lam in lambdas]
            + [agreement(verdicts, exact, shuffled, ns.m, ns.k, 0.0, "diversity")],
        }
    report["seconds"] = time.time() - start
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "fdiv_estimate.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
