"""train.max_epochs: on a small table training stops after that many passes, its intervals scaled with it."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.config import TrainConfig
from ctpipe.components.lib.errors import ConfigError


def test_a_small_table_trains_max_epochs_passes_with_its_intervals_scaled():
    t = TrainConfig(max_epochs=15.0)  # 600 steps, batch 64 a rank, warmup 30, eval and checkpoints every 100
    # diabetes' 353 train rows on 2 ranks: 128 rows a step, 15 passes = 42 steps (600 would be 217 passes).
    small = t.for_examples(353, 2)
    assert (small.max_steps, small.warmup_steps, small.eval_every, small.checkpoint_every) == (42, 2, 7, 7)
    assert small.max_steps // small.checkpoint_every == t.max_steps // t.checkpoint_every  # as many to select from
    # The demo's 5,566 train rows: 15 passes are 653 steps, more than max_steps: nothing changes.
    assert t.for_examples(5566, 2) is t
    assert TrainConfig(max_epochs=None).for_examples(353, 2).max_steps == 600
    tiny = t.for_examples(3, 2)
    assert (tiny.max_steps, tiny.warmup_steps, tiny.eval_every, tiny.checkpoint_every) == (1, 0, 1, 1)


@pytest.mark.parametrize("value", [0, -1.0, 2e6])
def test_max_epochs_is_a_positive_number_of_passes(value):
    with pytest.raises(ConfigError, match="train.max_epochs"):
        TrainConfig(max_epochs=value)
