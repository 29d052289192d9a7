"""A learnable synthetic multi-constraint instruction-following task, and a tiny SFT'd model for it.

Prompts are rows in hir-trl's native format (see `hir_trl.data.loading`): a short writing task x ("Write a short note
about the harbor.") and 3-6 IFEval constraints from eight families, each constraint's text being its checker's own
``build_description()``. Every constraint is checked by hir-trl's IFEval verifiers, nothing else.

================ ========================================= ==============================================
short name       IFEval id                                 kwargs drawn from
================ ========================================= ==============================================
``no_comma``     ``punctuation:no_comma``                  -
``words``        ``length_constraints:number_words``       less than 12/16/20, at least 24/30/36
``keyword``      ``keywords:existence``                    one of 16 rare nouns
``forbidden``    ``keywords:forbidden_words``              one of 7 filler words the default text uses
``end_phrase``   ``startend:end_checker``                  one of 4 closing phrases
``bullets``      ``detectable_format:number_bullet_lists`` 2, 3 or 4
``capitals``     ``change_case:capital_word_frequency``    at least 2 or 3
``postscript``   ``detectable_content:postscript``         ``P.S.``
================ ========================================= ==============================================

Responses are written by a small programmatic writer (`render_response`) from a plan that says, for every
constraint of the prompt, whether to meet it or to break it; constraints absent from the prompt get the writer's
default behaviour (commas half of the time, filler words, a random length...). Every rendered response is checked
with the real verifiers and kept only when its verdicts are exactly the planned ones, and every prompt is kept only
when the writer can meet all of its constraints at once (so ILA = 1 is reachable).

The SFT targets meet a random subset of the prompt's constraints (each one with probability
``TaskConfig.sft_satisfy_prob``), so the warm-started model is partially competent by construction: it has seen
every behaviour, and it follows each constraint with roughly that probability. RL then has to raise the
probability of meeting every constraint at once (ILA).

`ensure_sft_model` builds the tokenizer and the random-init Qwen2 model (`hir_trl.models.tiny.build_tiny_model`), runs a
plain-PyTorch SFT on CPU, measures held-out ILA/CLA, and caches the checkpoint and the prompt files under
``benchmarks/.cache/task-<hash of TaskConfig>/``: later runs with the same configuration reuse it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hir_trl.data.templates import join_instruction
from hir_trl.verifiers import verify_constraint
from hir_trl.verifiers.ifeval import build_checker

CACHE_ROOT = Path(__file__).resolve().parents[1] / ".cache"

# ------------------------------------------------------------------------------------------------ vocabulary

TOPICS = ("river", "garden", "market", "train", "library", "forest", "bakery", "bridge", "castle", "village",
          "museum", "beach", "school", "island", "farm", "kitchen", "station", "harvest", "concert", "mountain",
          "festival", "stadium", "theater", "valley")
ADJECTIVES = ("calm", "busy", "quiet", "bright", "old", "warm", "cold", "green", "large", "small", "clean", "open",
              "famous", "lovely")
VERBS = ("visit", "watch", "like", "paint", "clean", "build", "find", "love", "enjoy", "remember")
TIMES = ("in the morning", "at night", "every week", "after lunch", "in spring", "on weekends")
#: Filler words the default writer uses; ``keywords:forbidden_words`` forbids one of them.
FILLERS = ("very", "really", "just", "also", "good", "nice", "today")
#: Rare nouns for ``keywords:existence`` (never written unless a prompt asks for them).
KEYWORDS = ("lantern", "harbor", "violet", "copper", "meadow", "thunder", "velvet", "orbit", "candle", "pepper",
            "marble", "falcon", "cactus", "glacier", "saddle", "tunnel")
#: All-capital adverbs for ``change_case:capital_word_frequency``.
CAPITALS = ("SO", "TRULY", "QUITE", "VASTLY", "ALWAYS")
END_PHRASES = ("Any other questions?", "Peace!", "That is all for now.", "Hope this helps.")
WORD_BOUNDS = (("less than", 12), ("less than", 16), ("less than", 20), ("at least", 24), ("at least", 30),
               ("at least", 36))
#: Word-count range of the writer's default response (no length constraint).
DEFAULT_WORDS = (8, 36)

# ------------------------------------------------------------------------------------------------ families

#: short name -> IFEval instruction id, in heatmap order.
FAMILIES: dict[str, str] = {
    "no_comma": "punctuation:no_comma",
    "words": "length_constraints:number_words",
    "keyword": "keywords:existence",
    "forbidden": "keywords:forbidden_words",
    "end_phrase": "startend:end_checker",
    "bullets": "detectable_format:number_bullet_lists",
    "capitals": "change_case:capital_word_frequency",
    "postscript": "detectable_content:postscript",
}
FAMILY_OF_ID = {v: k for k, v in FAMILIES.items()}


def _sample_kwargs(family: str, rng: random.Random) -> dict[str, Any]:
    if family == "no_comma":
        return {}
    if family == "words":
        relation, n = rng.choice(WORD_BOUNDS)
        return {"relation": relation, "num_words": n}
    if family == "keyword":
        return {"keywords": [rng.choice(KEYWORDS)]}
    if family == "forbidden":
        return {"forbidden_words": [rng.choice(FILLERS)]}
    if family == "end_phrase":
        return {"end_phrase": rng.choice(END_PHRASES)}
    if family == "bullets":
        return {"num_bullets": rng.choice((2, 3, 4))}
    if family == "capitals":
        return {"capital_frequency": rng.choice((2, 3)), "capital_relation": "at least"}
    if family == "postscript":
        return {"postscript_marker": "P.S."}
    raise KeyError(family)


@dataclass(frozen=True)
class TaskConfig:
    """Everything that determines the task data and the SFT checkpoint (its hash keys the cache).

    Attributes:
        seed: seed of the prompt pools, the SFT targets, the model initialisation and the SFT order.
        min_constraints / max_constraints: constraints per prompt (distinct families).
        num_rl_prompts: size of the RL training prompt pool.
        num_eval_prompts: held-out prompts (never used for SFT or RL training).
        num_sft_examples: SFT (prompt, response) pairs, on their own prompt pool.
        sft_satisfy_prob: probability that an SFT target meets each of its prompt's constraints.
        vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size: the Qwen2 model.
        sft_epochs, sft_lr, sft_batch_size: plain-PyTorch SFT (AdamW, linear warm-up, cosine decay).
    """

    seed: int = 0
    min_constraints: int = 3
    max_constraints: int = 6
    num_rl_prompts: int = 2048
    num_eval_prompts: int = 128
    num_sft_examples: int = 4000
    sft_satisfy_prob: float = 0.6
    vocab_size: int = 1024
    hidden_size: int = 192
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 576
    sft_epochs: int = 6
    sft_lr: float = 3e-3
    sft_batch_size: int = 32

    def key(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True) + f"|writer-v{WRITER_VERSION}"
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


#: Bump when the writer or the prompt sampler changes, so that old caches are not reused.
WRITER_VERSION = 2

# ------------------------------------------------------------------------------------------------ prompts


def make_constraint(family: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A native-format constraint whose text is the checker's own description."""
    instruction_id = FAMILIES[family]
    return {"text": build_checker(instruction_id, kwargs).build_description(), "family": "ifeval",
            "instruction_id": instruction_id, "kwargs": kwargs}


def constraint_families(row: dict[str, Any]) -> list[str]:
    return [FAMILY_OF_ID[c["instruction_id"]] for c in row["constraints"]]


def _kwargs(constraint: dict[str, Any]) -> dict[str, Any]:
    kwargs = constraint["kwargs"]
    return json.loads(kwargs) if isinstance(kwargs, str) else dict(kwargs)


def sample_prompt(rng: random.Random, cfg: TaskConfig, index: str) -> dict[str, Any]:
    """A native row with 3-6 constraints that the writer can meet all at once."""
    while True:
        topic = rng.choice(TOPICS)
        count = rng.randint(cfg.min_constraints, cfg.max_constraints)
        families = rng.sample(list(FAMILIES), count)
        row = {"id": index, "task": f"Write a short note about the {topic}.", "topic": topic,
               "constraints": [make_constraint(f, _sample_kwargs(f, rng)) for f in families], "template": "plain"}
        if render_response(row, [True] * count, rng) is not None:
            return row


def prompt_text(row: dict[str, Any]) -> str:
    return join_instruction(row["task"], [c["text"] for c in row["constraints"]], row["template"])


def verdicts(row: dict[str, Any], response: str) -> list[bool]:
    """Verdict of each of the row's constraints on ``response`` (hir-trl's IFEval verifiers)."""
    prompt = prompt_text(row)
    return [verify_constraint("ifeval", c["instruction_id"], _kwargs(c), response, prompt).passed
            for c in row["constraints"]]


# ------------------------------------------------------------------------------------------------ writer


def _sentence(rng: random.Random, topic: str, comma: bool, avoid: set[str], capital: str | None = None) -> str:
    """One body sentence. ``avoid``: filler words it must not contain; ``capital``: an all-caps adverb."""

    def filler(options: Sequence[str], p: float = 0.4) -> str:
        allowed = [w for w in options if w not in avoid]
        return rng.choice(allowed) + " " if allowed and rng.random() < p else ""

    adj = rng.choice(ADJECTIVES)
    if capital is not None:
        if comma:
            return f"The {topic} is {capital} {adj}, {rng.choice(ADJECTIVES)} and {rng.choice(ADJECTIVES)}."
        return f"The {topic} is {capital} {adj}."
    if comma:
        form = rng.randrange(3)
        if form == 0:
            return f"The {topic} is {filler(('very', 'really'))}{adj}, {rng.choice(ADJECTIVES)} and {rng.choice(ADJECTIVES)}."
        if form == 1:
            return f"In the end, we {filler(('just', 'also'))}{rng.choice(VERBS)} the {topic}."
        return f"Yes, it is a {filler(('good', 'nice'), 0.6)}{topic}."
    form = rng.randrange(4)
    if form == 0:
        return f"The {topic} is {filler(('very', 'really'))}{adj}."
    if form == 1:
        return f"We {filler(('just', 'also'))}{rng.choice(VERBS)} the {topic} {rng.choice(TIMES)}."
    if form == 2:
        return f"It is a {filler(('good', 'nice'), 0.6)}{adj} {topic}."
    when = "today" if "today" not in avoid and rng.random() < 0.4 else rng.choice(TIMES)
    return f"People {rng.choice(VERBS)} the {topic} {when}."


def _forced_filler_sentence(rng: random.Random, topic: str, word: str) -> str:
    if word in ("very", "really"):
        return f"The {topic} is {word} {rng.choice(ADJECTIVES)}."
    if word in ("just", "also"):
        return f"We {word} {rng.choice(VERBS)} the {topic}."
    if word in ("good", "nice"):
        return f"It is a {word} {topic}."
    return f"We {rng.choice(VERBS)} the {topic} today."


def _words(text: str) -> int:
    from hir_trl.verifiers.text import count_words

    return count_words(text)


def _plan(row: dict[str, Any], satisfy: Sequence[bool], rng: random.Random) -> dict[str, Any]:
    """What the response does for each constraint type (meet/break a prompt constraint, else the default)."""
    plan: dict[str, Any] = {
        "comma": rng.random() < 0.5,
        "bullets": rng.choice((0, 0, 0, 2, 3, 4)),
        "keywords": [],
        "avoid": set(),
        "force": None,
        "capitals": rng.choice((0, 0, 0, 1)),
        "end": rng.choice(END_PHRASES) if rng.random() < 0.1 else None,
        "postscript": rng.random() < 0.1,
        "words": DEFAULT_WORDS,
    }
    for c, ok in zip(row["constraints"], satisfy):
        family, kw = FAMILY_OF_ID[c["instruction_id"]], _kwargs(c)
        if family == "no_comma":
            plan["comma"] = not ok
        elif family == "words":
            n = kw["num_words"]
            below, above = (max(4, n - 10), n - 1), (n, n + 10)
            if kw["relation"] == "less than":
                plan["words"] = below if ok else above
            else:
                plan["words"] = above if ok else below
        elif family == "keyword":
            if ok:
                plan["keywords"] = list(kw["keywords"])
        elif family == "forbidden":
            if ok:
                plan["avoid"] |= set(kw["forbidden_words"])
            else:
                plan["force"] = rng.choice(kw["forbidden_words"])
        elif family == "end_phrase":
            others = [p for p in END_PHRASES if p != kw["end_phrase"]]
            plan["end"] = kw["end_phrase"] if ok else (rng.choice(others) if rng.random() < 0.3 else None)
        elif family == "bullets":
            n = kw["num_bullets"]
            plan["bullets"] = n if ok else rng.choice([x for x in (0, 0, n - 1, n + 1) if x >= 0 and x != n])
        elif family == "capitals":
            n = kw["capital_frequency"]
            plan["capitals"] = n + rng.choice((0, 0, 1)) if ok else rng.randrange(0, n)
        elif family == "postscript":
            plan["postscript"] = ok
    return plan


def _render_once(row: dict[str, Any], plan: dict[str, Any], rng: random.Random) -> str:
    topic = row["topic"]
    avoid, comma = plan["avoid"], plan["comma"]
    lo, hi = plan["words"]
    target = rng.randint(lo, hi)
    # Fixed parts.
    bullets = [f"* {rng.choice(ADJECTIVES)} {rng.choice(('views', 'people', 'food', 'music', 'streets'))}"
               for _ in range(plan["bullets"])]
    ps = f"P.S. We {rng.choice(VERBS)} the {topic}." if plan["postscript"] else None
    end = plan["end"]
    # The keyword in quotes is the same token as in the prompt's "['lantern']" (the tokenizer splits "['" off),
    # so writing it is a copy of a prompt token, as for the topic and the end phrase.
    special = [f"We saw a '{kw}' near the {topic}." for kw in plan["keywords"]]
    if plan["force"] is not None:
        special.append(_forced_filler_sentence(rng, topic, plan["force"]))
    capitals = [rng.choice(CAPITALS) for _ in range(max(0, plan["capitals"] - (1 if ps else 0)))]
    body: list[str] = []
    comma_slot = rng.randrange(1 + len(capitals) + 1) if comma else -1
    for i, cap in enumerate(capitals):
        body.append(_sentence(rng, topic, comma and i == comma_slot, avoid, capital=cap))
    body.extend(special)
    rng.shuffle(body)

    def assemble(body_sentences: list[str]) -> str:
        lines = []
        if body_sentences:
            lines.append(" ".join(body_sentences[: max(1, len(body_sentences) // 2)]))
        lines.extend(bullets)
        rest = body_sentences[max(1, len(body_sentences) // 2):]
        if rest:
            lines.append(" ".join(rest))
        if ps:
            lines.append(ps)
        if end:  # on the last line, after a space: the same tokens as in the prompt's description
            if lines:
                lines[-1] = f"{lines[-1]} {end}"
            else:
                lines.append(end)
        return "\n".join(lines)

    has_comma = any("," in s for s in body)
    while _words(assemble(body)) < target or (comma and not has_comma) or not body:
        add_comma = comma and not has_comma
        sentence = _sentence(rng, topic, add_comma, avoid)
        body.insert(rng.randrange(len(body) + 1), sentence)
        has_comma = has_comma or add_comma
        if len(body) > 20:
            break
    return assemble(body)


def render_response(row: dict[str, Any], satisfy: Sequence[bool], rng: random.Random,
                    tries: int = 40) -> str | None:
    """A response whose verdicts on ``row``'s constraints are exactly ``satisfy``, or None after ``tries``."""
    for _ in range(tries):
        plan = _plan(row, satisfy, rng)
        text = _render_once(row, plan, rng)
        if verdicts(row, text) == list(satisfy):
            return text
    return None


# ------------------------------------------------------------------------------------------------ data files


def to_native(row: dict[str, Any]) -> dict[str, Any]:
    """The native JSONL row `hir_trl.load_hir_dataset` reads (the writer's ``topic`` is dropped)."""
    return {"id": row["id"], "task": row["task"], "constraints": row["constraints"], "template": row["template"]}


def build_data(cfg: TaskConfig, eval_only: bool = False) -> dict[str, Any]:
    """Three disjoint prompt pools (SFT, RL, held-out eval) and the SFT targets; with ``eval_only``, the held-out
    pool alone (drawn first, so it is the same)."""
    rng = random.Random(cfg.seed)
    seen: set[str] = set()

    def pool(name: str, n: int) -> list[dict[str, Any]]:
        rows = []
        while len(rows) < n:
            row = sample_prompt(rng, cfg, f"{name}-{len(rows)}")
            text = prompt_text(row)
            if text in seen:
                continue
            seen.add(text)
            rows.append(row)
        return rows

    eval_rows = pool("eval", cfg.num_eval_prompts)
    if eval_only:
        return {"eval": eval_rows}
    rl_rows = pool("rl", cfg.num_rl_prompts)
    sft_rows = pool("sft", cfg.num_sft_examples)
    sft = []
    for row in sft_rows:
        for _ in range(20):
            satisfy = [rng.random() < cfg.sft_satisfy_prob for _ in row["constraints"]]
            response = render_response(row, satisfy, rng)
            if response is not None:
                sft.append({"prompt": prompt_text(row), "response": response, "satisfy": satisfy})
                break
    return {"eval": eval_rows, "rl": rl_rows, "sft": sft}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# ------------------------------------------------------------------------------------------------ held-out eval


def score_responses(rows: Sequence[dict[str, Any]], responses: Sequence[str]) -> dict[str, Any]:
    """ILA, CLA and per-family accuracy of ``responses[i]`` on ``rows[i]`` (hir-trl's `ConstraintReward`), and
    ``"passed"``: each completion's verdicts as a `verdict_string`."""
    from hir_trl.data.loading import normalize_native_row
    from hir_trl.rewards import ConstraintReward

    normalized = [normalize_native_row(to_native(r), i) for i, r in enumerate(rows)]
    matrix = ConstraintReward().verify([n["prompt"] for n in normalized], list(responses),
                                       [n["constraints"] for n in normalized])
    per_family: dict[str, list[float]] = {f: [] for f in FAMILIES}
    for r, n in enumerate(normalized):
        for c, ok in zip(n["constraints"], matrix.passed(r)):
            per_family[FAMILY_OF_ID[c["instruction_id"]]].append(float(ok))
    ila, cla = matrix.ila(), matrix.cla()
    return {"ila": sum(ila) / len(ila), "cla": sum(cla) / len(cla),
            "family": {f: (sum(v) / len(v) if v else float("nan")) for f, v in per_family.items()},
            "passed": [verdict_string(matrix.passed(r)) for r in range(len(normalized))]}


def verdict_string(passed: Sequence[bool]) -> str:
    """One completion's verdicts, a '1' or '0' per constraint in the row's order."""
    return "".join("1" if ok else "0" for ok in passed)


def sample_responses(model, tokenizer, rows: Sequence[dict[str, Any]], samples: int = 1, temperature: float = 1.0,
                     max_new_tokens: int = 96, batch_size: int = 64, seed: int = 1234) -> tuple[list, list[str]]:
    """Sample ``samples`` responses per row (plain ``generate``, no top-k/top-p), under a forked, seeded RNG.

    Returns:
        (rows repeated per sample, responses).
    """
    import torch

    device = next(model.parameters()).device
    expanded = [r for r in rows for _ in range(samples)]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": prompt_text(r)}], tokenize=False,
                                           add_generation_prompt=True) for r in expanded]
    responses: list[str] = []
    was_training = model.training
    model.eval()
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(texts), batch_size):
                enc = tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True,
                                add_special_tokens=False).to(device)
                kwargs = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else \
                    dict(do_sample=False)
                out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                     eos_token_id=tokenizer.eos_token_id, **kwargs)
                responses += tokenizer.batch_decode(out[:, enc["input_ids"].size(1):], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = padding_side
        if was_training:
            model.train()
    return expanded, responses


# ------------------------------------------------------------------------------------------------ SFT


def _sft(model, tokenizer, examples: list[dict[str, Any]], cfg: TaskConfig, log) -> dict[str, Any]:
    import torch

    eos = tokenizer.eos_token
    encoded = []
    for ex in examples:
        prompt_ids = tokenizer.apply_chat_template([{"role": "user", "content": ex["prompt"]}], tokenize=True,
                                                   add_generation_prompt=True)
        if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "input_ids"):
            prompt_ids = prompt_ids["input_ids"]
        response_ids = tokenizer(ex["response"] + eos, add_special_tokens=False)["input_ids"]
        encoded.append((list(prompt_ids), response_ids))
    rng = random.Random(cfg.seed)
    steps_per_epoch = math.ceil(len(encoded) / cfg.sft_batch_size)
    total = steps_per_epoch * cfg.sft_epochs
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, total // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total))))
    pad = tokenizer.pad_token_id
    model.train()
    step, start = 0, time.time()
    losses = []
    for epoch in range(cfg.sft_epochs):
        order = list(range(len(encoded)))
        rng.shuffle(order)
        # length-bucketed batches: sort chunks of 8 batches by length to cut padding
        chunk = cfg.sft_batch_size * 8
        batches = []
        for c in range(0, len(order), chunk):
            part = sorted(order[c:c + chunk], key=lambda i: len(encoded[i][0]) + len(encoded[i][1]))
            batches += [part[b:b + cfg.sft_batch_size] for b in range(0, len(part), cfg.sft_batch_size)]
        rng.shuffle(batches)
        for batch in batches:
            seqs = [encoded[i][0] + encoded[i][1] for i in batch]
            width = max(len(s) for s in seqs)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                p, y = encoded[i]
                ids[r, : len(p) + len(y)] = torch.tensor(p + y)
                labels[r, len(p): len(p) + len(y)] = torch.tensor(y)
                mask[r, : len(p) + len(y)] = 1
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step += 1
            if step % 50 == 0 or step == total:
                log(f"  sft step {step}/{total} epoch {epoch} loss {sum(losses[-50:]) / len(losses[-50:]):.4f} "
                    f"({time.time() - start:.0f}s)")
    model.eval()
    return {"steps": step, "final_loss": sum(losses[-50:]) / len(losses[-50:]), "seconds": time.time() - start}


def cache_dir(cfg: TaskConfig, root: Path | None = None) -> Path:
    return (root or CACHE_ROOT) / f"task-{cfg.key()}"


def ensure_sft_model(cfg: TaskConfig, root: Path | None = None, log=print, threads: int | None = None,
                     starts_dir: Path | None = None) -> Path:
    """Build (once) the task data, tokenizer, random-init model and its SFT; return the cache directory.

    The directory holds ``model/`` (a Hugging Face checkpoint), ``rl_prompts.jsonl`` and ``eval_prompts.jsonl``
    (native hir-trl rows), ``sft.jsonl`` and ``meta.json`` (the config, SFT loss and time, and the SFT'd model's
    held-out ILA/CLA). A directory with ``meta.json`` is reused as is. Where a start of this configuration is stored
    (``benchmarks/learning/starts.py``, ``starts_dir``), it is unpacked and checked instead of rebuilt: SFT is not
    bit-reproducible across CPU vendors, the stored bytes are.

    Raises:
        starts.StoredStartError: a registered stored start whose archive is missing or not the registered bytes.
    """
    from benchmarks.learning import starts

    def build(out: Path) -> None:
        if starts.restore(cfg.key(), out, starts_dir) is not None:
            log(f"task-{cfg.key()}: the stored start, unpacked and checked (no rebuild)")
            return
        _build(cfg, out, log)

    return build_cached(cache_dir(cfg, root), build, threads)


def build_cached(out: Path, build, threads: int | None = None) -> Path:
    """Run ``build(out)`` unless ``out/meta.json`` exists (``build`` writes it last); return ``out``.

    A file lock ``<out>.lock`` makes concurrent callers wait for one build; ``threads`` sets torch's thread count
    for the build (restored afterwards).
    """
    import torch
    from filelock import FileLock

    if (out / "meta.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    previous_threads = torch.get_num_threads()
    try:
        with FileLock(str(out) + ".lock"):
            if (out / "meta.json").is_file():
                return out
            if threads:
                torch.set_num_threads(threads)
            build(out)
    finally:
        torch.set_num_threads(previous_threads)
    return out


def _build(cfg: TaskConfig, out: Path, log) -> None:
    import torch

    t0 = time.time()
    log(f"building task data ({cfg.key()}) ...")
    data = build_data(cfg)
    write_jsonl(out / "rl_prompts.jsonl", [to_native(r) for r in data["rl"]])
    write_jsonl(out / "eval_prompts.jsonl", [to_native(r) for r in data["eval"]])
    write_jsonl(out / "eval_rows.jsonl", data["eval"])
    write_jsonl(out / "sft.jsonl", data["sft"])
    t_data = time.time() - t0
    log(f"  {len(data['sft'])} SFT examples, {len(data['rl'])} RL prompts, {len(data['eval'])} eval prompts "
        f"({t_data:.0f}s)")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hir_trl.models.tiny import build_tiny_model

    texts = [ex["prompt"] for ex in data["sft"]] + [ex["response"] for ex in data["sft"]]
    model_dir = out / "model"
    build_tiny_model(model_dir, texts, vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                     num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                     num_key_value_heads=cfg.num_kv_heads, intermediate_size=cfg.intermediate_size,
                     max_position_embeddings=512, seed=cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    log(f"  model: {params / 1e6:.2f}M parameters, vocabulary {len(tokenizer)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        sft_stats = _sft(model, tokenizer, data["sft"], cfg, log)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)

    rows, responses = sample_responses(model, tokenizer, data["eval"], samples=1)
    scores = score_responses(rows, responses)
    lengths = [len(tokenizer(r, add_special_tokens=False)["input_ids"]) for r in responses]
    meta = {"config": dataclasses.asdict(cfg), "key": cfg.key(), "parameters": params,
            "vocab_size": len(tokenizer), "sft": sft_stats, "data_seconds": t_data,
            "eval_sft_model": scores, "eval_mean_response_tokens": sum(lengths) / len(lengths),
            "eval_max_response_tokens": max(lengths), "total_seconds": time.time() - t0,
            "example_responses": responses[:4]}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    log(f"  SFT'd model on held-out prompts: ILA {scores['ila']:.3f} CLA {scores['cla']:.3f} "
        f"(mean response {meta['eval_mean_response_tokens']:.0f} tokens); {meta['total_seconds']:.0f}s in all")

