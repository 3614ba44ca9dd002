"""Kubernetes objects and API access: CRD schemas and strict validation, job names, the PyTorchJob and TrainJob objects, pod logs, staging.

It knows nothing of training: ``ctpipe.components.steps.train`` (its launchers) uses it, never the reverse
(tests/test_import_graph.py holds that line).
"""
