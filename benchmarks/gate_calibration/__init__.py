"""Calibration measurements that ``benchmarks/gates.py`` prints beside its corpus: a gate's error rate over
many draws (``lm_blessing``: equal-quality language-model pairs; ``text_drift``: same-source resamples and
shifted windows). Each module has ``measure(seed, draws) -> dict`` of figures for the JSON line."""
