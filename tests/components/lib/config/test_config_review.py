"""Config values that were accepted but silently changed or dropped (a skeptical review's cases)."""

import json

import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config, resolve_config


def test_duplicate_key_in_a_config_file_is_refused_naming_it(tmp_path):
    # PyYAML keeps the last of two equal keys: a second `train:` section silently dropped the first's settings.
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  max_steps: 200\ntrain:\n  lr: 0.01\n")
    with pytest.raises(ConfigError, match=r"run\.yaml.*'train'.*line 3"):
        load_config(path)
    path.write_text("train:\n  max_steps: 200\n  max_steps: 300\n")
    with pytest.raises(ConfigError, match=r"'max_steps'.*more than once"):
        load_config(path)


def test_a_whole_mapping_then_one_of_its_keys_keeps_both_in_order():
    # `thresholds={}` then a rule: the rule was silently dropped (the whole mapping was applied last).
    settings = ["evaluate.thresholds={}", "evaluate.thresholds.auc.value=0.7"]
    config = load_config(None, settings)
    assert list(config.evaluate.thresholds) == ["auc"] and config.evaluate.thresholds["auc"].value == 0.7
    assert list(resolve_config(overrides="\n".join(settings)).evaluate.thresholds) == ["auc"]
    # The other order still means "no rules": the later whole mapping replaces the earlier rule.
    assert load_config(None, settings[::-1]).evaluate.thresholds == {}


@pytest.mark.parametrize("setting", ["evaluate.thresholds.accuracy.change_abs=.nan",
                                     "evaluate.thresholds.accuracy.change_rel=nan",
                                     "evaluate.thresholds.accuracy.value=nan",
                                     "evaluate.slice_thresholds.accuracy.change_abs=NaN"])
def test_nan_in_a_blessing_rule_is_refused(setting):
    # A NaN bound was accepted and then failed every candidate with "allowed change +nan": refuse it up front.
    with pytest.raises(ConfigError, match=r"(?i)evaluate\.(slice_)?thresholds\..*nan"):
        load_config(None, [setting])


@pytest.mark.parametrize("text", ["01", "1.10", "no", "on", "0x1F", "1_000", "salt #2"])
def test_set_keeps_the_text_of_a_text_field_as_given(text):
    # --set parsed every value as YAML and a text field took str() of the result: a split salt "01" became
    # "1" and "no" became "False" (silently reshuffling every split), "salt #2" lost its "#2" as a comment.
    config = load_config(None, [f"data.split_salt={text}", f"kubernetes.node_selector.pool={text}"])
    assert config.data.split_salt == text
    assert config.kubernetes.node_selector == {"pool": text}
    assert resolve_config(overrides=f"data.label={text}").data.label == text  # registry names refuse spaces and '#'


def test_set_text_field_quotes_and_null_keep_their_yaml_meaning():
    assert load_config(None, ["data.split_salt='01'"]).data.split_salt == "01"
    assert load_config(None, ['data.split_salt=" padded "']).data.split_salt == " padded "
    assert load_config(None, ["data.key=null"]).data.key is None
    assert load_config(None, ["data.key=~"]).data.key is None
    assert load_config(None, ["data.key=id"]).data.key == "id"
    with pytest.raises(ConfigError, match=r"data\.split_salt.*expected text"):
        load_config(None, ["data.split_salt=[a, b]"])  # a list or mapping for a text field is still refused


def test_a_boolean_for_a_text_field_in_a_file_is_refused(tmp_path):
    # `node_selector: {gpu: true}` became the label value "True", which matches no node labelled "true".
    path = tmp_path / "run.yaml"
    path.write_text("kubernetes:\n  node_selector:\n    gpu: true\n")
    with pytest.raises(ConfigError, match=r"kubernetes\.node_selector\.gpu.*True.*quote"):
        load_config(path)


def test_config_overrides_split_on_a_semicolon_only_before_another_setting():
    # A ';' inside a value (a URI's parameters, a salt) split it into a bogus "setting" and failed the run.
    config = resolve_config(overrides="registry.tracking_uri=http://mlflow:5000/x?a=1;b=2; data.split_salt=s;1\n"
                                "train.max_steps=50;train.warmup_steps=5")
    assert config.registry.tracking_uri == "http://mlflow:5000/x?a=1;b=2"
    assert config.data.split_salt == "s;1"
    assert (config.train.max_steps, config.train.warmup_steps) == (50, 5)


@pytest.mark.parametrize("setting", ["select.mode=min", "evaluate.thresholds.loss.direction=lower"])
def test_a_setting_valid_only_with_the_tasks_defaults_is_accepted(setting):
    # The task was found by validating the config WITHOUT its defaults first, so a tweak of the task's own
    # settings (min for its val_loss, a direction for its loss rule) was refused as if applied to the tabular ones.
    from ctpipe.components.run_config import load_config

    config = load_config(None, ["task.name=causal_lm", setting])
    assert config.select.metric == "val_loss" and config.select.direction == "min"
    assert config.evaluate.thresholds["loss"].value == "baseline"
    assert resolve_config(overrides=f"task.name=causal_lm\n{setting}").select.metric == "val_loss"


def test_a_json_config_file_is_read_as_json(tmp_path):
    # Read by YAML 1.1, JSON's 1e-05 was the text "1e-05" (a task option got a string) and a tab-indented
    # JSON file was "not valid YAML/JSON".
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"task": {"options": {"lr": 1e-05}}, "train": {"max_steps": 1e3}}, indent="\t"))
    config = load_config(path)
    assert config.task.options == {"lr": 1e-05} and config.train.max_steps == 1000
    path.write_text('{"train": {"max_steps": 200, "max_steps": 300}}')
    with pytest.raises(ConfigError, match=r"run\.json.*'max_steps'.*more than once"):
        load_config(path)


def test_exponent_numbers_without_a_dot_are_numbers(tmp_path):
    # YAML 1.1 needs a dot in 1.0e-5: 1e-5 was the text "1e-5", handed as such to a task's factory options.
    config = load_config(None, ["task.options.lr=1e-5", "task.options.steps=1E3", "train.max_steps=1e3"])
    assert config.task.options == {"lr": 1e-05, "steps": 1000.0} and config.train.max_steps == 1000
    path = tmp_path / "run.yaml"
    path.write_text("task:\n  options:\n    lr: 1e-5\n    tag: v1e5\n")
    assert load_config(path).task.options == {"lr": 1e-05, "tag": "v1e5"}


def test_a_key_given_twice_inside_one_set_value_is_refused():
    with pytest.raises(ConfigError, match=r"'accuracy'.*more than once"):
        load_config(None, ["evaluate.thresholds={accuracy: {value: 0.8}, accuracy: {value: 0.9}}"])


@pytest.mark.parametrize(("text", "columns"), [("01", ["01"]), ("yes", ["yes"]), ("a #b", ["a #b"]), ("a,01", ["a", "01"])])
def test_set_keeps_the_text_of_a_list_of_columns(text, columns):
    # A one-column list given as text was read as YAML: "01" was refused as the number 1, "a #b" lost "#b".
    assert load_config(None, [f"evaluate.slices={text}"]).evaluate.slices == columns
    assert load_config(None, [f"data.features={text}"]).data.features == columns


@pytest.mark.parametrize("setting", ["train.timeout_minutes=.inf", "registry.lock_ttl_seconds=inf",
                                     "train.weight_decay=Infinity", "watch.interval_seconds=.inf"])
def test_an_infinite_number_is_refused(setting):
    # Accepted, then: timedelta(minutes=inf) crashed every rank after the sanity gate; an infinite lock TTL
    # never lets a crashed holder's lock go; an infinite weight decay turns the weights into NaN.
    with pytest.raises(ConfigError, match=setting.partition("=")[0].replace(".", r"\.") + ".*finite"):
        load_config(None, [setting])


@pytest.mark.parametrize("setting", ["train.seed=-1", "evaluate.seed=-5", "train.seed=18446744073709551616"])
def test_a_seed_numpy_or_torch_cannot_take_is_refused(setting):
    # Accepted, then np.random.default_rng(-1) failed the sanity gate (train.seed) or the evaluation after the
    # whole training (evaluate.seed), and torch.manual_seed overflows past 2**64.
    with pytest.raises(ConfigError, match=setting.partition("=")[0].replace(".", r"\.") + r".*\[0, 2\*\*63\)"):
        load_config(None, [setting])


def test_a_registry_backoff_above_its_cap_is_refused():
    # registry.retry_backoff_seconds=30 under the default cap of 15 silently waited 15 s (watch refuses this).
    with pytest.raises(ConfigError, match=r"registry\.retry_max_backoff_seconds.*15.*>= registry\.retry_backoff_seconds"):
        load_config(None, ["registry.retry_backoff_seconds=30"])
    config = load_config(None, ["registry.retry_backoff_seconds=30", "registry.retry_max_backoff_seconds=120"])
    assert config.registry.retry_backoff_seconds == 30


def test_an_unknown_key_in_a_config_file_names_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  maxsteps: 5\n")
    with pytest.raises(ConfigError, match=r"config file '.*run\.yaml': unknown config key 'train\.maxsteps'; allowed"):
        load_config(path)
