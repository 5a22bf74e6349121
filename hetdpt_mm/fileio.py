"""Atomic outputs, the checks of input and output paths, and the one strict
reading of user-given JSON, shared by every tool and hook."""

import contextlib
import errno
import functools
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Union

import torch
from mmengine.fileio import LocalBackend, register_backend
from mmengine.logging import print_log

PathLike = Union[str, os.PathLike]

#: An output's content: text, bytes, or a function writing a given path.
Content = Union[str, bytes, Callable[[Path], None]]

#: Less free space than this after a failed write: the disk is full.
FULL_DISK_BYTES = 1 << 20


class NotARegularFileError(OSError):
    """A directory, FIFO, device or socket where a file is needed."""


_KINDS = (
    (stat.S_ISDIR, 'a directory'),
    (stat.S_ISFIFO, 'a FIFO'),
    (stat.S_ISCHR, 'a character device'),
    (stat.S_ISBLK, 'a block device'),
    (stat.S_ISSOCK, 'a socket'),
)


def _special_kind(path: Path) -> Union[str, None]:
    """What ``path`` is (``'a FIFO'`` ...) when it exists and is not a
    regular file."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return None
    return next(
        (kind for is_kind, kind in _KINDS if is_kind(mode)), 'a special file'
    )


def check_input_file(path: PathLike, what: str) -> Path:
    """``path`` if it is a regular file, before anything reads it: a FIFO
    blocks its reader forever, /dev/zero never ends."""
    path = Path(os.path.expanduser(os.fspath(path)))
    if not path.exists():
        raise FileNotFoundError(f'{what} {path} does not exist')
    kind = _special_kind(path)
    if kind is not None:
        raise NotARegularFileError(
            f'{what} {path} is not a regular file ({kind})'
        )
    return path


#: Deepest nesting of user-given JSON: ours nests a few levels, and Python's
#: parser recurses once per level (a ``RecursionError`` names no input).
MAX_JSON_DEPTH = 32
#: Digits of the longest JSON integer: no index, depth or width comes near,
#: and Python refuses more than 4300 with a message naming no input.
MAX_JSON_INT_DIGITS = 100
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r'[\[\](){}]')


def nesting_depth(text: str) -> int:
    """How deep the brackets of ``text`` nest (double-quoted strings left
    out): parsers recurse once per level."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub('', text)):
        depth += 1 if match.group() in '[({' else -1
        deepest = max(deepest, depth)
    return deepest


def loads_json(
    text: str,
    source: str,
    max_depth: int = MAX_JSON_DEPTH,
    constants: bool = False,
) -> Any:
    """The one reading of JSON from outside: a key given twice, nesting
    deeper than ``max_depth``, an integer of more than
    :data:`MAX_JSON_INT_DIGITS` digits, ``NaN`` / ``Infinity`` (unless
    ``constants``: a record's schema names them) and invalid JSON raise
    ``ValueError`` naming ``source``."""
    if nesting_depth(text) > max_depth:
        raise ValueError(
            f'{source}: JSON nested deeper than {max_depth} levels; '
            'no input here nests more than a few'
        )

    def unique_keys(pairs: list) -> dict:
        value = dict(pairs)
        if len(value) < len(pairs):
            counts = Counter(key for key, _ in pairs)
            twice = [json.dumps(key) for key, n in counts.items() if n > 1]
            raise ValueError(
                f'{source}: key {", ".join(twice)} given more than once in '
                'one object; give each key once'
            )
        return value

    def bounded_int(digits: str) -> int:
        if len(digits.lstrip('-')) > MAX_JSON_INT_DIGITS:
            raise ValueError(
                f'{source}: the integer {digits[:12]}... has {len(digits)} '
                f'digits; no value here has more than {MAX_JSON_INT_DIGITS}'
            )
        return int(digits)

    def no_constant(name: str) -> Any:
        raise ValueError(f'{source}: {name} is not a JSON number')

    try:
        return json.loads(
            text,
            object_pairs_hook=unique_keys,
            parse_int=bounded_int,
            parse_constant=None if constants else no_constant,
        )
    except json.JSONDecodeError as err:
        raise ValueError(f'{source}: not valid JSON ({err})') from None


def read_json_file(path: PathLike, what: str) -> Any:
    """:func:`loads_json` of the file ``path`` (``what`` names it)."""
    path = check_input_file(path, what)
    try:
        text = path.read_text(encoding='utf-8-sig')
    except UnicodeDecodeError as err:
        raise ValueError(
            f'{what} {path}: not UTF-8 text ({err.reason})'
        ) from None
    return loads_json(text, f'{what} {path}')


def _check_replaceable(out: Path) -> None:
    """Only regular files are replaced (as root, replacing /dev/null would
    break the system), and never through a link (renaming over it replaces
    the link, not the file it names; /dev/stdout is one)."""
    kind = _special_kind(out) or (
        'a symbolic link' if out.is_symlink() else None
    )
    if kind is not None:
        raise NotARegularFileError(
            f'output {out} is not a regular file ({kind}); it is never '
            'replaced, even with --force: choose a file path'
        )


def output_file(text: str) -> Path:
    """An output's path as typed (an argparse ``type``: ``Path`` drops a
    trailing ``/``), which names a file."""
    if text.endswith(('/', os.sep)):
        raise ValueError(
            f'output {text} ends with "/", so it names a folder; give a file'
        )
    return Path(text)


def check_output_path(
    out: PathLike, inputs: Iterable[PathLike] = (), force: bool = False
) -> Path:
    """``out`` if it may be written, checked before anything is computed:
    never an input (even with ``force``), a special file, a link, a folder
    or in a folder it cannot go into, and an existing file only with
    ``force``."""
    out = output_file(out) if isinstance(out, str) else Path(out)
    for inp in map(Path, inputs):
        if same_file(out, inp):
            raise ValueError(
                f'output {out} is the same file as input {inp}; '
                'choose another output path'
            )
    _check_replaceable(out)
    if (out.exists() or out.is_symlink()) and not force:
        raise FileExistsError(
            f'output {out} already exists; pass --force to replace it'
        )
    # The nearest existing folder: atomic_path creates the missing ones.
    folder = next(p for p in out.absolute().parents if p.exists())
    if not folder.is_dir():
        raise NotADirectoryError(f'output {out}: {folder} is not a directory')
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(
            f'output {out}: directory {folder} is not writable'
        )
    return out


def check_output_paths(
    outputs: Iterable[PathLike],
    inputs: Iterable[PathLike] = (),
    force: bool = False,
) -> None:
    """:func:`check_output_path` for every output of one run, no two of them
    the same file."""
    outputs, inputs = [Path(p) for p in outputs], list(inputs)
    for index, out in enumerate(outputs):
        for other in outputs[index + 1 :]:
            if same_file(out, other):
                raise ValueError(
                    f'outputs {out} and {other} are the same '
                    'file; give each output its own path'
                )
        check_output_path(out, inputs, force)


def same_file(a: PathLike, b: PathLike) -> bool:
    """The same path, or the same file through a symlink or hard link."""
    a, b = Path(a), Path(b)
    return a.resolve() == b.resolve() or (
        a.exists() and b.exists() and os.path.samefile(a, b)
    )


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
        pass
    return True


def remove_stale_temps(path: PathLike) -> None:
    """Delete the temporary files of ``path`` whose writers died (kill -9,
    power loss); a live writer's file is left alone."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    pattern = _temp_pattern(path.name)
    for entry in path.parent.iterdir():
        match = pattern.match(entry.name)
        if match and not _process_alive(int(match.group(1))):
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                print_log(
                    f'removed {entry}, a partial file left by an '
                    f'interrupted write of {path}',
                    logger='current',
                    level=logging.WARNING,
                )


def _new_temp(path: Path) -> Path:
    """An empty temporary file beside ``path`` with the mode ``open(path,
    'w')`` would give (``mkstemp`` makes it 0600)."""
    _check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f'.{path.name}.{os.getpid()}.',
            suffix='.tmp',
            dir=path.parent,
        )
    except OSError as err:  # it names the temporary file
        raise OSError(
            err.errno, f'{err.strerror} while writing {path}'
        ) from None
    os.close(fd)
    tmp = Path(tmp)
    tmp.chmod(
        path.stat().st_mode & 0o7777
        if path.exists()
        else 0o666 & ~current_umask()
    )
    return tmp


@contextlib.contextmanager
def _errors_naming(path: Path, tmp: Path) -> Iterator[None]:
    """Errors writing ``tmp`` name ``path``: torch.save on a full disk says
    only "unexpected pos 576 vs 534"."""
    try:
        yield
    except OSError as err:
        if err.errno is None or err.filename not in (None, str(tmp)):
            raise
        raise OSError(
            err.errno, f'{err.strerror} while writing {path}'
        ) from None
    except Exception as err:
        if shutil.disk_usage(path.parent).free >= FULL_DISK_BYTES:
            raise
        raise OSError(
            errno.ENOSPC,
            f'no space left on the device while writing {path} ({err})',
        ) from None


def _move_in_place(temps: Mapping[Path, Path], exclusive: bool) -> None:
    """Rename every temporary file to its output; ``exclusive``: undo and
    fail if an output appeared meanwhile (a concurrent writer)."""
    if not exclusive:
        for path, tmp in temps.items():
            os.replace(tmp, path)
        return
    linked = []
    try:
        for path, tmp in temps.items():
            os.link(tmp, path)
            linked.append(path)
    except FileExistsError:
        for path in linked:
            path.unlink()
        raise FileExistsError(
            f'output {path} was created by another process while this one '
            'was writing it; pass --force to replace it'
        ) from None


def _remove(tmp: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()


@contextlib.contextmanager
def atomic_path(path: PathLike, exclusive: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path``, moved there on success and deleted
    on failure: readers never see a partial file."""
    path = Path(path)
    tmp = _new_temp(path)
    try:
        with _errors_naming(path, tmp):
            yield tmp
        _move_in_place({path: tmp}, exclusive)
    finally:
        _remove(tmp)


def write_outputs(
    outputs: Mapping[PathLike, Content], exclusive: bool = False
) -> None:
    """Write the outputs of one run (text, bytes, or a function writing the
    path it is given) all or nothing."""
    temps: Dict[Path, Path] = {}
    try:
        for path, content in outputs.items():
            path = Path(path)
            tmp = temps[path] = _new_temp(path)
            with _errors_naming(path, tmp):
                if isinstance(content, str):
                    tmp.write_text(content)
                elif isinstance(content, bytes):
                    tmp.write_bytes(content)
                else:
                    content(tmp)
        _move_in_place(temps, exclusive)
    finally:
        for tmp in temps.values():
            _remove(tmp)


def checkpoint_writer(
    checkpoint: Mapping, out: PathLike
) -> Callable[[Path], None]:
    """What writes ``checkpoint`` for ``out`` (a :data:`Content`): under a
    ``.safetensors`` name its state dict in that format (its record in the
    extra state; ``torch.load`` reads it back by that name; meta and an
    EMA's copy are left out), else ``torch.save``."""
    if Path(out).suffix != '.safetensors':
        return functools.partial(torch.save, checkpoint)
    from safetensors.torch import save_file

    tensors = {
        key: value.contiguous().clone()  # safetensors refuses shared memory
        for key, value in checkpoint.get('state_dict', checkpoint).items()
    }
    return functools.partial(save_file, tensors)


def atomic_write_text(
    path: PathLike, text: str, exclusive: bool = False
) -> None:
    write_outputs({path: text}, exclusive)


class AtomicLocalBackend(LocalBackend):
    """MMEngine's local backend writing atomically: its ``put`` writes in
    place, and a run killed mid-save left a file ``--resume`` would pick."""

    def put(self, obj: bytes, filepath: PathLike) -> None:
        write_outputs({filepath: obj})

    def put_text(
        self, obj: str, filepath: PathLike, encoding: str = 'utf-8'
    ) -> None:
        write_outputs({filepath: obj.encode(encoding)})


def register_atomic_local_backend() -> None:
    register_backend('local', AtomicLocalBackend, force=True, prefixes='')
