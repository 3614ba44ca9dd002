"""Compile the pipeline to KFP IR YAML for a cluster, with the config (over the cluster defaults) as its default.

    path = compile_pipeline("pipeline.yaml", "prod.yaml", ["train.workers=8"], image=None)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctpipe.components.lib.config import Config


def compile_pipeline(out: str | Path, config_path: str | None, overrides: list[str], image: str | None) -> Path:
    """Compile the pipeline for a cluster with the config (over the cluster defaults) as its default; return the
    YAML path. A config that would train in the step pod or give MLflow no credentials is refused."""
    import yaml
    from kfp import compiler

    from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE
    from ctpipe.components.run_config import resolve_config
    from ctpipe.pipelines.continuous_training import DEFAULT_CLUSTER_TRACKING_URI, build_pipeline

    # --image: the steps' image, also recorded in the compiled config (a --set of kubernetes.image).
    settings = [*overrides, *([f"kubernetes.image={image}"] if image else [])]
    config = resolve_config(file=config_path, settings=settings, target="cluster")
    uri = config.registry.tracking_uri or ""
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    pipeline = build_pipeline(
        config.kubernetes,
        default_config_json=config.to_json(),
        default_tracking_uri=uri or DEFAULT_CLUSTER_TRACKING_URI,
    )
    compiler.Compiler().compile(pipeline, str(out_path))
    target_image = config.kubernetes.image
    if target_image != COMPONENT_IMAGE:
        docs = list(yaml.safe_load_all(out_path.read_text()))
        for executor in docs[0]["deploymentSpec"]["executors"].values():
            if executor.get("container", {}).get("image") == COMPONENT_IMAGE:
                executor["container"]["image"] = target_image
        out_path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out_path


def compiled_config(spec: dict) -> Config:
    """The config a compiled pipeline (its first YAML document, as a dict) was compiled with: the constant that
    prepare_run resolves a run from (the run form's ``config_json`` defaults to empty, meaning this)."""
    from ctpipe.components.lib.config import Config

    task = spec["root"]["dag"]["tasks"]["prepare-run"]["inputs"]["parameters"]["default_config_json"]
    return Config.from_json(task["runtimeValue"]["constant"])
