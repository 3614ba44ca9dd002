"""The causal LM blessing's false-block rate on equal-quality pairs (issue 34).

The blessing asks, on one test split of documents, whether the candidate is worse than the champion
over the documents the split is drawn from (a paired bootstrap over documents, one-sided at
alpha/2 = 2.5 % per metric). Its nominal level holds when candidate and champion are equal in
distribution over those documents. Two models trained with different seeds are not that: on the
population each is slightly better than the other by a fixed amount, which a large enough split
always shows (blocking the worse one is then a right answer, not a false block). So an equal pair is
built from two real tiny decoders of the same config trained with different seeds: for each document a
fair coin gives one model's row to the candidate and the other's to the champion. The two predictors are
exchangeable (equal in distribution by construction) while their per-document differences are those of
two different trained LMs. The pairs are spread over ``MODEL_PAIRS`` pairs of decoders, each trained on a
different half of the corpus. Each pair is judged on a fresh test split (documents drawn without
replacement from held-out help topics), by ``judge_candidate`` with the task's scorer, baseline and
default thresholds (loss and bits per byte: beat the unigram model, no regression against the champion).
A model trained for a tenth of the steps, as candidate, must be blocked (the test can fail).

Each pair's coin is its own, so the pairs' verdicts are independent draws whatever decoders and splits they
share; with the blessing's exact sign-flip interval each has a block probability of k / (flips + 1) at most,
and the binomial (Wilson) interval of the rate is honest. ``coin_level`` measures that probability directly on
a few splits of one seed's decoders, many coins each, with the blessing's own interval and seed:

    python benchmarks/gate_calibration/lm_blessing.py --seed 6 --splits 5 --coins 4000
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ctpipe.components.run_config import load_config
from ctpipe.components.steps.evaluate.judgement import judge_candidate
from ctpipe.components.tasks.causal_lm import CausalLM, make_task
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents
from ctpipe.components.tasks.causal_lm.metrics import document_losses

TRAIN_STEPS = 150
BATCH = 16
SPLIT_DOCUMENTS = 100  # one pair's test split (the demo's test split holds ~80 documents)
MODEL_PAIRS = 4  # pairs of decoders the equal pairs are spread over


def _trained(task, state, packed, steps: int, seed: int) -> torch.nn.Module:
    """A tiny decoder of the task's config after ``steps`` AdamW steps on random batches of ``packed``."""
    torch.manual_seed(seed)
    model = task.model.build(None, state)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, len(packed), (BATCH,), generator=generator)
        batch = packed.select(rows)
        loss = task.objective.loss(model(*batch.inputs), batch.targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def _judgement(task, config, frame: pd.DataFrame, state, candidate: np.ndarray, champion: np.ndarray,
               floor: bool = True):
    """The blessing's judgement of ``candidate`` against ``champion`` on these documents: the task's scorer and
    unigram baseline, the default thresholds (beat the baseline, no regression against the champion). Without
    ``floor`` no baseline is scored: the floor then fails, and the rules against the champion get the same
    verdicts (the same sign flips: ``blessing.flip_seed`` digests candidate and champion only) in half the time."""
    targets = task.codec.targets(frame, state)
    baseline = task.scoring.baseline(targets, state) if floor else None
    return judge_candidate(targets, candidate, champion, config, frame, [], scorer=task.scoring, baseline=baseline)


def _blocked_by_change(judgement) -> bool:
    """Whether a rule against the champion (not the floor) blocks."""
    return any(not c.passed for c in judgement.checks if c.kind in ("change_abs", "change_rel"))


def _blocked_against_champion(
    task, config, frame: pd.DataFrame, state, candidate: np.ndarray, champion: np.ndarray, floor: bool = True
) -> tuple[bool, bool]:
    """Whether the blessing's rules against the champion block ``candidate`` on these documents, and whether the
    whole blessing does (the floor, beating the unigram model, included)."""
    judgement = _judgement(task, config, frame, state, candidate, champion, floor)
    return _blocked_by_change(judgement), not judgement.passed


def measure(seed: int, pairs: int, train_steps: int = TRAIN_STEPS, model_pairs: int = MODEL_PAIRS,
            documents: int = SPLIT_DOCUMENTS, floor: bool = True) -> dict:
    """``lm_equal_pairs``, ``lm_false_blocks``, ``lm_false_block_rate`` (and its nominal level) over ``pairs``
    coin-swapped pairs of ``documents`` documents each: blocked by a rule against the champion
    (``lm_equal_pairs_not_blessed`` counts the floor too, which trained models pass; None without ``floor``, which
    judges only the rules against the champion), and whether a clearly worse candidate is blocked on the first
    split (``lm_worse_candidate_loss_gap_95``: its loss minus the champion's, the blessing's interval)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: extra threads only contend (10x slower on a busy 2-core machine)
    try:
        return _measure(seed, pairs, train_steps, model_pairs, documents, floor)
    finally:
        torch.set_num_threads(threads)


def _document_rows(task, docs: pd.DataFrame, draw: list[int], train_steps: int, worse: bool):
    """Held-out documents, the task state and per-document rows of two decoders trained on the other half with
    different seeds (and of one trained a tenth as long, with ``worse``)."""
    order = np.random.default_rng(draw).permutation(len(docs))
    train, held_out = docs.iloc[order[::2]], docs.iloc[order[1::2]].reset_index(drop=True)
    state = task.codec.fit(train, None)
    packed = task.codec.encode(train, state)
    runs = [("a", train_steps, 1), ("b", train_steps, 2)] + (
        [("short", train_steps // 10, 3)] if worse else []
    )
    # The documents as the task reads them (its text column, valid UTF-8): the built-in's own reader.
    texts, seq_len = CausalLM().texts(held_out, state), int(state["model"]["seq_len"])
    rows = {
        name: document_losses(
            _trained(task, state, packed, steps, 1000 * sum(draw) + s), texts, seq_len=seq_len
        )
        for name, steps, s in runs
    }
    return held_out, state, rows


def _wilson(successes: int, trials: int) -> list[float] | None:
    """The Wilson 95 % interval of a rate (each pair's coin is its own: the pairs' verdicts are independent draws
    of an exact test's, whatever the decoders and splits they share)."""
    if not trials:
        return None
    from scipy.stats import binomtest

    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return [round(float(interval.low), 4), round(float(interval.high), 4)]


def _sign_flip_level(config) -> float:
    """k / (flips + 1): the one-sided level of the blessing's sign-flip interval, the rate an equal pair is blocked
    at over evaluations (each evaluation draws its own flips)."""
    from ctpipe.components.lib.metrics import sign_flip_rank
    from ctpipe.components.steps.evaluate.blessing import sign_flips

    flips = sign_flips(config.evaluate.bootstrap_samples)
    return sign_flip_rank(config.evaluate.confidence, flips) / (flips + 1)


def _measure(seed: int, pairs: int, train_steps: int, model_pairs: int, documents: int, floor: bool) -> dict:
    task = make_task()
    config = load_config(None, ["task.name=causal_lm"])
    docs = help_topic_documents()
    blocked = not_blessed = 0
    worse_blocked, worse_gap = False, None
    # The pairs are spread over ``model_pairs`` pairs of decoders: one pair's idiosyncrasy (a document one model
    # happens to know well) would otherwise weigh on all of them alike.
    for k in range(model_pairs):
        count = pairs // model_pairs + (k < pairs % model_pairs)
        if count == 0 and k > 0:
            continue
        held_out, state, rows = _document_rows(task, docs, [34, seed, k], train_steps, worse=k == 0)
        rng = np.random.default_rng([35, seed, k])
        for _ in range(count):
            split = np.sort(rng.choice(len(held_out), documents, replace=False))
            swap = rng.random(documents) < 0.5
            a, b = rows["a"][split], rows["b"][split]
            candidate, champion = np.where(swap[:, None], b, a), np.where(swap[:, None], a, b)
            change, whole = _blocked_against_champion(
                task, config, held_out.iloc[split], state, candidate, champion, floor
            )
            blocked, not_blessed = blocked + change, not_blessed + whole
        if k == 0:
            first = np.sort(rng.choice(len(held_out), documents, replace=False))
            judgement = _judgement(task, config, held_out.iloc[first], state, rows["short"][first], rows["a"][first])
            worse_blocked, gap = _blocked_by_change(judgement), judgement.evidence["loss"].vs_champion
            worse_gap = [round(gap.low, 4), round(gap.high, 4)]
    return {
        "lm_equal_pairs": pairs,
        "lm_model_pairs": model_pairs,
        "lm_false_blocks": blocked,
        "lm_false_block_rate": round(blocked / pairs, 4) if pairs else None,
        "lm_false_block_rate_95": _wilson(blocked, pairs),
        "lm_nominal_block_rate": round((1 - config.evaluate.confidence) / 2, 4),
        "lm_level_by_construction": round(_sign_flip_level(config), 6),
        "lm_equal_pairs_not_blessed": not_blessed if floor else None,
        "lm_worse_candidate_blocked": worse_blocked,
        "lm_worse_candidate_loss_gap_95": worse_gap,
    }


def coin_level(seed: int, splits: int, coins: int, flips: int = 2000, model_pairs: int = MODEL_PAIRS,
               train_steps: int = TRAIN_STEPS) -> dict:
    """The rate at which the blessing's loss rule (``blessing.flip_seed`` and ``metrics.sign_flip_interval``, as
    the blessing calls them; ``flips`` sign vectors, the level k / (flips + 1) being exact at any number) blocks
    an equal pair, over ``coins`` fair coins on each of ``splits`` splits of each of seed's decoder pairs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in ``measure``; the caller's setting is restored
    try:
        return _coin_level(seed, splits, coins, flips, model_pairs, train_steps)
    finally:
        torch.set_num_threads(threads)


def _coin_level(seed: int, splits: int, coins: int, flips: int, model_pairs: int, train_steps: int) -> dict:
    from ctpipe.components.lib.metrics import sign_flip_interval, sign_flip_rank
    from ctpipe.components.steps.evaluate.blessing import flip_seed

    task, docs = make_task(), help_topic_documents()
    blocks: list[int] = []
    for k in range(model_pairs):
        held_out, _, rows = _document_rows(task, docs, [34, seed, k], train_steps, worse=False)
        rng = np.random.default_rng([99, seed, k])
        for _ in range(splits):
            split = np.sort(rng.choice(len(held_out), SPLIT_DOCUMENTS, replace=False))
            a, b = rows["a"][split], rows["b"][split]
            count = 0
            for _ in range(coins):
                swap = rng.random(SPLIT_DOCUMENTS) < 0.5
                candidate, champion = np.where(swap[:, None], b, a), np.where(swap[:, None], a, b)
                worse = candidate[:, 0] - champion[:, 0]  # summed NLL per document: the loss's numerator
                tokens = candidate[:, 1]
                interval = sign_flip_interval(worse.sum() / tokens.sum(), worse, tokens, 0.95, samples=flips,
                                              seed=flip_seed(0, candidate, champion))
                count += interval.low > 0  # worse with evidence: blocked
            blocks.append(count)
    judged = len(blocks) * coins
    level = sign_flip_rank(0.95, flips) / (flips + 1)
    return {"lm_coin_judgements": judged, "lm_coin_blocks": int(sum(blocks)),
            "lm_coin_block_rate": round(sum(blocks) / judged, 5), "lm_coin_rate_95": _wilson(int(sum(blocks)), judged),
            "lm_level_by_construction": round(float(level), 6), "lm_blocks_per_split": blocks}


if __name__ == "__main__":
    import argparse
    import json

    def _positive(text: str) -> int:
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value} must be at least 1")
        return value

    parser = argparse.ArgumentParser(description="the LM blessing's block rate over many coins on fixed splits")
    parser.add_argument("--seed", type=int, default=0, help="seed of the decoders and splits (default 0)")
    parser.add_argument("--splits", type=_positive, default=5, help="splits per decoder pair (default 5)")
    parser.add_argument("--coins", type=_positive, default=1000, help="fair coins per split (default 1000)")
    parser.add_argument("--model-pairs", type=_positive, default=MODEL_PAIRS,
                        help=f"decoder pairs trained (default {MODEL_PAIRS})")
    args = parser.parse_args()
    print(json.dumps(coin_level(args.seed, args.splits, args.coins, model_pairs=args.model_pairs)))
