"""The built-in causal language-model task (``task.name: causal_lm``): see ``task.py``.

Modules, one job each: ``corpus`` (the demo text), ``tokenizer`` (bytes), ``packing`` (documents into
sequences), ``sizes`` (the decoder's shape and presets, torch-free), ``model`` (the GPT decoder),
``metrics`` (per-document loss, bits per byte), ``causality`` (the sanity gate's sequence checks),
``text_stats`` (validation and drift statistics), ``serving`` (scoring and generation), ``task`` (the
protocol).
"""

from ctpipe.components.tasks.causal_lm.task import CausalLM, make_task

__all__ = ["CausalLM", "make_task"]
