"""``hir-trl plan``: its figures against hand arithmetic (the tiny model and the paper models' published shapes),
against accelerate's own counts where accelerate has them, and its verdict on every GPU command of the docs."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from hir_trl.cli.main import main
from hir_trl.cli.plan import (
    GIB,
    USABLE_FRACTION,
    ModelShape,
    Sharding,
    batch_plan,
    disk_plan,
    judge_plan,
    launch_command_args,
    memory_plan,
    model_shape,
    sharding_from_files,
    state_bytes_per_parameter,
)

from ..testing_utils import REPO_ROOT

QWEN7B = "Qwen/Qwen2.5-7B-Instruct"
PAPER_RECIPE = str(REPO_ROOT / "recipes" / "Qwen2.5-7B-Instruct" / "hir" / "config_paper.yaml")
ZERO3 = str(REPO_ROOT / "recipes" / "accelerate_configs" / "zero3.yaml")
#: Parameter counts of the published checkpoints (their model cards / safetensors index totals).
PUBLISHED_PARAMETERS = {QWEN7B: 7_615_616_512, "meta-llama/Llama-3.2-3B-Instruct": 3_212_749_824,
                        "Qwen/Qwen3-4B-Instruct-2507": 4_022_468_096,
                        "HuggingFaceTB/SmolLM2-135M-Instruct": 134_515_008}


def plan(capsys, *argv):
    code = main(["plan", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------------ the model shapes


@pytest.mark.parametrize("model", sorted(PUBLISHED_PARAMETERS))
def test_shipped_shapes_count_the_published_parameters(model):
    assert model_shape(model).parameters() == PUBLISHED_PARAMETERS[model]


@pytest.mark.parametrize("model", [*sorted(PUBLISHED_PARAMETERS), "tiny"])
def test_parameter_count_equals_accelerates_meta_model(model, tmp_path):
    """The hand formula against the model transformers builds from the same config on the meta device, as
    accelerate's ``estimate-memory`` builds it, and against that command's size count: no weights."""
    import torch
    import yaml
    from accelerate import init_empty_weights
    from accelerate.utils import calculate_maximum_sizes
    from transformers import AutoConfig, AutoModelForCausalLM

    if model == "tiny":
        shape = model_shape("outputs/none", build_model="tiny")
        config = {"model_type": "qwen2", "vocab_size": shape.vocab, "hidden_size": shape.hidden,
                  "intermediate_size": shape.intermediate, "num_hidden_layers": shape.layers,
                  "num_attention_heads": shape.heads, "num_key_value_heads": shape.kv_heads,
                  "tie_word_embeddings": True}
    else:
        config = yaml.safe_load((REPO_ROOT / "recipes" / "model_shapes.yaml").read_text())[model]
        shape = model_shape(model)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with init_empty_weights():  # what accelerate's create_empty_model does, without its Hub lookup
        empty = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path), dtype=torch.float32)
    empty.tie_weights()  # on the meta device transformers leaves tied embeddings untied until asked
    assert sum(p.numel() for p in empty.parameters()) == shape.parameters()
    total_bytes, _ = calculate_maximum_sizes(empty)  # estimate-memory's "Total Size" in float32
    assert total_bytes - sum(b.numel() * b.element_size() for b in empty.buffers()) == 4 * shape.parameters()
    assert model_shape(str(tmp_path)).parameters() == shape.parameters()  # a local folder's config.json


SMALL_MOE = {  # Qwen3-30B-A3B's layout (128 experts, 8 per token, q/k norms, untied), scaled down
    "qwen3_moe": dict(model_type="qwen3_moe", vocab_size=256, hidden_size=32, intermediate_size=96,
                      moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=8, num_experts=8, num_experts_per_tok=2, tie_word_embeddings=False),
    "mixtral": dict(model_type="mixtral", vocab_size=256, hidden_size=32, intermediate_size=48,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                    num_experts_per_tok=2, tie_word_embeddings=False),
}


@pytest.mark.parametrize("model_type", sorted(SMALL_MOE))
def test_a_mixture_of_experts_counts_every_expert(model_type):
    """A scaled-down MoE config: plan's count equals the numel of the model transformers instantiates (real
    weights, on CPU) from the same config; a dense formula would count one MLP per layer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = SMALL_MOE[model_type]
    shape = ModelShape.from_config(config, name=model_type)
    torch.manual_seed(0)
    real = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    assert shape.parameters() == sum(p.numel() for p in real.parameters())
    h, layers, experts = config["hidden_size"], config["num_hidden_layers"], config.get("num_experts", 4)
    per_expert = 3 * h * config.get("moe_intermediate_size", config["intermediate_size"])
    assert shape.parameters() > layers * experts * per_expert  # every expert is there
    assert shape.layer_parameters() == sum(p.numel() for p in real.model.layers[0].parameters())


def test_the_qwen3_30b_a3b_shape_counts_30_5b():
    """Qwen3-30B-A3B's published config.json fields: 30.5B parameters (its model card), not the 3.3B of its active
    parameters' dense look-alike."""
    shape = ModelShape.from_config(dict(
        model_type="qwen3_moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, tie_word_embeddings=False, max_position_embeddings=40960), name="Qwen3-30B-A3B")
    assert round(shape.parameters() / 1e9, 1) == 30.5


def test_a_config_transformers_does_not_know_is_one_line(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(dict(SMALL_MOE["mixtral"], model_type="no_such_model")))
    code, out, err = plan(capsys, "--config", PAPER_RECIPE, "--model_config", tmp_path / "config.json")
    assert code == 2 and err.count("\n") == 1 and "no_such_model" in err and "Traceback" not in err


def test_lora_dropout_copies_match_the_saved_tensors():
    """With lora_dropout > 0 each adapted layer keeps a dropped copy of its input and the mask: the bytes autograd
    saves for the backward, with dropout 0.1 less with dropout 0, against plan's count (within 5%: the rest is
    attention's own saved tensors, which change with the dropout's new inputs)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(model_type="qwen3", vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)

    def saved_bytes(dropout):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout,
                                                 target_modules="all-linear"))
        model.train()
        storages = {}

        def pack(tensor):
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            model(input_ids=torch.randint(0, 512, (2, 32))).logits.sum()
        return sum(storages.values())

    shape = ModelShape.from_config(config)
    planned = 2 * 32 * shape.layers * shape.lora_dropout_values_per_token("all-linear") * (4 + 1)
    assert saved_bytes(0.1) - saved_bytes(0.0) == pytest.approx(planned, rel=0.05)
    lora = dict(lora_r=16, lora_target_modules="all-linear", reference_model=False)
    with_dropout = _memory(model_shape(QWEN7B), lora_dropout=0.05, **lora)
    without = _memory(model_shape(QWEN7B), **lora)
    activations = [next(t.bytes for t in m.terms if t.name.startswith("activations")) for m in (with_dropout, without)]
    # 7B, 8 rows x 4,608 tokens, checkpointing: one layer's copies: q, k, v, o, gate, up take 3584 values a token,
    # down 18944; 2 bytes (bf16) + 1 (the mask) each
    assert activations[0] - activations[1] == 8 * 4608 * (6 * 3584 + 18944) * 3


def test_kv_cache_by_hand():
    """Qwen2.5-7B: 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes = 57,344 bytes per token; 384 sequences of
    4,096 tokens are 84 GiB, 4,608 tokens (a 512-token prompt) 94.5 GiB."""
    shape = model_shape(QWEN7B)
    assert shape.kv_bytes_per_token(2) == 28 * 4 * 128 * 2 * 2 == 57_344
    assert 384 * 4096 * shape.kv_bytes_per_token(2) == 84 * GIB
    tiny = model_shape("outputs/none", build_model="tiny")
    assert tiny.kv_bytes_per_token(4) == 2 * 2 * 16 * 2 * 4


def test_unknown_model_needs_a_config(capsys, tmp_path):
    code, out, err = plan(capsys, "--config", PAPER_RECIPE, "--model_name_or_path", "someone/unknown-model")
    assert code == 2 and err.count("\n") == 1 and "--model_config" in err and "someone/unknown-model" in err
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    code, out, err = plan(capsys, "--config", PAPER_RECIPE, "--model_config", tmp_path / "config.json")
    assert code == 2 and "hidden_size must be a positive integer" in err
    code, out, err = plan(capsys, "--config", PAPER_RECIPE, "--model_config", tmp_path / "missing.json")
    assert code == 2 and "no config.json" in err


# --------------------------------------------------------------------------------------------------- batch layout


def test_batch_of_the_paper_recipe_on_8_gpus():
    """6 rows x 8 accumulation steps x 8 ranks = 384 sampled rows = 64 prompts x m = 6, plus 64 x k = 2 slots."""
    batch = batch_plan(per_device_train_batch_size=6, gradient_accumulation_steps=8, steps_per_generation=8,
                       num_generations=6, num_replays=2, processes=8, max_completion_length=4096, resample=True,
                       dataset_rows=16_000)
    assert (batch.prompts_per_step, batch.sampled_per_step, batch.replay_slots_per_step,
            batch.trained_rows_per_step) == (64, 384, 128, 512)
    assert (batch.sequences_per_call_per_rank, batch.rows_per_micro_batch, batch.generations_per_step) == (48, 8, 1)
    assert batch.generated_tokens_per_step == 64 * 8 * 4096  # m + k samples at most (supplementary ones)
    assert batch.steps_per_epoch == 16_000 // 64


def test_batch_with_several_generation_calls_per_step():
    """The 1-GPU LoRA line: 64 accumulation steps, a generation call every 8 micro-batches."""
    batch = batch_plan(per_device_train_batch_size=6, gradient_accumulation_steps=64, steps_per_generation=8,
                       num_generations=6, num_replays=2, processes=1, max_completion_length=4096, resample=False,
                       dataset_rows=1000)
    assert (batch.prompts_per_generation, batch.sampled_per_generation, batch.sequences_per_call_per_rank) == (8, 48, 48)
    assert (batch.generations_per_step, batch.prompts_per_step, batch.trained_rows_per_step) == (8, 64, 512)
    assert batch.generated_tokens_per_step == 64 * 6 * 4096
    assert batch.steps_per_epoch == 1000 // 8 * 8 // 64  # whole generation batches, then whole steps


@pytest.mark.parametrize("per_device, steps, k", [(4, 1, 2), (3, 2, 1)])  # 4 rows; 7 rows in 2
def test_batch_that_holds_no_whole_groups_is_refused(per_device, steps, k):
    with pytest.raises(ValueError):
        batch_plan(per_device_train_batch_size=per_device, gradient_accumulation_steps=steps,
                   steps_per_generation=steps, num_generations=6, num_replays=k, processes=1,
                   max_completion_length=8, resample=False)


# --------------------------------------------------------------------------------------------------------- memory


def test_state_bytes_match_accelerates_estimate_and_deepspeeds():
    """torch AdamW in float32: accelerate's ``estimate-memory`` "float32" training (model + gradients + 2 x model);
    in bf16: 8 bytes (the issue's 61 GB for 7B); DeepSpeed bf16 adds the fp32 master copy: 16 bytes (ZeRO paper)."""
    from accelerate.commands.estimate import estimate_training_usage

    p = 1_000_000
    accelerate = estimate_training_usage(4 * p, "float32")
    assert sum(state_bytes_per_parameter(4, Sharding())) * p == (accelerate["model"] + accelerate["gradients"]
                                                                 + accelerate["optimizer"])
    assert sum(state_bytes_per_parameter(2, Sharding())) == 8
    assert round(PUBLISHED_PARAMETERS[QWEN7B] * 8 / 1e9) == 61
    assert sum(state_bytes_per_parameter(2, Sharding("deepspeed", 3))) == 16


def _memory(shape, **overrides):
    settings = dict(processes=1, sharding=Sharding(), weight_bytes=2, act_bytes=2, rows_per_micro_batch=8,
                    sequence_tokens=4608, sequences_per_call=384, generation="generate", gradient_checkpointing=True,
                    reference_model=True, gpu_gib=80)
    settings.update(overrides)
    return memory_plan(shape, **settings)


def test_memory_of_the_full_7b_on_one_gpu_by_hand():
    shape, p = model_shape(QWEN7B), PUBLISHED_PARAMETERS[QWEN7B]
    memory = _memory(shape)
    terms = {t.name.split(" (")[0]: t.bytes for t in memory.terms}
    assert terms["weights"] == terms["gradients"] == terms["reference model"] == 2 * p
    assert terms["optimizer state"] == 4 * p
    assert terms["KV cache of one generate call"] == 384 * 4608 * 57_344
    # activations: each layer keeps its input (hidden values), and one layer is recomputed: 8h + 4i values a token
    assert terms["activations"] == 8 * 4608 * 2 * (28 * 3584 + 8 * 3584 + 4 * 18944)
    assert memory.peaks["generation"] == 10 * p + 384 * 4608 * 57_344
    assert memory.budget == 80 * GIB * USABLE_FRACTION
    assert memory.fits is False and memory.breaking.name.startswith("KV cache")
    assert "steps_per_generation" in memory.breaking.fix


def test_memory_under_zero3_by_hand():
    """ZeRO-3 on 8 ranks: 16 bytes per parameter / 8, the reference model / 8; transformers generate gathers the
    full weights (TRL's ds3_gather_for_generation)."""
    shape, p = model_shape(QWEN7B), PUBLISHED_PARAMETERS[QWEN7B]
    memory = _memory(shape, processes=8, sharding=Sharding("deepspeed", 3), sequences_per_call=48)
    state = sum(t.bytes for t in memory.terms if t.phase == "state")
    assert state == pytest.approx(16 * p / 8 + 2 * p / 8)
    gathered = next(t for t in memory.terms if t.name.startswith("weights gathered"))
    assert gathered.bytes == pytest.approx(2 * p - 2 * p / 8)
    offload = _memory(shape, processes=8, sharding=Sharding("deepspeed", 3, True, True), sequences_per_call=48)
    assert sum(t.bytes for t in offload.terms if t.phase == "state") == pytest.approx(2 * p / 8)  # the reference
    assert offload.cpu_bytes == pytest.approx(16 * p / 8)
    stage2 = _memory(shape, processes=8, sharding=Sharding("deepspeed", 2), sequences_per_call=48, reference_model=False)
    assert sum(t.bytes for t in stage2.terms if t.phase == "state") == pytest.approx(2 * p + 14 * p / 8)


def test_memory_of_lora_and_qlora_by_hand():
    shape = model_shape(QWEN7B)
    linear = 28 * (3584 * 3584 * 2 + 3584 * 512 * 2 + 3 * 3584 * 18944)
    assert shape.linear_parameters() == linear
    adapters = 28 * 16 * ((3584 + 3584) * 2 + (3584 + 512) * 2 + (3584 + 18944) * 3)
    lora = _memory(shape, lora_r=16, lora_target_modules="all-linear", reference_model=False)
    names = {t.name.split(" (")[0]: t.bytes for t in lora.terms}
    assert names["LoRA adapters, gradients and AdamW state"] == adapters * 16
    assert names["base weights"] == 2 * PUBLISHED_PARAMETERS[QWEN7B]
    qlora = _memory(shape, lora_r=16, lora_target_modules="all-linear", reference_model=False, quant_bits=4,
                    nested_quant=True)
    base = next(t.bytes for t in qlora.terms if t.name.startswith("base weights"))
    assert base == pytest.approx(linear * 4.127 / 8 + (PUBLISHED_PARAMETERS[QWEN7B] - linear) * 2)
    default_targets = _memory(shape, lora_r=8, reference_model=False)  # PEFT's default: q_proj, v_proj
    assert any(t.bytes == 28 * 8 * ((3584 + 3584) + (3584 + 512)) * 16 for t in default_targets.terms)


def test_fsdp2_under_mixed_precision_trains_fp32_weights():
    """accelerate's fsdp2_prepare_model casts trainable parameters to fp32 when mixed_precision is not "no": the
    shards, gradients and AdamW moments are fp32 (16 B a parameter / N) whatever the checkpoint's dtype; the frozen
    reference model stays in bf16."""
    shape, p = model_shape(QWEN7B), PUBLISHED_PARAMETERS[QWEN7B]
    fsdp2 = REPO_ROOT / "recipes" / "accelerate_configs" / "fsdp2.yaml"
    sharding, _ = sharding_from_files(str(fsdp2), None)
    assert sharding == Sharding("fsdp", 3, upcast_trainable=True)  # the file says mixed_precision: bf16
    assert sharding_from_files(str(ZERO3), None, mixed_precision=True)[0].upcast_trainable is False
    memory = _memory(shape, processes=8, sharding=sharding, sequences_per_call=48)
    terms = {t.name.split(" (")[0]: t.bytes for t in memory.terms}
    assert terms["weights"] == terms["gradients"] == pytest.approx(4 * p / 8)
    assert terms["optimizer state"] == pytest.approx(8 * p / 8)
    assert terms["reference model"] == pytest.approx(2 * p / 8)
    disk = disk_plan(parameters=p, weight_bytes=2, sharding=sharding, lora_parameters=None, save_only_model=False,
                     save_total_limit=2, saves=12)
    assert disk["per_checkpoint"] == 12 * p


def test_colocated_vllm_share_by_hand():
    """0.4 x 80 GiB for vLLM: its bf16 weights, 1 GiB allowance, the rest KV cache; training gets 90% less that."""
    shape, p = model_shape(QWEN7B), PUBLISHED_PARAMETERS[QWEN7B]
    memory = _memory(shape, processes=8, sharding=Sharding("deepspeed", 3), sequences_per_call=48,
                     generation="colocate", vllm_gpu_memory_utilization=0.4)
    assert memory.budget == pytest.approx(80 * GIB * (USABLE_FRACTION - 0.4))
    assert memory.vllm_sequences == int((32 * GIB - 2 * p - GIB) // (57_344 * 4608))
    starved = _memory(shape, processes=8, sharding=Sharding("deepspeed", 3), sequences_per_call=48,
                      generation="colocate", vllm_gpu_memory_utilization=0.2)
    assert starved.fits is False and any("refuses to start" in note for note in starved.notes)


# ------------------------------------------------------------------------------------------------------ judge, disk


def test_judge_load_by_hand():
    judge = judge_plan(sampled_per_step=384, replay_slots_per_step=128, resample=True, rejudge=False,
                       soft_constraints=38, constraints=100, rows=50, judge_max_concurrency=64, processes=8,
                       template_chars=400, prompt_tokens=500, max_completion_length=4096, output_tokens=16,
                       step_seconds=600, price_input=0.5, price_output=2.0)
    assert judge.soft_share == 0.38 and judge.soft_per_row == 38 / 50
    assert judge.requests_per_step == pytest.approx(384 * 38 / 50)
    assert judge.requests_per_step_max == pytest.approx(512 * 38 / 50)
    assert judge.concurrency == 512
    assert judge.input_tokens == 100 + 32 + 500 + 4096
    assert judge.requests_per_hour == pytest.approx(512 * 38 / 50 * 6)
    assert judge.cost_per_step == pytest.approx(512 * 38 / 50 * (4728 * 0.5 + 16 * 2.0) / 1e6)
    assert judge.cost_per_hour == pytest.approx(judge.cost_per_step * 6)


def test_disk_by_hand():
    p = PUBLISHED_PARAMETERS[QWEN7B]
    zero3 = disk_plan(parameters=p, weight_bytes=2, sharding=Sharding("deepspeed", 3), lora_parameters=None,
                      save_only_model=False, save_total_limit=2, saves=12)
    assert zero3["per_checkpoint"] == 14 * p and zero3["kept"] == 2 and zero3["total"] == 28 * p
    # below ZeRO-3 DeepSpeed's own checkpoint holds the 16-bit module too (mp_rank_00_model_states.pt)
    zero2 = disk_plan(parameters=p, weight_bytes=2, sharding=Sharding("deepspeed", 2), lora_parameters=None,
                      save_only_model=False, save_total_limit=2, saves=12)
    assert zero2["per_checkpoint"] == 16 * p
    unbounded = disk_plan(parameters=p, weight_bytes=2, sharding=Sharding(), lora_parameters=None,
                          save_only_model=False, save_total_limit=None, saves=None)
    assert unbounded["per_checkpoint"] == 6 * p and unbounded["kept"] is None
    few = disk_plan(parameters=p, weight_bytes=2, sharding=Sharding(), lora_parameters=1000, save_only_model=True,
                    save_total_limit=5, saves=3)
    assert (few["per_checkpoint"], few["kept"]) == (4000, 3)


# ------------------------------------------------------------------------------------------------------ the command


def test_plan_of_the_paper_run(capsys):
    code, out, err = plan(capsys, "--config", PAPER_RECIPE, "--config_file", ZERO3, "--gpu_memory_gb", 80)
    assert code == 0, err
    assert "8 process(es), DeepSpeed ZeRO-3, generation: vLLM colocate" in out
    assert re.search(r"prompts \(groups\)\s+64\s+64", out) and re.search(r"trained rows\s+512\s+512", out)
    assert "judge_max_concurrency 64 x 8 rank(s) = 512" in out
    assert "x 2 kept" in out and "verdict: fits on one GPU of 80 GiB" in out


def test_plan_of_the_old_one_gpu_line_does_not_fit(capsys):
    code, out, err = plan(capsys, "--gpu_memory_gb", 80, "--", "hir-trl", "train", "--config", PAPER_RECIPE,
                          "--use_vllm", "false", "--gradient_accumulation_steps", 64)
    assert code == 1
    assert "94.5 GiB  KV cache of one generate call (384 sequences x 4608 tokens)" in out
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("verdict: does not fit") and "KV cache" in verdict and "steps_per_generation" in verdict


def test_plan_reads_the_soft_share_from_the_rows(capsys):
    """The tiny sample with soft constraints: 4 rows, 12 constraints, 4 soft (one per row)."""
    recipe = REPO_ROOT / "recipes" / "tiny" / "hir" / "config_cpu.yaml"
    code, out, err = plan(capsys, "--config", recipe, "--dataset_name",
                          REPO_ROOT / "recipes" / "tiny" / "data" / "soft_constraints_sample.jsonl",
                          "--soft_constraints", "judge", "--judge_model", "openai/gpt-4o-mini", "--judge_api_key_env",
                          "", "--step_seconds", 36, "--judge_price_input", 1, "--judge_price_output", 1)
    assert code == 0, err
    assert "33% of the constraints are soft, 1.00 per row" in out
    assert "12 for the sampled rows" in out  # 12 sampled rows x 1 soft constraint
    assert "1,200 requests per hour" in out  # at most 12 (pad: no supplementary samples) x 100 steps an hour
    assert "a CPU launch" in out and "optimizer steps per epoch: 2 (4 rows)" in out


@pytest.mark.parametrize("argv, fragment", [
    (["--zero_stage", "5"], "--zero_stage"),
    (["--config_file", "missing.yaml"], "missing.yaml"),
    (["--", "mpirun", "-n", "2", "train"], "unknown launcher 'mpirun'"),
    (["--", "trl", "vllm-serve", "--model", QWEN7B], "trains nothing"),
    (["--per_device_train_batch_size", "4"], "whole"),
])
def test_plan_user_errors_are_one_line(capsys, argv, fragment):
    code, out, err = plan(capsys, "--config", PAPER_RECIPE, *argv)
    assert code == 2 and err.startswith("hir-trl plan: error: ") and err.count("\n") == 1, err
    assert fragment in err and "Traceback" not in err


def test_launch_commands_give_the_launch_shape():
    assert launch_command_args("CUDA_VISIBLE_DEVICES=0,1 accelerate launch --config_file a.yaml --num_processes 4 "
                               "--machine_rank $NODE_RANK -m hir_trl.cli train --config r.yaml --x 1") == (
        {"config_file": "a.yaml", "num_processes": 4}, ["--config", "r.yaml", "--x", "1"])
    assert launch_command_args("torchrun --nnodes 2 --nproc_per_node 8 -m hir_trl.cli train --config r.yaml") == (
        {"num_processes": 16}, ["--config", "r.yaml"])
    assert launch_command_args("hir-trl train \\\n --config r.yaml") == ({}, ["--config", "r.yaml"])
    assert launch_command_args("trl vllm-serve --model m") is None


# ------------------------------------------------------------------------------------------- the documented commands


def documented_gpu_commands() -> list[tuple[str, str, float]]:
    """Every training command in a bash block of README.md or docs/*.md marked ``needs: ... gpu``, with the GPU
    memory its comment names ("80 GB"): (file, command, GiB)."""
    found = []
    for path in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"<!-- needs:[^>]*\bgpu\b[^>]*-->\n```bash\n(.*?)```", text, re.S):
            comment = ""
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                if line.startswith("#"):
                    comment += line
                    continue
                command, _, trailing = line.partition("  #")
                if re.search(r"\btrain\b", command) and not re.search(r"vllm-serve|hir-trl plan", command):
                    sizes = re.findall(r"(\d+) GB", comment + trailing)
                    found.append((path.name, command.strip(), float(sizes[-1]) if sizes else None))
                if not line.strip():
                    comment = ""
    return found


def test_documented_gpu_commands_are_found():
    commands = documented_gpu_commands()
    # 1 GPU, one-command ZeRO-3 (hir-trl train --accelerate_config), ZeRO-3, offload, FSDP2, server, 2 nodes, QLoRA
    assert len([c for f, c, _ in commands if f == "scale-out.md"]) == 8
    assert any("faithfulness.md" == f for f, _, _ in commands) and any("README.md" == f for f, _, _ in commands)


@pytest.mark.parametrize("where, command, gpu_gib", documented_gpu_commands(),
                         ids=lambda value: value if isinstance(value, str) and len(value) < 20 else None)
def test_every_documented_gpu_command_fits(capsys, monkeypatch, where, command, gpu_gib):
    """`hir-trl plan` on each command as written: a GPU command fits on the GPU its comment names; a command whose
    recipe trains on CPU says so."""
    monkeypatch.chdir(REPO_ROOT)
    code, out, err = plan(capsys, *([] if gpu_gib is None else ["--gpu_memory_gb", gpu_gib]), "--",
                          *shlex.split(command))
    assert code == 0, (command, err, out)
    verdict = out.strip().splitlines()[-1]
    if "a CPU launch" not in verdict:
        assert gpu_gib is not None, f"{where}: name the GPU's memory (e.g. '80 GB') in the comment of: {command}"
        assert verdict.startswith("verdict: fits"), (command, out)


# ------------------------------------------------------------------------------------------------ the shipped recipes


def recipe_launches() -> list[tuple[str, str, float | None]]:
    """Every shipped recipe (recipes/**/config_*.yaml) with the launch command its header comment gives and the GPU
    memory it names ("80 GB"; None for a CPU recipe): (recipe, command, GiB)."""
    found = []
    for path in sorted((REPO_ROOT / "recipes").glob("**/config_*.yaml")):
        header = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            header.append(line[1:])
        text = re.sub(r"\\\n\s*", " ", "\n".join(header))
        relative = str(path.relative_to(REPO_ROOT))
        commands = re.findall(r"((?:accelerate launch|torchrun|hir-trl train)\s[^\n]*?--config " + re.escape(relative)
                              + ")", text)
        sizes = re.findall(r"(\d+) GB", text)
        found.append((relative, commands[0] if commands else "", float(sizes[0]) if sizes else None))
    return found


def test_every_shipped_recipe_is_found_with_its_launch():
    launches = recipe_launches()
    assert len([r for r, _, _ in launches if r.endswith("config_paper.yaml")]) == 12
    assert len(launches) >= 17
    for recipe, command, _ in launches:
        assert command, f"{recipe}: its header comment gives no launch command (Launch: / Run: ... --config {recipe})"


@pytest.mark.parametrize("recipe, command, gpu_gib", recipe_launches(), ids=lambda v: v if isinstance(v, str)
                         and v.startswith("recipes/") else None)
def test_every_shipped_recipe_fits_its_documented_hardware(capsys, monkeypatch, recipe, command, gpu_gib):
    """`hir-trl plan` on each recipe's own launch command, on the GPU its header names: it fits (a CPU recipe: the
    plan says it is a CPU launch)."""
    monkeypatch.chdir(REPO_ROOT)
    code, out, err = plan(capsys, *([] if gpu_gib is None else ["--gpu_memory_gb", gpu_gib]), "--",
                          *shlex.split(command))
    assert code == 0, (recipe, err, out)
    verdict = out.strip().splitlines()[-1]
    if "a CPU launch" not in verdict:
        assert gpu_gib is not None, f"{recipe}: name the GPU's memory (e.g. '80 GB') in its header comment"
        assert verdict.startswith("verdict: fits"), (recipe, out)
