"""The console line per training step (`hir_trl.cli.console`): one readable line per logged step, the metrics unchanged."""

import json
import re

from hir_trl.cli.console import step_line
from hir_trl.cli.main import main

from ..testing_utils import TINY_RECIPE


def test_step_line_names_step_ila_cla_replays_and_seconds():
    logs = {"reward/ila": 0.25, "reward/cla": 0.5, "hir/replayed_rows": 3.0, "hir/replayed_fraction": 0.75}
    assert step_line(logs, 2, 6, 41.23) == "step 2/6  ILA 25.0%  CLA 50.0%  replays 3/4  41.2 s"
    # no replay made: the slots come from the configuration; a missing metric shows as "-"
    assert step_line({"hir/replayed_rows": 0.0, "hir/replayed_fraction": 0.0}, 1, 2, None, slots=4) == \
        "step 1/2  ILA -  CLA -  replays 0/4"


def test_training_prints_one_line_per_step_and_logs_every_metric(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--config", str(TINY_RECIPE), "--output_dir", str(out), "--model_name_or_path",
                 str(tmp_path / "model"), "--max_steps", "2", "--save_steps", "2"])
    assert code == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    history = [h for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "reward/ila" in h]
    assert len(history) == 2
    for h in history:
        pattern = (rf"^step {h['step']}/2  ILA {100 * h['reward/ila']:.1f}%  CLA {100 * h['reward/cla']:.1f}%  "
                   rf"replays {h['hir/replayed_rows']:g}/\d+  \d+\.\d s$")
        assert len(re.findall(pattern, text, flags=re.M)) == 1, pattern
        # the full metrics still reach trainer_state.json
        assert {"loss", "hir/lambda", "hir/replayed_fraction", "hir/seconds_total", "step_time"} <= set(h)
        # the whole step is timed: generation, rule verification, the judge's wait (no judge here), extra rewards
        assert h["hir/seconds_generation"] > 0 and h["hir/seconds_verification"] > 0
        assert h["hir/seconds_judge"] == 0.0 and "hir/seconds_extra_rewards" in h
    assert "'hir/lambda'" not in text  # no metrics dict on the console
    # the summary names the part with the largest share of the two steps' timed time
    from hir_trl.cli.summary import STEP_PART_NAMES
    from hir_trl.step.log import STEP_PARTS

    largest = max(STEP_PARTS, key=lambda part: sum(h[f"hir/seconds_{part}"] for h in history))
    assert f"Step time: the largest share is {STEP_PART_NAMES[largest]} (" in text
