"""Kubernetes names: deterministic DNS-1035 names for the objects a pipeline run creates, and the API server's name rules."""

from __future__ import annotations

import hashlib
import re

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 63
# Name rules the API server enforces on the objects and pods a job creates.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Keep room within 63 for the names of the pods a job creates: "<job>-worker-<index>" (PyTorchJob), and
# "<job>-node-0-<index>-<5 random>" (TrainJob: its JobSet's webhook refuses the JobSet, not the TrainJob,
# when those would exceed 63). 45 fits up to 10,000 nodes.
MAX_JOB_NAME = 45


def is_dns1035_label(name: str) -> bool:
    """True when ``name`` is a DNS-1035 label (what the PyTorchJob webhook demands of job names)."""
    return len(name) <= MAX_NAME and bool(DNS1035.match(name))


def job_name_for(pipeline_run_id: str, task: str = "train", *, prefix: str = "ctpipe") -> str:
    """The job name of ``task`` in a pipeline run: the same inputs always give the same name.

    A retried task therefore finds (and re-attaches to) the job its first attempt created.
    """
    return to_dns1035(f"{prefix}-{task}-{pipeline_run_id}")


def to_dns1035(text: str, *, max_length: int = MAX_JOB_NAME) -> str:
    """Map any text to a DNS-1035 label; valid short names are kept, others get a stable hash suffix."""
    if is_dns1035_label(text) and len(text) <= max_length:
        return text
    digest = hashlib.blake2b(text.encode(), digest_size=5).hexdigest()
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = re.sub(r"^[^a-z]+", "", slug)  # must start with a letter
    head = slug[: max_length - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}" if head else f"j{digest}"


def training_job_name(launch_name: str) -> str:
    """The PyTorchJob name for a launch: kept when already a ctpipe job name, else derived for task "train".

    The train step passes the MLflow run id its steps log to (the pipeline run's own, or with caching the
    run of its data, config and code); a retried attempt passes the same id, so the name repeats.
    """
    if launch_name.startswith("ctpipe-") and is_dns1035_label(launch_name) and len(launch_name) <= MAX_JOB_NAME:
        return launch_name
    return job_name_for(launch_name, "train")
