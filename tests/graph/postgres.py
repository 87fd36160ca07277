"""A throwaway PostgreSQL server for tests: the machine's binaries, else pgserver's (pip, the dev extra).

Started with initdb + pg_ctl in a fresh directory on a free port, trust auth on 127.0.0.1 only, and
stopped (immediate) and deleted afterwards. As root, the server runs as `nobody` (postgres refuses root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def binaries() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when neither the machine nor pgserver has them."""
    found = shutil.which("pg_ctl")
    places = [Path(found).resolve().parent] if found else []
    places += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    try:
        import pgserver

        places.append(Path(pgserver.__file__).parent / "pginstall" / "bin")
    except ImportError:
        pass
    return next((p for p in places if (p / "initdb").is_file() and (p / "pg_ctl").is_file()), None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def postgres_server(bin_dir: Path) -> Iterator[str]:
    """A running server; yields its URL (postgresql://postgres@127.0.0.1:PORT/postgres)."""
    root = Path(tempfile.mkdtemp(prefix="kernelloop-pg-"))
    root.chmod(0o755)  # traversable by `nobody` when we are root
    data, port = root / "data", _free_port()
    demote = None
    if os.geteuid() == 0:
        import pwd

        nobody = pwd.getpwnam("nobody")
        data.mkdir()
        os.chown(data, nobody.pw_uid, nobody.pw_gid)

        def demote() -> None:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)

    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, timeout=120, preexec_fn=demote, cwd=root)

    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(data / "log"), "-o",
            f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True,
                       timeout=60, preexec_fn=demote, cwd=root)
        shutil.rmtree(root, ignore_errors=True)
