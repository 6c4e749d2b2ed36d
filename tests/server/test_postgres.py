"""The local PostgreSQL the dedup store's tests will use: real server, loopback, secret password."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
import stat
import time
from pathlib import Path

import psycopg
import pytest

from sac.server import (
    AlreadyRunningError,
    LocalPostgres,
    NotRunningError,
    PackageMissingError,
    PortBusyError,
    ServerError,
    _proc,
)
from sac.server._ports import port_is_free
from sac.server.postgres import RunAs, startup_answer
from tests.helpers import is_loopback, listening_addresses


def real_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_a_real_connection_runs_a_query(postgres: LocalPostgres) -> None:
    with psycopg.connect(postgres.dsn, connect_timeout=10) as conn:
        row = conn.execute("select 1, current_user, current_setting('fsync')").fetchone()
        assert row == (1, "sac", "on")
        assert conn.info.server_version // 10000 >= 15
    assert startup_answer(postgres.port) == "ready"
    status = postgres.status()
    assert status["running"] is True
    assert status["accepting"] is True
    assert _proc.is_ours(status["pid"], postgres.dir)


def test_listens_on_loopback_only(postgres: LocalPostgres) -> None:
    pids = postgres.pids()
    assert postgres.status()["pid"] in pids
    assert len(pids) >= 5  # postmaster, checkpointer, writers, launchers
    addresses = listening_addresses(pids)
    assert addresses == {f"127.0.0.1:{postgres.port}"}
    assert [a for a in addresses if not is_loopback(a)] == []


def test_password_stays_secret_and_is_required(postgres: LocalPostgres) -> None:
    password = postgres.credentials.password
    assert len(password) >= 24
    shown = [repr(postgres), repr(postgres.credentials), json.dumps(postgres.status()),
             postgres.display_dsn]
    assert not [text for text in shown if password in text]
    assert postgres.display_dsn == f"postgresql://sac:***@127.0.0.1:{postgres.port}/postgres"
    logs = postgres.log_files()
    assert postgres.log_file in logs
    assert not [str(p) for p in logs if password in p.read_text(errors="replace")]
    cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in postgres.pids()]
    assert not [c for c in cmdlines if password.encode() in c]
    for secret in (postgres.credentials_file, postgres.dir / "pgpass"):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert secret.stat().st_uid == os.geteuid()
    assert not (postgres.dir / "initdb.pw").exists()
    # The DSN meant for code carries it; without it the server says no.
    assert password in postgres.dsn
    wrong = postgres.dsn.replace(password, "not-the-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=10).close()


def test_runs_as_the_postgres_user_when_root(postgres: LocalPostgres) -> None:
    """initdb and postgres refuse root: as root they run as ``postgres``, else as ourselves."""
    expected = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert postgres.data_dir.stat().st_uid == expected
    assert stat.S_IMODE(postgres.data_dir.stat().st_mode) == 0o700
    assert {real_uid(pid) for pid in postgres.pids()} == {expected}


def test_create_database_gives_a_working_dsn(postgres: LocalPostgres) -> None:
    name = f"dedup_{os.urandom(4).hex()}"
    dsn = postgres.create_database(name)
    assert postgres.create_database(name) == dsn  # idempotent
    assert dsn.endswith(f"@127.0.0.1:{postgres.port}/{name}")
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        assert conn.execute("select current_database()").fetchone() == (name,)
        conn.execute("create table seen (id text primary key)")
        conn.execute("insert into seen values ('a')")
    with psycopg.connect(postgres.dsn, connect_timeout=10) as conn:
        found = conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchall()
        assert found == [(1,)]
    with pytest.raises(ValueError, match="not valid"):
        postgres.create_database('x"; drop database postgres; --')


def test_attach_and_up_of_a_running_server(postgres: LocalPostgres) -> None:
    again = LocalPostgres.attach(postgres.name, home=postgres.home)
    assert again.port == postgres.port
    assert again.is_running()
    assert again.dsn == postgres.dsn
    with pytest.raises(AlreadyRunningError, match="already running"):
        LocalPostgres(name=postgres.name, home=postgres.home).up()
    assert startup_answer(postgres.port) == "ready"


@pytest.mark.slow
def test_second_server_beside_the_first_and_down_leaves_nothing(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    with LocalPostgres(name=f"pg2-{os.getpid()}", home=tmp_path) as other:
        assert other.port != postgres.port
        pids = other.pids()
        assert len(pids) >= 5
        # A client still connected must not hold down() up (fast shutdown, not smart).
        conn = psycopg.connect(other.dsn, connect_timeout=10)
        try:
            assert conn.execute("select 1").fetchone() == (1,)
            started = time.monotonic()
            other.down()
            took = time.monotonic() - started
        finally:
            conn.close()
        assert took < 10, f"down() took {took:.1f} s"
        assert _proc.find_marked(other.dir) == []
        assert other.pids() == []
        assert [p for p in pids if _proc.is_alive(p)] == []
        assert port_is_free(other.port)
        assert not other.is_running()
        with pytest.raises(NotRunningError, match="not running"):
            other.down()
    # Downing one server left the other alone.
    with psycopg.connect(postgres.dsn, connect_timeout=10) as conn2:
        assert conn2.execute("select 1").fetchone() == (1,)


@pytest.mark.slow
def test_committed_rows_survive_a_kill(tmp_path: Path) -> None:
    with LocalPostgres(name=f"pgk-{os.getpid()}", home=tmp_path) as pg:
        with psycopg.connect(pg.dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute("create table seen (id int primary key)")
            conn.execute("insert into seen values (1), (2)")
        pids = pg.pids()
        pg.kill()
        assert not pg.is_running()
        assert pg.pids() == []
        assert [p for p in pids if _proc.is_alive(p)] == []
        pg.start()
        with psycopg.connect(pg.dsn, connect_timeout=10) as conn:
            assert conn.execute("select id from seen order by id").fetchall() == [(1,), (2,)]
        assert "automatic recovery in progress" in pg.log_file.read_text()
        pg.down()
        # A new object finds the same server again on the data down() left.
        again = LocalPostgres(name=pg.name, home=tmp_path).start()
        assert again.port == pg.port
        with psycopg.connect(again.dsn, connect_timeout=10) as conn:
            assert conn.execute("select count(*) from seen").fetchone() == (2,)
    assert _proc.find_marked(pg.dir) == []
    assert pg.pids() == []


def modes(top: Path, below: Path) -> dict[str, str]:
    """The mode of ``below`` and of each of its ancestors up to ``top``."""
    chain = [below, *[p for p in below.parents if p.is_relative_to(top)]]
    return {str(p): stat.filemode(p.stat().st_mode) for p in chain}


@pytest.mark.slow
def test_the_hosts_directories_keep_their_modes(tmp_path: Path) -> None:
    """A home the ``postgres`` user cannot enter (under a 0700 directory, as root's home or
    pytest's ``/tmp/pytest-of-root`` are): the server works, from up to a crash and down, and
    no directory of the host changes its mode. Under ``tmp_path`` only: other sessions on a
    shared machine change ``/tmp/pytest-of-root`` at any time."""
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    closed.chmod(0o700)
    home = closed / "home"
    home.mkdir()
    before = modes(tmp_path.parent, home)
    pg = LocalPostgres(name="modes", home=home)
    with pg:
        assert modes(tmp_path.parent, home) == before
        with psycopg.connect(pg.dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute("create table seen (id int primary key)")
            conn.execute("insert into seen values (1)")
        pg.kill()
        pg.start()
        with psycopg.connect(pg.dsn, connect_timeout=10) as conn:
            assert conn.execute("select id from seen").fetchall() == [(1,)]
        assert modes(tmp_path.parent, home) == before
        if os.geteuid() == 0:
            assert not pg.data_dir.is_relative_to(home)
            assert pg.data_dir.parent == pg.runtime_dir
            assert stat.S_IMODE(pg.runtime_dir.stat().st_mode) == 0o711
            assert pg.status()["data_dir"] == str(pg.data_dir)
    assert modes(tmp_path.parent, home) == before
    assert pg.pids() == []


@pytest.mark.slow
def test_a_runtime_directory_goes_with_its_state_directory(tmp_path: Path) -> None:
    """As root, ``data/`` lives outside the state directory: ``rm -r`` of the home is still a
    complete reset, finished by the next ``up()`` of any server."""
    if os.geteuid() != 0:
        assert LocalPostgres(name="gone", home=tmp_path).runtime_dir == tmp_path / "gone"
        return
    first = LocalPostgres(name="gone", home=tmp_path / "a")
    with first:
        runtime = first.runtime_dir
    assert (runtime / "data" / "PG_VERSION").exists()  # down() keeps the data
    shutil.rmtree(tmp_path / "a")
    with LocalPostgres(name="other", home=tmp_path / "b") as second:
        assert startup_answer(second.port) == "ready"
        assert not runtime.exists()
    shutil.rmtree(tmp_path / "b")


def test_a_runtime_root_the_postgres_user_cannot_reach_is_refused(tmp_path: Path) -> None:
    entry = pwd.getpwnam("postgres")
    run_as = RunAs(uid=entry.pw_uid, gid=entry.pw_gid, gids=(entry.pw_gid,))
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "a").chmod(0o700)
    assert tmp_path / "a" in run_as.closed_on_way_to(deep / "data")
    with pytest.raises(ServerError, match=r"cannot enter /\S* \(mode drwx------\) on the way "
                                          rf"to {re.escape(str(deep / 'data'))}"):
        run_as.check_way_to(deep / "data")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700  # left as it was
    if os.geteuid() == 0:
        pg = LocalPostgres(name="far", home=tmp_path / "home", runtime_root=deep)
        with pytest.raises(ServerError, match="choose a runtime_root it can reach"):
            pg.up()
        assert pg.pids() == []
        assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700


def test_busy_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(PortBusyError, match=rf"127\.0\.0\.1:{port} \(PostgreSQL\)"):
            LocalPostgres(name="busy", port=port, home=tmp_path).up()
    assert _proc.find_marked(tmp_path / "busy") == []


def test_down_of_a_server_that_never_ran(tmp_path: Path) -> None:
    with pytest.raises(NotRunningError, match="not running"):
        LocalPostgres(name="nothing", home=tmp_path).down()
    with pytest.raises(NotRunningError, match="not running"):
        LocalPostgres.attach("nothing", home=tmp_path)


def test_missing_debian_package_is_named(tmp_path: Path) -> None:
    with pytest.raises(PackageMissingError, match=r"apt-get install -y postgresql"):
        LocalPostgres(name="nopg", home=tmp_path, pg_root=tmp_path / "none").up()
    assert not (tmp_path / "nopg").exists()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"name": "Bad Name"}, "name"), ({"start_timeout": 0}, "start_timeout")],
)
def test_bad_settings_are_rejected(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LocalPostgres(**kwargs)  # type: ignore[arg-type]
