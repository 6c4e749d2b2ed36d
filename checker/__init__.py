"""The data pipeline: checks run directories (``../shared/HISTORY.md``) and audits ledgers,
on Spark or in pure Python, and renders the report. ``checker/SPEC.md`` defines the verdict
both engines compute. It imports nothing from ``sdk``: it reads files, so it runs on a Spark
cluster with only its own dependencies."""
