"""The MLflow model registry as ctpipe keeps it: versions and their tags, champion moves under a lock, the
champion's history, read-only views and the verified download of a version's files.

Used by the register step, ``ctpipe models``, ``ctpipe gc`` and ``ctpipe serve``; it imports only libraries.
"""
