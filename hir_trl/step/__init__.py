"""One HiR step, as the paper's Algorithm 2: the modules a training step meets, in its order.

============================ =========================================================================
module                       Algorithm 2 (Hindsight Instruction Replay)
============================ =========================================================================
`algorithm`                  the step itself: `complete_groups` over the `StepPasses` protocol
`sampling`                   lines 8 and 21: entropies and old log-probs recorded while sampling
`rewards`                    lines 9 and 16: ILA / CLA (`REWARD_MODES`), every row's reward
`replay`                     lines 12-13 and 22: Algorithm 1 (Select-Rewrite) and the curriculum lambda
`shortfall`                  §3.2 (lines 7-10 again): a group with fewer candidates than k
`batch`                      lines 14-17: the replays' rows in the batch
`advantages`                 line 20: the advantage estimators and how replays enter them
`loss_weighting`             line 21: how the loss weighs sampled rows and replays
`state`, `log`               the step's typed state; its metrics and completion-log rows
============================ =========================================================================
"""

from .algorithm import StepPasses, check_batch, complete_groups

__all__ = ["StepPasses", "check_batch", "complete_groups"]
