"""The rules every file gpudash writes on the operator's machine is opened by.

gpudash often runs as root, so each of its files (the audit trail, the log, the learned
footprints, the known_hosts line of ``--accept-new-host-key``, the exporter's textfile)
must be impossible to turn against root by whoever could plant a symbolic link or a
file where gpudash writes:

* the directory is opened first, without following a symbolic link, and checked as
  OpenSSH checks ``~/.ssh``: a directory, owned by the effective user (or root, where a
  caller allows it) and writable by nobody else; anything else is refused with
  ``StateDirError`` saying how to fix it. A directory of gpudash's own that others can
  read (0755, made by an older gpudash) is made 0700;
* every file is opened through that directory's fd with ``O_NOFOLLOW`` (a link is never
  followed), non-blocking (a FIFO planted there cannot hang gpudash), and must be a
  regular file owned by the effective user; what gpudash creates is 0600;
* a file that is rewritten is written whole under a fresh random name in the same
  directory (``O_EXCL``: mkstemp's way), synced, and renamed over the old one: a reader
  never sees half of it and there is no fixed temporary name to pre-plant;
* an append is written whole (a short write is continued, never left to merge with the
  next line) and, for the audit, synced before the caller goes on;
* a file the operator names (``report --svg FILE``) may be in any directory they can
  write, but is written the rewriting way (a fresh name, then a rename: a link planted
  meanwhile is replaced, never followed), and a name that already is a link, or not a
  regular file, is refused.

Every error is an ``OSError`` (``StateDirError`` is one): callers that report a file
they could not write need no other case.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_TEMP_TRIES = 100


class StateDirError(OSError):
    """A directory or file gpudash refuses to write to, and how to fix it."""

    def __init__(self, path: Path | str, why: str, fix: str) -> None:
        super().__init__(errno.EPERM, f"refusing {path}: {why}; {fix}")
        self.path = str(path)
        self.why = why
        self.fix = fix

    def __str__(self) -> str:
        return str(self.strerror)


def _euid() -> int:
    return os.geteuid()


def _check_dir(fd: int, path: Path, owners: Collection[int]) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise StateDirError(path, "not a directory", f"remove it (rm {path}) and run again")
    if st.st_uid not in owners:
        raise StateDirError(path, f"owned by uid {st.st_uid}, not by uid {_euid()} (you)",
                            f"fix: chown {_euid()} {path}, or remove it")
    if st.st_mode & 0o022:
        raise StateDirError(path, f"writable by others (mode {stat.S_IMODE(st.st_mode):04o})",
                            f"fix: chmod go-w {path}")
    return st


def open_dir(path: Path, *, create: bool = True, private: bool = True,
             owners: Collection[int] | None = None) -> int:
    """An fd of directory ``path`` that passed the rules (see the module); the caller
    closes it. ``create``: made (0700, parents as needed) when missing. ``private``:
    gpudash's own directory, made 0700 when others may read it. ``owners``: the uids it
    may belong to (default: the effective user's only)."""
    allowed = {_euid()} if owners is None else set(owners)
    path = Path(os.path.abspath(path))
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _open_or_make_dir(parent, path, create)
    finally:
        os.close(parent)
    try:
        st = _check_dir(fd, path, allowed)
        if private and stat.S_IMODE(st.st_mode) != PRIVATE_DIR and st.st_uid == _euid():
            os.fchmod(fd, PRIVATE_DIR)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_or_make_dir(parent: int, path: Path, create: bool) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(2):
        try:
            return os.open(path.name, flags, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(path.name, PRIVATE_DIR, dir_fd=parent)
            except FileExistsError:
                pass  # made meanwhile: open what is there (and check it)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                kind = "a symbolic link" if os.path.islink(path) else "not a directory"
                raise StateDirError(path, kind, f"remove it (rm {path}) and run again"
                                    ) from None
            raise
    return os.open(path.name, flags, dir_fd=parent)


@contextmanager
def opened_dir(path: Path, *, create: bool = True, private: bool = True,
               owners: Collection[int] | None = None) -> Iterator[int]:
    """``open_dir`` for a ``with`` block."""
    fd = open_dir(path, create=create, private=private, owners=owners)
    try:
        yield fd
    finally:
        os.close(fd)


def open_file(dir_fd: int, name: str, flags: int, *, where: Path,
              mode: int = PRIVATE_FILE, enforce_mode: bool = True) -> int:
    """``name`` in the checked directory ``dir_fd``, opened with ``flags`` (``O_CREAT``
    makes it ``mode``), never through a link; refused unless it is a regular file owned by
    the effective user. ``enforce_mode``: an existing file gets ``mode`` too."""
    path = where / name
    try:
        fd = os.open(name, flags | _OPEN, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateDirError(path, "a symbolic link", f"remove it (rm {path}) and run again"
                                ) from None
        if exc.errno == errno.ENXIO:  # a FIFO with no reader
            raise StateDirError(path, "not a regular file", f"remove it (rm {path})") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateDirError(path, "not a regular file", f"remove it (rm {path})")
        if st.st_uid != _euid():
            raise StateDirError(path, f"owned by uid {st.st_uid}, not by uid {_euid()} (you)",
                                f"fix: chown {_euid()} {path}, or remove it")
        if enforce_mode and stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: a short write is continued; a write that fails after part
    of it went out raises an OSError that says how much did."""
    view = memoryview(data)
    done = 0
    while done < len(data):
        try:
            n = os.write(fd, view[done:])
        except OSError as exc:
            if done:
                raise OSError(exc.errno, f"{exc.strerror} (cut after {done} of {len(data)} "
                              "bytes)") from None
            raise
        if n <= 0:
            raise OSError(errno.EIO, f"nothing written after {done} of {len(data)} bytes")
        done += n


def append_line(path: Path, line: bytes, *, sync: bool = True, private_dir: bool = True,
                mode: int = PRIVATE_FILE, enforce_mode: bool = True) -> None:
    """Append ``line`` (ending in a newline) to ``path`` whole, as one line even after a
    half line an earlier write left (a full disk): it then starts on a line of its own.
    ``sync``: on disk (the file and, when it was made now, its directory entry) before
    this returns."""
    if not line.endswith(b"\n"):
        raise ValueError("a line ends with a newline")
    with opened_dir(path.parent, private=private_dir) as dfd:
        existed = _exists(dfd, path.name)
        fd = open_file(dfd, path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                       where=path.parent, mode=mode, enforce_mode=enforce_mode)
        try:
            size = os.fstat(fd).st_size
            if size and _last_byte(dfd, path.name) != b"\n":
                line = b"\n" + line  # never merge with a half line
            try:
                write_all(fd, line)
            except OSError:
                _try_end_line(fd)
                raise
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if sync and not existed:
            os.fsync(dfd)


def _exists(dfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _last_byte(dfd: int, name: str) -> bytes:
    fd = os.open(name, os.O_RDONLY | _OPEN, dir_fd=dfd)
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, 1, size - 1) if size else b""
    finally:
        os.close(fd)


def _try_end_line(fd: int) -> None:
    try:  # the half line ends here if there is room for one byte; else the next write's
        os.write(fd, b"\n")
    except OSError:
        pass


def open_append(path: Path) -> int:
    """``path`` opened for appending (a log), by the rules; the caller closes the fd."""
    with opened_dir(path.parent) as dfd:
        return open_file(dfd, path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                         where=path.parent)


def replace(path: Path, data: bytes, *, mode: int = PRIVATE_FILE, private_dir: bool = True,
            dir_owners: Collection[int] | None = None) -> None:
    """Make ``path`` hold ``data``: written whole to a fresh random name in the same
    directory (``O_EXCL``), synced, renamed over ``path``: never half a file, no fixed
    temporary name, never through a link."""
    with opened_dir(path.parent, private=private_dir, owners=dir_owners) as dfd:
        _write_renamed(dfd, path, data, mode)


def write_named(path: Path, data: bytes) -> None:
    """Make ``path``, a file the operator named (a report), hold ``data``, as ``replace``
    does, in whatever directory it is (the operator's choice: the path to it is theirs to
    follow). A ``path`` that is a symbolic link, or not a regular file, is refused
    (``StateDirError``): gpudash, often root, never writes through a name another user
    may have planted. The file is made as the umask says (a report is for reading)."""
    path = Path(os.path.abspath(path))
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(st.st_mode):
                raise StateDirError(path, "a symbolic link",
                                    "gpudash does not write through one: name the file "
                                    f"itself, or remove the link (rm {path})")
            if not stat.S_ISREG(st.st_mode):
                raise StateDirError(path, "not a regular file", "name a file to write")
        # a link planted after that look is replaced by the rename, never followed
        _write_renamed(dfd, path, data, None)
    finally:
        os.close(dfd)


def _write_renamed(dfd: int, path: Path, data: bytes, mode: int | None) -> None:
    """``data`` to a fresh name in ``dfd``, synced, renamed to ``path.name``. ``mode``:
    the file's mode (None: as the umask made it)."""
    fd, temp = _make_temp(dfd, path, PRIVATE_FILE if mode is not None else 0o666)
    try:
        try:
            write_all(fd, data)
            if mode is not None:
                os.fchmod(fd, mode)  # mkstemp's 0600 (umask aside), or what was asked
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dfd)
        except OSError:
            pass
        raise
    os.fsync(dfd)


def _make_temp(dfd: int, path: Path, mode: int = PRIVATE_FILE) -> tuple[int, str]:
    """mkstemp in the directory ``dfd``: a random name, created exclusively (``mode``,
    less the umask)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN
    for _ in range(_TEMP_TRIES):
        temp = f".{path.name}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(temp, flags, mode, dir_fd=dfd)
        except FileExistsError:
            continue
        os.set_blocking(fd, True)
        return fd, temp
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside {path}")


def read(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` (at most ``limit``), or None when it does not exist; read by
    the same rules (its directory is not created)."""
    try:
        dfd = open_dir(path.parent, create=False, private=False)
    except FileNotFoundError:
        return None
    try:
        try:
            fd = open_file(dfd, path.name, os.O_RDONLY, where=path.parent, enforce_mode=False)
        except FileNotFoundError:
            return None
        try:
            chunks: list[bytes] = []
            left = limit
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)
