"""What ctpipe's tests and benchmarks share: fault injection, planted model bugs, a local MLflow server.

Installed with ctpipe (as ``torch.testing`` is with torch) so that a training pod, a fake cluster's worker or
an installed wheel can load the faults a test names; the pipeline itself never imports it
(``tests/test_import_graph.py``).
"""
