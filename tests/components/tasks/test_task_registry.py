"""The task registry: built-ins by name, the user's own by entrypoint, clear errors before any work."""

from __future__ import annotations

import sys
import textwrap

import pytest

from ctpipe.components.lib.config import Config, ConfigError
from ctpipe.components.run_config import load_config
from ctpipe.components.tasks import BUILTIN_TASKS, TaskError, TaskSpec, load_task
from ctpipe.components.tasks.registry import _CACHE


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write a module named ``name`` with ``source`` onto sys.path, as a user's package would be."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)
    _CACHE.clear()


def test_default_task_is_tabular_classification():
    config = Config()
    assert config.task.name == "tabular_classification" and config.task.entrypoint is None
    task = load_task(config.task)
    assert isinstance(task, TaskSpec)
    assert task.name == "tabular_classification"
    assert "tabular_classification" in BUILTIN_TASKS


def test_unknown_builtin_names_the_builtins():
    config = load_config(None, ["task.name=no_such_task"])
    with pytest.raises(TaskError, match="'no_such_task' is not a built-in task; built-ins: .*tabular_classification"):
        load_task(config.task)


def test_entrypoint_must_look_like_module_colon_factory():
    with pytest.raises(ConfigError, match="task.entrypoint.*package.module:factory"):
        load_config(None, ["task.entrypoint=not-a-path"])


def test_missing_module_is_named(user_module):
    config = load_config(None, ["task.entrypoint=nowhere_to_be_found.tasks:make_task"])
    with pytest.raises(TaskError, match="module 'nowhere_to_be_found.tasks' cannot be imported.*docs/your-model.md"):
        load_task(config.task)


def test_missing_factory_is_named(user_module):
    user_module("user_task_nofactory", "X = 1\n")
    config = load_config(None, ["task.entrypoint=user_task_nofactory:make_task"])
    with pytest.raises(TaskError, match="has no callable 'make_task'"):
        load_task(config.task)


def test_raising_factory_is_reported_with_its_error(user_module):
    user_module("user_task_raises", """
        def make_task(**options):
            raise RuntimeError("no GPU here")
    """)
    config = load_config(None, ["task.entrypoint=user_task_raises:make_task"])
    with pytest.raises(TaskError, match="raised RuntimeError: no GPU here"):
        load_task(config.task)


def test_incomplete_task_names_the_missing_parts(user_module):
    user_module("user_task_partial", """
        from ctpipe.components.tasks import TaskBase, Metric
        class Partial(TaskBase):
            name = "partial"
            metrics = (Metric("accuracy", True),)
            def fit(self, train, schema):
                return {}
        def make_task():
            return Partial()
    """)
    config = load_config(None, ["task.entrypoint=user_task_partial:make_task"])
    with pytest.raises(TaskError, match="lacks the required part\\(s\\) encode, build_model, shard_units, loss"):
        load_task(config.task)


def test_options_reach_the_factory_and_optional_parts_get_defaults(user_module):
    user_module("user_task_options", """
        from ctpipe.components.tasks import Metric, SanitySpec
        class Minimal:  # not a TaskBase subclass: the optional parts come from the registry
            name = "minimal"
            metrics = (Metric("accuracy", True),)
            sanity = SanitySpec()
            def __init__(self, width):
                self.width = width
        for part in ("fit", "encode", "build_model", "shard_units", "loss", "row_losses", "row_metrics",
                     "init_losses", "targets", "predict", "compute_metrics", "serve"):
            setattr(Minimal, part, lambda self, *a, **k: None)
        def make_task(width=1):
            return Minimal(width)
    """)
    config = load_config(None, ["task.entrypoint=user_task_options:make_task", "task.options.width=32"])
    task = load_task(config.task)
    assert task.codec.fit.__self__.width == 32  # the one-class object the factory made, its parts its methods
    assert task.profile.expectations(None) == [] and task.scoring.class_names({}) is None
    # The streaming parts get their defaults too: the steps read them as plain attributes.
    assert task.codec.rowwise is False and task.codec.fit_streamed(None, None) is None


def test_a_task_without_the_demo_size_and_description_parts_gets_their_defaults(user_module):
    """The parts other steps read (demo data, the benchmark's FLOPs, the described model) default to "none of
    its own" / "unknown" / the config's model section for a task that is not a TaskBase subclass."""
    user_module("user_task_bare", """
        from ctpipe.components.tasks import Metric, SanitySpec
        class Bare:
            name = "bare"
            metrics = (Metric("accuracy", True),)
            sanity = SanitySpec()
        for part in ("fit", "encode", "build_model", "shard_units", "loss", "row_losses", "row_metrics",
                     "init_losses", "targets", "predict", "compute_metrics", "serve"):
            setattr(Bare, part, lambda self, *a, **k: None)
        def make_task():
            return Bare()
    """)
    config = load_config(None, ["task.entrypoint=user_task_bare:make_task", "model.hidden=32"])
    task = load_task(config.task)
    assert task.demo is None and task.defaults == ()
    # Not the tabular model section it never reads (issue 33): its build_model builds nothing, so its name alone.
    assert task.describe_model(config, {}) == {"kind": "bare"}


def test_the_language_model_describes_its_decoder_not_the_tabular_model_section():
    config = load_config(None, ["task.name=causal_lm", "task.options.size=small"])
    task = load_task(config.task)
    described = task.describe_model(config, {})
    assert described["d_model"] == 256 and described["seq_len"] == 128 and "hidden" not in described
    # The fitted state's shape wins: it is what build_model builds.
    assert task.describe_model(config, {"model": {**described, "n_layers": 7}})["n_layers"] == 7


def test_a_rowwise_encoding_that_is_not_a_switch_is_named(user_module):
    user_module("user_task_rowwise", """
        from ctpipe.components.tasks import TaskBase, Metric
        class Rowwise(TaskBase):
            name = "rowwise"
            metrics = (Metric("accuracy", True),)
            rowwise_encoding = "yes"
        for part in ("fit", "encode", "build_model", "shard_units", "loss", "row_losses", "row_metrics",
                     "init_losses", "targets", "predict", "compute_metrics", "serve"):
            setattr(Rowwise, part, lambda self, *a, **k: None)
        def make_task():
            return Rowwise()
    """)
    config = load_config(None, ["task.entrypoint=user_task_rowwise:make_task"])
    with pytest.raises(TaskError, match="'rowwise_encoding' must be True or False, got 'yes'"):
        load_task(config.task)


def test_task_section_survives_the_json_round_trip():
    config = load_config(None, ["task.entrypoint=pkg.mod:factory", "task.options.width=8"])
    again = Config.from_json(config.to_json())
    assert again.task.entrypoint == "pkg.mod:factory" and again.task.options == {"width": 8}


def test_a_factory_returning_the_class_instead_of_an_instance_is_named(user_module):
    # Before: accepted (a class has every method), then validation failed with
    # "DigitsTask.own_columns() missing 1 required positional argument: 'schema'".
    user_module("user_task_class", """
        from ctpipe.components.tasks.tabular import TabularClassification
        def make_task(**options):
            return TabularClassification
    """)
    config = load_config(None, ["task.entrypoint=user_task_class:make_task"])
    with pytest.raises(TaskError, match="returned the class TabularClassification, not an instance of it.*"
                                        "return TabularClassification\\(\\.\\.\\.\\)"):
        load_task(config.task)


_TASK_WITH_METRICS = """
    from ctpipe.components.tasks import Metric
    from ctpipe.components.tasks.tabular import TabularClassification
    class Declared(TabularClassification):
        metrics = ({metrics})
    def make_task(**options):
        return Declared()
"""


def test_a_metric_whose_direction_contradicts_its_name_is_named(user_module):
    # Before: accepted, and the blessing judged log loss as better when higher (a worse candidate passes a
    # change rule, a good first model fails the 'baseline' floor).
    user_module("user_task_direction", _TASK_WITH_METRICS.format(
        metrics='Metric("accuracy", True), Metric("log_loss", True)'))
    config = load_config(None, ["task.entrypoint=user_task_direction:make_task"])
    with pytest.raises(TaskError, match="metric 'log_loss' is declared higher_is_better=True, but its name says lower "
                                        "is better.*higher_is_better=False"):
        load_task(config.task)


def test_metric_names_that_say_nothing_or_negate_keep_the_declared_direction(user_module):
    user_module("user_task_free_names", _TASK_WITH_METRICS.format(
        metrics='Metric("accuracy", True), Metric("neg_log_loss", True), Metric("dice", True), Metric("ece", False)'))
    config = load_config(None, ["task.entrypoint=user_task_free_names:make_task"])
    assert [m.higher_is_better for m in load_task(config.task).scoring.metrics] == [True, True, True, False]


_TASK_WITHOUT_BASELINE = """
    import numpy as np
    from ctpipe.components.tasks import TaskBase
    from ctpipe.components.tasks.tabular import TabularClassification
    class NoBaseline(TabularClassification):  # a user's task: everything but the optional baseline
        baseline = TaskBase.baseline
    def make_task(**options):
        return NoBaseline()
"""


def test_a_baseline_rule_for_a_task_without_a_baseline_is_a_config_error(user_module):
    # Before: accepted; every first model was then 'not blessed' after training, with the reason
    # "accuracy: no interval against the prior predictor".
    from ctpipe.components.tasks import check_evaluation_metrics

    user_module("user_task_no_baseline", _TASK_WITHOUT_BASELINE)
    config = load_config(None, ["task.entrypoint=user_task_no_baseline:make_task"])
    with pytest.raises(ConfigError, match="'evaluate.thresholds.accuracy.value': 'baseline' needs the task's trivial "
                                          "predictor, and task 'tabular_classification' has none.*value=0.9"):
        check_evaluation_metrics(load_task(config.task), config.evaluate)
    absolute = load_config(None, ["task.entrypoint=user_task_no_baseline:make_task",
                                  "evaluate.thresholds.accuracy.value=0.9", "evaluate.thresholds.log_loss.value=0.5",
                                  "evaluate.thresholds.macro_f1.value=0.5"])  # the family judges macro F1 too
    check_evaluation_metrics(load_task(absolute.task), absolute.evaluate)
    check_evaluation_metrics(load_task(Config().task), Config().evaluate)  # the built-in has a baseline


@pytest.mark.parametrize("where", ["evaluate.thresholds", "evaluate.slice_thresholds"])
def test_a_rule_direction_that_contradicts_the_tasks_metric_is_a_config_error(where):
    # Before: accepted; log loss was then judged higher-is-better, so a candidate with a WORSE log loss than the
    # champion passed the change rule and one with a better log loss was blocked, with no error.
    from ctpipe.components.tasks import check_evaluation_metrics

    config = load_config(None, [f"{where}.log_loss.direction=higher", f"{where}.log_loss.change_abs=0"])
    with pytest.raises(ConfigError, match=f"'{where}.log_loss.direction': 'higher' contradicts .*log_loss.* better when "
                                          "lower.*direction=auto"):
        check_evaluation_metrics(load_task(config.task), config.evaluate)
    agreeing = load_config(None, [f"{where}.log_loss.direction=lower", f"{where}.log_loss.change_abs=0",
                                  f"{where}.accuracy.direction=higher", f"{where}.accuracy.change_abs=0"])
    check_evaluation_metrics(load_task(agreeing.task), agreeing.evaluate)


def test_an_example_dimension_other_than_0_is_refused(user_module):
    # Before: accepted, and the sanity gate (like Batch.select and the trainer) still took dimension 0 as the
    # examples: its batch-independence checks perturbed what the task had declared something else.
    user_module("user_task_time_major", """
        from ctpipe.components.tasks import TaskBase, Metric, SanitySpec
        class TimeMajor(TaskBase):
            name = "time_major"
            metrics = (Metric("accuracy", True),)
            sanity = SanitySpec(example_dim=1, sequence_dim=0)
        for part in ("fit", "encode", "build_model", "shard_units", "loss", "row_losses", "row_metrics",
                     "init_losses", "targets", "predict", "compute_metrics", "serve"):
            setattr(TimeMajor, part, lambda self, *a, **k: None)
        def make_task():
            return TimeMajor()
    """)
    config = load_config(None, ["task.entrypoint=user_task_time_major:make_task"])
    with pytest.raises(TaskError, match="sanity.example_dim must be 0.*got 1"):
        load_task(config.task)
