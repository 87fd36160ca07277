"""Build products, content-addressed and kept where no candidate job can write.

A product is what one build job (build_job.py) built for one candidate source: the extension
libraries its load_inline calls made, and which call made which. Its key is a hash of the
candidate's source and the toolchain (toolchain.py), computed by the parent, never taken from a
job. Layout: ROOT/KEY/{manifest.json, MODULE.so ...}, ROOT bound read-only into the candidates'
sandbox (workers.py) and hidden from build jobs.

Admission copies, never moves: the parent opens each library the job claims under the build job's
own dir without following links (regular files, bounded), hashes it as it copies into a staging
dir of its own, writes the manifest and renames the whole into place. So nothing the job made
(owner, mode, a hard link, a file it could still hold open) reaches the store, only bytes.

Before a product is handed to a run job it is checked again (`check`): every library hashed
against the digests the parent recorded when it admitted it (this process), or the manifest's
(an earlier one). A product swapped or altered since is refused and dropped; the run job then
builds its own, as it would without a compile stage.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from kernelloop.sandbox.safe_io import UnsafeFileError
from kernelloop.tools.verify.build_job import LIBRARY_SUFFIX, MODULE_NAME

MANIFEST = "manifest.json"
EXTENSIONS_DIR = ("cache", "torch_extensions")  # where a build job's load_inline builds (runner.cache_env)
MAX_LIBRARY_BYTES = 1 << 30
MAX_CALLS = 64  # load_inline calls one candidate may have served
KEY = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Product:
    """One candidate's built extensions in the store."""

    key: str
    path: Path
    calls: tuple[tuple[str, str], ...]  # (load_inline call key, module name)
    digests: tuple[tuple[str, str], ...]  # (file name, sha256)

    def job_field(self) -> dict:
        """What the run job is handed (job["prebuilt"]: build_job.serve)."""
        return {"dir": str(self.path), "calls": [{"key": key, "module": module} for key, module in self.calls]}


def _open_in(dir_fd: int, name: str, flags: int) -> int:
    if not name or name in (".", "..") or "/" in name:
        raise UnsafeFileError(f"{name!r} is not a plain name")
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise UnsafeFileError(f"{name} can't be opened ({exc.strerror})") from None


def _open_dir(path: Path) -> int:
    """A dir reached component by component from `path`'s first part, no link followed."""
    fd = os.open(path.parts[0], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in path.parts[1:]:
            inner = _open_in(fd, part, os.O_RDONLY | os.O_DIRECTORY)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _hash_copy(src_dir_fd: int, name: str, dst: Path | None) -> str:
    """sha256 of a regular file (at most MAX_LIBRARY_BYTES) in `src_dir_fd`, copied to `dst` as it is read."""
    fd = _open_in(src_dir_fd, name, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{name} is not a regular file")
        if info.st_size > MAX_LIBRARY_BYTES:
            raise UnsafeFileError(f"{name} is {info.st_size} bytes, over {MAX_LIBRARY_BYTES}")
        os.set_blocking(fd, True)
        digest, left = hashlib.sha256(), MAX_LIBRARY_BYTES
        with (open(dst, "xb") if dst is not None else contextlib.nullcontext()) as out:
            while chunk := os.read(fd, min(1 << 22, left + 1)):
                left -= len(chunk)
                if left < 0:
                    raise UnsafeFileError(f"{name} grew past {MAX_LIBRARY_BYTES} bytes while read")
                digest.update(chunk)
                if out is not None:
                    out.write(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


class BuildStore:
    """The products of one workspace. Only the trusted parent writes here."""

    def __init__(self, root: Path):
        Path(root).mkdir(parents=True, exist_ok=True)
        self.root = Path(root).resolve()  # the path the candidates' sandbox binds, and the one walked link-free
        os.chmod(self.root, 0o755)  # readable by the sandbox user, writable by this process alone
        self._admitted: dict[str, tuple[tuple[str, str], ...]] = {}  # key -> digests, as this process wrote them

    def get(self, key: str) -> Product | None:
        """The product under `key`, as its manifest says (unchecked: `check` before use), else None."""
        if not KEY.fullmatch(key):
            return None
        path = self.root / key
        try:
            manifest = json.loads((path / MANIFEST).read_text())
            calls = tuple((str(c["key"]), str(c["module"])) for c in manifest["calls"])
            digests = tuple((str(name), str(digest)) for name, digest in manifest["files"].items())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return Product(key, path, calls, digests) if manifest.get("key") == key else None

    def check(self, product: Product) -> str | None:
        """None if every library of `product` still hashes as admitted, else why not."""
        expected = self._admitted.get(product.key, product.digests)
        if expected != product.digests:
            return "its manifest differs from what was admitted"
        try:
            fd = _open_dir(product.path)
        except (OSError, UnsafeFileError) as exc:
            return f"its dir can't be opened ({exc})"
        try:
            present = sorted(n for n in os.listdir(fd) if n != MANIFEST)
            if present != sorted(name for name, _ in expected):
                return "its files differ from those admitted"
            for name, digest in expected:
                if _hash_copy(fd, name, None) != digest:
                    return f"{name} does not hash as admitted"
        except (OSError, UnsafeFileError) as exc:
            return f"it can't be read ({exc})"
        finally:
            os.close(fd)
        return None

    def admit(self, key: str, job_dir: Path, calls: object, toolchain: str) -> Product | str:
        """Copy what a finished build job built (its claimed `calls`) into the store under `key`.
        Returns the product, or why nothing was admitted (a claim that does not hold)."""
        if not KEY.fullmatch(key):
            raise ValueError(f"not a product key: {key!r}")
        checked = _checked_calls(calls)
        if isinstance(checked, str):
            return checked
        staging = self.root / f".staging-{secrets.token_hex(8)}"
        staging.mkdir(mode=0o755)
        try:
            digests: list[tuple[str, str]] = []
            for _, module, build_dir in checked:
                name = f"{module}{LIBRARY_SUFFIX}"
                if any(name == seen for seen, _ in digests):
                    continue  # two calls served by one library (the same module loaded twice)
                fd = _open_dir(Path(job_dir, *EXTENSIONS_DIR, build_dir))
                try:
                    digests.append((name, _hash_copy(fd, name, staging / name)))
                finally:
                    os.close(fd)
                os.chmod(staging / name, 0o644)
            manifest = {"key": key, "toolchain": toolchain, "files": dict(digests),
                        "calls": [{"key": call_key, "module": module} for call_key, module, _ in checked]}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
            os.chmod(staging / MANIFEST, 0o644)
            try:
                os.rename(staging, self.root / key)
            except OSError:  # the same source built at once by another caller: that one stays
                shutil.rmtree(staging, ignore_errors=True)
                existing = self.get(key)
                return existing if existing is not None else "it could not be stored"
        except (OSError, UnsafeFileError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            return f"its build dir does not hold what it claims ({exc})"
        self._admitted[key] = tuple(digests)
        product = self.get(key)
        return product if product is not None else "it could not be read back"

    def discard(self, key: str) -> None:
        """Drop a product (one that failed its check); the next build of its source makes it again."""
        self._admitted.pop(key, None)
        if KEY.fullmatch(key):
            doomed = self.root / f".discarded-{secrets.token_hex(8)}"
            with contextlib.suppress(OSError):
                os.rename(self.root / key, doomed)
                shutil.rmtree(doomed, ignore_errors=True)


def _checked_calls(calls: object) -> list[tuple[str, str, str]] | str:
    """(call key, module name, build dir name) of each claimed call, or why the claim is refused.
    A library lies where load_inline builds it: TORCH_EXTENSIONS_DIR/NAME/MODULE.so, NAME being the
    module's name without a `_vN` suffix."""
    if not isinstance(calls, list) or len(calls) > MAX_CALLS:
        return "its list of built modules is not a list of at most 64"
    checked = []
    for call in calls:
        if not isinstance(call, dict):
            return "a built module's record is not an object"
        key, module, where = call.get("key"), call.get("module"), call.get("file")
        if not (isinstance(key, str) and KEY.fullmatch(key) and isinstance(module, str)
                and MODULE_NAME.fullmatch(module) and isinstance(where, str)):
            return "a built module's record has no plain key, name and file"
        build_dir = Path(where).parent.name
        if Path(where).name != f"{module}{LIBRARY_SUFFIX}" or not MODULE_NAME.fullmatch(build_dir):
            return f"module {module} was not loaded from where load_inline builds it"
        checked.append((key, module, build_dir))
    return checked
