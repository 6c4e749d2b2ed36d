"""sac: exactly one consumer working on a RabbitMQ queue, nothing lost or done twice.

The one name the project installs. ``sac.sdk`` is what applications import; ``sac.server``
starts local servers, ``sac.chaos`` is the chaos suite, ``sac.checker`` the data pipeline, and
the rest of this package is the ``sac`` command line. Each subpackage is a folder here
(``sac/sdk/``, ``sac/server/``...), so a file has one path in git and in tracebacks, and one
import name. Nothing is imported here: ``import sac.checker`` on a Spark executor, or
``import sac.sdk`` in an application, loads only that subpackage.
"""


def __getattr__(name: str) -> str:
    """``sac.__version__``: the installed distribution's ("unknown" in a checkout that is
    not installed), looked up only when asked, so that importing a subpackage stays light."""
    if name == "__version__":
        import importlib.metadata

        try:
            return importlib.metadata.version("sac")
        except importlib.metadata.PackageNotFoundError:
            return "unknown"
    raise AttributeError(f"module 'sac' has no attribute {name!r}")
