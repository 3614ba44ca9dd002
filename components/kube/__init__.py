"""Kubernetes pieces of ctpipe: CRD lookup, strict schema validation, job names and job building."""
