"""TRL's internal helpers that hir-trl uses, imported here and nowhere else: the import side of the TRL adapter.

Anything hir-trl takes from TRL beyond its public API (``from trl import GRPOTrainer, GRPOConfig, ...``) is imported
in this module, which imports no `hir_trl` module. `hir_trl.trl_adapter` (which imports the step) and the modules it
sits above (`hir_trl.step.batch`, `hir_trl.step.advantages`, `hir_trl.guards`; also `hir_trl.configs` for ``trl
grpo``'s script arguments and `hir_trl.trainer_setup` for ``trl.rewards``) take these names from here, so no
import circle forms (`tests/package/test_public_api.py` checks both: no circle, and no TRL-internal import in any
other module). `tests/trainer/test_trl_adapter.py` checks, against the installed TRL, the behaviour of each name that
HiR relies on.
"""

from __future__ import annotations

from trl import rewards as trl_rewards
from trl.data_utils import apply_chat_template, is_conversational
from trl.import_utils import is_vllm_available
from trl.models.utils import disable_gradient_checkpointing
from trl.scripts.grpo import GRPOScriptArguments
from trl.scripts.utils import DatasetConfig
from trl.trainer.utils import get_callable_name, is_async_callable, nanstd, pad, use_adapter

__all__ = ["DatasetConfig", "GRPOScriptArguments", "apply_chat_template", "disable_gradient_checkpointing",
           "get_callable_name", "is_conversational",
           "is_async_callable", "is_vllm_available", "nanstd", "pad", "trl_rewards", "use_adapter"]
