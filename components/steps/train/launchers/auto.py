"""``Launcher`` backend ``auto`` (the cluster default): the job kind this cluster serves, found when the step runs.

TrainJob (Trainer v2, what a stock Kubeflow installs) when its CRD and the configured ClusterTrainingRuntime
are there, else PyTorchJob (Training Operator v1); neither fails the step with a message naming both CRDs and
the runtime (components/lib/kube/discovery.py). The choice is made at run time, in the step pod, so one compiled
pipeline runs on either platform.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.kube.api import default_api_client
from ctpipe.components.lib.kube.discovery import discover_backends
from ctpipe.components.steps.train.launchers.base import WorkerLaunch
from ctpipe.components.steps.train.launchers.kubeflow import KubeflowJobLauncher
from ctpipe.components.steps.train.launchers.pytorchjob import PyTorchJobLauncher
from ctpipe.components.steps.train.launchers.trainjob import TrainJobLauncher

LAUNCHERS: dict[str, type[KubeflowJobLauncher]] = {"trainjob": TrainJobLauncher, "pytorchjob": PyTorchJobLauncher}


class AutoLauncher:
    """Discovers the installed job kind on first use, then behaves as that kind's launcher."""

    def __init__(self, config: Config, *, api_client: client.ApiClient | None = None,
                 emit: Callable[[str], None] | None = None, **options: Any) -> None:
        self.config = config
        self._api_client = api_client
        self.emit = emit or (lambda line: print(line, flush=True))
        self.options = options
        self._chosen: KubeflowJobLauncher | None = None

    def resolve(self) -> KubeflowJobLauncher:
        """The launcher of the job kind this cluster serves (asked once)."""
        if self._chosen is None:
            api_client = self._api_client or default_api_client()
            runtime = self.config.kubernetes.trainjob_runtime
            installed = discover_backends(api_client, runtime)
            backend = installed.choose()
            self.emit(
                f"train.backend=auto: TrainJob {'served' if installed.trainjob else 'not served'}"
                f"{f' (runtime {runtime!r} found)' if installed.runtime_found else ''}, "
                f"PyTorchJob {'served' if installed.pytorchjob else 'not served'}: using {backend}"
            )
            self._chosen = LAUNCHERS[backend](self.config, api_client=api_client, emit=self.emit, **self.options)
        return self._chosen

    def run(self, launch: WorkerLaunch) -> None:
        self.resolve().run(launch)
