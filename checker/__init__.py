"""The data pipeline: checks run directories (``SPEC.md``) and audits ledgers,
on Spark or in pure Python, and renders the report. ``checker/SPEC.md`` defines the verdict
both engines compute. It imports nothing from ``sac.sdk``: it reads files, so it runs on a Spark
cluster with only its own dependencies."""

if __name__ != "sac.checker":  # one name per module: a second would load a second copy
    raise ImportError(
        f"import sac.checker, not {__name__}: checker/ is the package sac.checker", name=__name__
    )
