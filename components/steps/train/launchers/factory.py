"""The one place that chooses a launcher: ``train.backend`` -> local processes, a PyTorchJob, a TrainJob, or
(``auto``) whichever of the two the cluster serves, found when the step runs."""

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
    if config.train.backend == "auto":
        from ctpipe.components.steps.train.launchers.auto import AutoLauncher

        return AutoLauncher(config)
    return kubeflow_launcher_for(config)


def kubeflow_launcher_for(config: Config, *, backend: str | None = None, **options: Any) -> KubeflowJobLauncher:
    """The Kubeflow job launcher of ``backend`` (default ``config.train.backend``): TrainJob for ``trainjob``,
    else PyTorchJob.

    ``local`` gets the PyTorchJob launcher too; ``auto`` must be resolved first (AutoLauncher does, against the
    cluster; ``ctpipe render-job`` renders both kinds). ``options`` go to the launcher (``api_client``,
    ``namespace``, ``emit``, timings).
    """
    backend = backend or config.train.backend
    if backend == "auto":
        raise ValueError("train.backend=auto names no job kind until discovery resolves it (AutoLauncher)")
    # Imported here only, so the kubernetes client stays out of local runs.
    if backend == "trainjob":
        from ctpipe.components.steps.train.launchers.trainjob import TrainJobLauncher

        return TrainJobLauncher(config, **options)
    from ctpipe.components.steps.train.launchers.pytorchjob import PyTorchJobLauncher

    return PyTorchJobLauncher(config, **options)
