"""Snapshots and triage as documents: JSON (``jsondoc``), plain text (``textreport``) and
Prometheus metrics (``metrics``)."""
