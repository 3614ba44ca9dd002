"""The one place that chooses a launcher: ``train.backend`` -> local processes, a PyTorchJob or a TrainJob."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctpipe.components.lib.config import Config
from ctpipe.components.steps.train.launchers.base import Launcher

if TYPE_CHECKING:
    from ctpipe.components.steps.train.launchers.kubeflow import KubeflowJobLauncher


def launcher_for(config: Config) -> Launcher:
    """The launcher of ``config.train.backend``."""
    if config.train.backend == "local":
        from ctpipe.components.steps.train.launchers.local import LocalLauncher

        return LocalLauncher()
    return kubeflow_launcher_for(config)


def kubeflow_launcher_for(config: Config, **options: Any) -> KubeflowJobLauncher:
    """The Kubeflow job launcher of ``config.train.backend``: TrainJob for ``trainjob``, else PyTorchJob.

    ``local`` gets the PyTorchJob launcher too: what ``ctpipe render-job`` shows a cluster would run.
    ``options`` go to the launcher (``api_client``, ``namespace``, ``emit``, timings).
    """
    # Imported here only, so the kubernetes client stays out of local runs.
    if config.train.backend == "trainjob":
        from ctpipe.components.steps.train.launchers.trainjob import TrainJobLauncher

        return TrainJobLauncher(config, **options)
    from ctpipe.components.steps.train.launchers.pytorchjob import PyTorchJobLauncher

    return PyTorchJobLauncher(config, **options)
