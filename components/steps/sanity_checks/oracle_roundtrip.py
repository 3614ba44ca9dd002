"""The oracle round trip: ``predict`` fed outputs equal to the encoded targets must return the raw targets.

A regression's codec standardises the label for training and its ``predict`` must map the model's outputs back to
the label's units; without that inverse every prediction is off by the label's scale, and only the blessing
stopped it, by losing to the mean predictor, with a message that names no cause (and a label whose standard
deviation is near 1 would pass). Here, before training, a stand-in model whose output for each of the first
batch's rows is what ``codec.encode`` made that row's target (a class index as a one-hot logit row, a number as
itself) is handed to ``scoring.predict``, and the predictions are compared with ``codec.targets``: the class
predicted must be each row's class, the number each row's number (to ``RTOL`` of the targets' spread). A miss
names the inverse that is missing or wrong; rows the stand-in was never shown (``predict`` feeds the model inputs
that ``encode`` does not make for them) are named too. Only for one target per row (a class or a number).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ctpipe.components.tasks.protocol import CheckResult

RULE = "predict(a model whose outputs are the encoded targets) == codec.targets, row by row"
# A one-hot logit row: softmax puts all but e^-30 of the probability on the target class.
LOGIT = 30.0
RTOL = 1e-3


def _key(row_parts: list[Any]) -> bytes:
    return b"".join(np.ascontiguousarray(part).tobytes() for part in row_parts)


def oracle_model(inputs: tuple, outputs) -> Any:
    """An ``nn.Module`` that returns ``outputs[i]`` for the example whose inputs are ``inputs[*][i]`` (NaN for
    inputs it was never shown); examples with equal inputs and different outputs get NaN too."""
    import torch
    from torch import nn

    table: dict[bytes, Any] = {}
    for i in range(len(outputs)):
        key = _key([x[i].numpy() for x in inputs])
        table[key] = None if key in table and not torch.equal(table[key], outputs[i]) else outputs[i]

    class Oracle(nn.Module):
        def forward(self, *given):
            rows = [table.get(_key([x[i].detach().numpy() for x in given])) for i in range(len(given[0]))]
            blank = torch.full(outputs.shape[1:], float("nan"))
            return torch.stack([blank if r is None else r for r in rows])

    return Oracle()


def _stand_in_outputs(targets, shape) -> Any | None:
    """What a perfect model would output for encoded ``targets`` given the real model's output ``shape``."""
    import torch

    if targets.dim() != 1:
        return None
    if not targets.is_floating_point() and len(shape) == 2 and shape[1] >= 2:
        return torch.nn.functional.one_hot(targets.long(), shape[1]).float() * LOGIT
    if targets.is_floating_point() and int(np.prod(shape[1:])) == 1:
        return targets.float().reshape(len(targets), *shape[1:])
    return None


def _mismatch(predicted: np.ndarray, truth: np.ndarray, encoded: np.ndarray) -> str:
    """What is wrong with numeric predictions, in words: the scale they are in, and how to fix it."""
    offset = f"first rows: predicted {', '.join(f'{v:.4g}' for v in predicted[:3])} for targets " \
             f"{', '.join(f'{v:.4g}' for v in truth[:3])}"
    if np.allclose(predicted, encoded, rtol=RTOL, atol=RTOL * max(float(np.std(encoded)), 1e-12)):
        return (f"predict returns the model's outputs in the encoded (training) units, not the label's: a missing "
                f"inverse transform (e.g. z * std + mean) in predict ({offset}; the targets have mean "
                f"{np.mean(truth):.4g} and std {np.std(truth):.4g})")
    slope, intercept = np.polyfit(truth, predicted, 1) if len(truth) > 1 and np.std(truth) > 0 else (np.nan, np.nan)
    return (f"predict maps the encoded targets to other values: a wrong inverse transform (predictions ~ "
            f"{slope:.4g} x target + {intercept:.4g}; {offset})")


def check_oracle_roundtrip(task: Any, model: Any, raw: Any, state: dict[str, Any]) -> CheckResult:
    """``task``'s predict, on ``raw`` rows, for a stand-in of ``model`` that outputs their encoded targets."""
    import torch

    batch = task.codec.encode(raw, state)
    model.eval()
    with torch.no_grad():
        shape = tuple(model(*batch.inputs).shape)
    outputs = _stand_in_outputs(batch.targets, shape)
    if outputs is None:
        return CheckResult("oracle_roundtrip", True, None, RULE,
                           f"not judged: targets of shape {list(batch.targets.shape)} for outputs {list(shape)} are not "
                           "one class or one number per row")
    truth = np.asarray(task.codec.targets(raw, state))
    try:
        with torch.no_grad():
            predicted = np.asarray(task.scoring.predict(oracle_model(batch.inputs, outputs), raw, state, state),
                                   dtype="float64")
    except Exception as err:  # noqa: BLE001 - a task's predict may need its own model (task_outputs checks that)
        return CheckResult("oracle_roundtrip", True, None, RULE,
                           f"not judged: predict did not take the stand-in model ({type(err).__name__}: {err})")
    classes = not batch.targets.is_floating_point()
    if predicted.shape[0] != len(truth) or np.isnan(predicted).any():
        missing = int(np.isnan(predicted.reshape(len(predicted), -1)).any(axis=1).sum()) if len(predicted) else 0
        return CheckResult("oracle_roundtrip", False, None, RULE,
                           f"predict fed the model inputs that codec.encode does not make for these rows ({missing} of "
                           f"{len(truth)} rows): serving would encode rows otherwise than training did")
    if classes:
        if predicted.ndim not in (1, 2):
            return CheckResult("oracle_roundtrip", True, None, RULE,
                               f"not judged: predict returned shape {list(predicted.shape)} for class targets")
        got = predicted.argmax(axis=1) if predicted.ndim == 2 else predicted  # probabilities, or class indices
        wrong = np.flatnonzero(got != truth)
        detail = (f"predict's classes are in another order than encode's (row {wrong[0]}: predicted class "
                  f"{got[wrong[0]]} for target class {truth[wrong[0]]})" if len(wrong) else "")
        what = "the class predicted is not the class encoded"
    else:
        predicted = predicted.reshape(len(truth))
        scale = max(float(np.std(truth)), float(np.abs(truth).max()) * 1e-6, 1e-12)
        wrong = np.flatnonzero(np.abs(predicted - truth) > RTOL * scale)
        detail = _mismatch(predicted, truth, batch.targets.double().numpy()) if len(wrong) else ""
        what = "the predictions are not the targets"
    if len(wrong):
        return CheckResult("oracle_roundtrip", False, len(wrong) / len(truth), RULE,
                           f"{detail or what}: on {len(wrong)} of {len(truth)} first-batch rows a stand-in model that "
                           f"outputs each row's encoded target (codec.encode) does not get its target back from "
                           "predict (codec.targets)")
    return CheckResult("oracle_roundtrip", True, 0.0, RULE,
                       f"predict returns each of {len(truth)} first-batch rows' "
                       f"{'class' if classes else 'target'} for a model that outputs its encoded target")
