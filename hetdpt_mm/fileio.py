"""Atomic outputs and output-path checks shared by every tool and hook."""
import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Union

PathLike = Union[str, os.PathLike]


def check_output_path(out: PathLike, inputs: Iterable[PathLike] = (),
                      force: bool = False) -> Path:
    """Validate an output path before anything is computed or written.

    Raises ``ValueError`` if ``out`` is one of ``inputs`` (never write over an
    input, even with ``force``) and ``FileExistsError`` if it exists and
    ``force`` is not set.
    """
    out = Path(out)
    for inp in map(Path, inputs):
        if out.absolute() == inp.absolute() or (
                out.exists() and inp.exists() and os.path.samefile(out, inp)):
            raise ValueError(f'output {out} is the same file as input {inp}; '
                             'choose another output path')
    if out.exists() and not force:
        raise FileExistsError(
            f'output {out} already exists; pass --force to replace it')
    if out.exists() and out.is_dir():
        raise IsADirectoryError(f'output {out} is a directory')
    return out


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on
    success, delete it on failure, so readers never see a partial file.

    The file gets the mode ``open(path, 'w')`` would give it: that of the
    file it replaces, else the default under the user's umask (``mkstemp``
    makes it 0600).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.tmp',
                               dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    tmp.chmod(path.stat().st_mode & 0o7777 if path.exists() else
              0o666 & ~current_umask())
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
