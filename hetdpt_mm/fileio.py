"""Atomic outputs and output-path checks shared by every tool and hook."""
import contextlib
import errno
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Union

from mmengine.fileio import LocalBackend, register_backend
from mmengine.logging import print_log

PathLike = Union[str, os.PathLike]

#: Less free space than this after a failed write: the disk is full.
FULL_DISK_BYTES = 1 << 20


def check_output_path(out: PathLike, inputs: Iterable[PathLike] = (),
                      force: bool = False) -> Path:
    """Validate an output path before anything is computed or written.

    Raises ``ValueError`` if ``out`` is one of ``inputs`` (never write over an
    input, even with ``force``) and ``FileExistsError`` if it exists and
    ``force`` is not set.
    """
    out = Path(out)
    for inp in map(Path, inputs):
        if same_file(out, inp):
            raise ValueError(f'output {out} is the same file as input {inp}; '
                             'choose another output path')
    if out.exists() and not force:
        raise FileExistsError(
            f'output {out} already exists; pass --force to replace it')
    if out.exists() and out.is_dir():
        raise IsADirectoryError(f'output {out} is a directory')
    return out


def same_file(a: PathLike, b: PathLike) -> bool:
    """The same path, or the same file through a symlink or hard link."""
    a, b = Path(a), Path(b)
    return a.absolute() == b.absolute() or (
        a.exists() and b.exists() and os.path.samefile(a, b))


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temp_pattern(name: str) -> 're.Pattern[str]':
    """Our temporary files for ``name``: ``.<name>.<pid>.<random>.tmp``."""
    return re.compile(rf'^\.{re.escape(name)}\.(\d+)\.[^.]+\.tmp$')


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temps(path: PathLike) -> None:
    """Delete the temporary files of ``path`` left by writers that died
    (kill -9, power loss): their process no longer exists.  A live writer's
    file is left alone."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    pattern = _temp_pattern(path.name)
    for entry in path.parent.iterdir():
        match = pattern.match(entry.name)
        if match and not _process_alive(int(match.group(1))):
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                print_log(f'removed {entry}, a partial file left by an '
                          f'interrupted write of {path}', logger='current',
                          level=logging.WARNING)


@contextlib.contextmanager
def atomic_path(path: PathLike, exclusive: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it to ``path`` on
    success, delete it on failure, so readers never see a partial file.

    With ``exclusive`` the final step fails with ``FileExistsError`` if
    ``path`` appeared meanwhile (a concurrent writer), instead of replacing
    it.  The file gets the mode ``open(path, 'w')`` would give it: that of
    the file it replaces, else the default under the user's umask
    (``mkstemp`` makes it 0600).  Temporary files of writers that were
    killed are removed first (:func:`remove_stale_temps`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.{os.getpid()}.',
                               suffix='.tmp', dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    tmp.chmod(path.stat().st_mode & 0o7777 if path.exists() else
              0o666 & ~current_umask())
    try:
        try:
            yield tmp
        except Exception as err:
            # torch.save on a full disk says "unexpected pos 576 vs 534".
            if not isinstance(err, OSError) and \
                    shutil.disk_usage(path.parent).free < FULL_DISK_BYTES:
                raise OSError(errno.ENOSPC, 'no space left on the device '
                              f'while writing {path} ({err})') from None
            raise
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise FileExistsError(
                    f'output {path} was created by another process while '
                    'this one was writing it; pass --force to replace '
                    'it') from None
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: PathLike, text: str,
                      exclusive: bool = False) -> None:
    with atomic_path(path, exclusive) as tmp:
        tmp.write_text(text)


class AtomicLocalBackend(LocalBackend):
    """MMEngine's local file backend, writing through :func:`atomic_path`.

    MMEngine saves checkpoints (``epoch_N.pth``, ``best_*.pth``) with
    ``backend.put``, which writes in place: a run killed mid-save leaves a
    truncated file that the next ``--resume`` would pick.  Registered for
    local paths when ``hetdpt_mm`` is imported."""

    def put(self, obj: bytes, filepath: PathLike) -> None:
        with atomic_path(filepath) as tmp:
            tmp.write_bytes(obj)

    def put_text(self, obj: str, filepath: PathLike,
                 encoding: str = 'utf-8') -> None:
        with atomic_path(filepath) as tmp:
            tmp.write_text(obj, encoding=encoding)


def register_atomic_local_backend() -> None:
    register_backend('local', AtomicLocalBackend, force=True, prefixes='')
