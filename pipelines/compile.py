"""Compile the pipeline to KFP IR YAML for a cluster, with the config (over the cluster defaults) as its default.

    path = compile_pipeline("pipeline.yaml", "prod.yaml", ["train.workers=8"], image=None)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


def compile_pipeline(out: str | Path, config_path: str | None, overrides: list[str], image: str | None) -> Path:
    """Compile the pipeline for a cluster with the config (over the cluster defaults) as its default; return the
    YAML path. A config that would train in the step pod or give MLflow no credentials is refused."""
    import yaml
    from kfp import compiler

    from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE
    from ctpipe.pipelines.cluster_config import load_cluster_config
    from ctpipe.pipelines.continuous_training import DEFAULT_CLUSTER_TRACKING_URI, build_pipeline

    config = load_cluster_config(config_path, overrides)
    if image:  # --image: the steps' image, also recorded in the compiled config
        config.kubernetes = dataclasses.replace(config.kubernetes, image=image)
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
