"""ctpipe: a continuous-training pipeline for Kubeflow, paranoid by default.

The one installed package. Its parts (the repository keeps them as top-level folders):

    ctpipe.components   the steps of the pipeline, the task layer and the libraries under them
    ctpipe.pipelines    the pipeline definition, the local runner, deploy, the triggers and the ``ctpipe`` command
    ctpipe.task         the public API for bringing your own model (a task)

Importing ``ctpipe`` imports nothing heavy: ``ctpipe --version`` stays fast.
"""

import time

# The package's parts: the repository's top-level folders of the same names (setup.py maps them in).
PARTS = ("components", "pipelines")

# The earliest moment ctpipe's own code runs in a ``ctpipe`` process: the CLI's start-up is measured from
# here when the process itself is older than its interpreter (a shell that exec'd ``ctpipe``).
LOADED_AT = time.time()


def __getattr__(name: str) -> str:
    """``ctpipe.__version__``, read from the installed metadata when asked for: importlib.metadata and its scan
    of the installed distributions cost every process that imports ctpipe ~30 ms (the warm-start server's start
    among them, which the first step waits for)."""
    if name != "__version__":
        raise AttributeError(f"module 'ctpipe' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("ctpipe")
    except PackageNotFoundError:  # a source tree that was never installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value
