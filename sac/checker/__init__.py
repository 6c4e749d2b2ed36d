"""The data pipeline: checks run directories (``SPEC.md``) and audits ledgers,
on Spark or in pure Python, and renders the report. ``sac/checker/SPEC.md`` defines the verdict
both engines compute. It imports nothing from ``sac.sdk``: it reads files, so it runs on a Spark
cluster with only its own dependencies."""

