"""A local cluster's own certificate authority and the one server certificate its nodes share.

What the certificates say (``server_extensions``) and the ``openssl`` steps that make them
(``openssl_steps``) are pure; ``make_certificates`` runs the steps in a directory of their own.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ._errors import CommandError, PackageMissingError

LOOPBACK = "127.0.0.1"
DAYS = "30"
KEYS = ("ca.key", "server.key")


def server_extensions(hosts: Sequence[str]) -> str:
    """The server certificate's extensions: valid for 127.0.0.1 and localhost, and for every
    other address in ``hosts`` (the nodes' namespace addresses in netns mode)."""
    names = "".join(f",IP:{host}" for host in dict.fromkeys(hosts) if host != LOOPBACK)
    return (f"subjectAltName=IP:{LOOPBACK},DNS:localhost{names}\n"
            "basicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")


def openssl_steps(cluster: str) -> list[list[str]]:
    """``openssl`` arguments, run in order in the TLS directory: a CA named after the
    cluster, a key and request for the server, the request signed by the CA."""
    return [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS,
         "-keyout", "ca.key", "-out", "ca.pem", "-subj", f"/CN=sac {cluster} local CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
         "-out", "server.csr", "-subj", "/CN=localhost"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", DAYS, "-out", "server.pem", "-extfile", "server.ext"],
    ]


def make_certificates(tls_dir: Path, cluster: str, hosts: Sequence[str]) -> None:
    """Create ``tls_dir`` (owner-only) with ``ca.pem``, ``server.pem`` and their keys."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise PackageMissingError(
            "openssl is missing: install the Debian package openssl (or `make deps`)")
    tls_dir.mkdir(mode=0o700)
    (tls_dir / "server.ext").write_text(server_extensions(hosts))
    for step in openssl_steps(cluster):
        done = subprocess.run(
            [openssl, *step], cwd=tls_dir, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise CommandError(f"openssl {step[0]} failed: {done.stderr.strip()[-500:]}")
    for key in KEYS:
        (tls_dir / key).chmod(0o600)
