"""A category the model never saw (unseen in serving, or missing) takes embedding slot 0; it must carry no
random information: the tabular task's initialisation starts that slot at zero."""

from __future__ import annotations

import pytest
import torch

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.tasks import load_task
from tests.fixtures.registry import make_snapshot


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_the_unknown_category_slot_starts_at_zero_whatever_the_random_draw(tmp_path, kind):
    """Before: slot 0 kept its random initial vector, and on training data without missing categories it
    never received a gradient, so a served unseen category moved a prediction by a random amount (one row's
    churn probability 0.26 -> 0.50 for an unseen region). Now two models whose slot 0 was drawn differently
    predict the same for a row with an unseen category."""
    snapshot = load_snapshot(make_snapshot(tmp_path))
    config = Config.from_dict({"model": {"kind": kind}})
    task = load_task(config.task)
    targets = torch.zeros(10, dtype=torch.long)

    def initialised(noise_seed: int):
        torch.manual_seed(0)
        model = task.model.build(config, snapshot.state)
        generator = torch.Generator().manual_seed(noise_seed)
        with torch.no_grad():
            for embedding in model.embeddings:  # another random draw of the unknown slot
                embedding.weight[0] = torch.randn(embedding.weight.shape[1], generator=generator)
        task.model.init(model, snapshot.state, targets)
        return model.eval()

    first, second = initialised(1), initialised(2)
    n_cat = len(first.embeddings)
    n_num = snapshot.state["numeric"].__len__()
    x_num = torch.randn(4, n_num)
    unknown = torch.zeros(4, n_cat, dtype=torch.long)
    with torch.no_grad():
        assert torch.equal(first(x_num, unknown), second(x_num, unknown))
        for embedding in first.embeddings:
            assert torch.count_nonzero(embedding.weight[0]) == 0
