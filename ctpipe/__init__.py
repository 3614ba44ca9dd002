"""ctpipe: a continuous-training pipeline for Kubeflow, paranoid by default.

The one installed package. Its parts (the repository keeps them as top-level folders):

    ctpipe.components   the steps of the pipeline, the task layer and the libraries under them
    ctpipe.pipelines    the pipeline definition, the local runner, deploy, the triggers and the ``ctpipe`` command
    ctpipe.task         the public API for bringing your own model (a task)

Importing ``ctpipe`` imports nothing heavy: ``ctpipe --version`` stays fast.
"""

import time
from importlib.metadata import PackageNotFoundError, version

# The package's parts: the repository's top-level folders of the same names (setup.py maps them in).
PARTS = ("components", "pipelines")

# The earliest moment ctpipe's own code runs in a ``ctpipe`` process: the CLI's start-up is measured from
# here when the process itself is older than its interpreter (a shell that exec'd ``ctpipe``).
LOADED_AT = time.time()

try:
    __version__ = version("ctpipe")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
