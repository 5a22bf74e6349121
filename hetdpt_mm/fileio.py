"""Atomic outputs, the checks of input and output paths, and the one strict
reading of user-given JSON, shared by every tool and hook: only what
Python's ``json`` / ``os`` and MMEngine's ``fileio`` lack, each piece with
a line saying what."""

import contextlib
import errno
import functools
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import stat
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


# Python's open() and MMEngine's backends read a FIFO or /dev/zero forever.
#: What a path that is not a regular file is, by ``os.stat``'s file type.
_KINDS = {
    stat.S_IFDIR: 'a directory',
    stat.S_IFIFO: 'a FIFO',
    stat.S_IFCHR: 'a character device',
    stat.S_IFBLK: 'a block device',
    stat.S_IFSOCK: 'a socket',
}


def _special_kind(path: Path) -> Union[str, None]:
    """What ``path`` is (``'a FIFO'`` ...) when it exists and is not a
    regular file."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        return _KINDS.get(stat.S_IFMT(path.stat().st_mode))
    return None


def check_input_file(path: PathLike, what: str) -> Path:
    """``path`` if it is a regular file, before anything reads it."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f'{what} {path} does not exist')
    if kind := _special_kind(path):
        raise OSError(f'{what} {path} is {kind}, not a file')
    return path


# json.loads keeps the last of a key given twice, reads NaN, and names no
# input when it recurses too deep or meets an integer of 4300 digits.
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


def _unique_keys(pairs: list) -> dict:
    twice = [key for key, n in Counter(k for k, _ in pairs).items() if n > 1]
    if twice:
        raise ValueError(f'key {json.dumps(twice[0])} given more than once')
    return dict(pairs)


def _short_int(digits: str) -> int:
    if len(digits.lstrip('-')) > MAX_JSON_INT_DIGITS:
        raise ValueError(f'an integer of {len(digits)} digits')
    return int(digits)


def _no_constant(name: str) -> Any:
    raise ValueError(f'{name} is not a number')


def loads_json(
    text: str,
    source: str,
    max_depth: int = MAX_JSON_DEPTH,
    constants: bool = False,
) -> Any:
    """``json.loads`` that refuses a key given twice, nesting deeper than
    ``max_depth``, an integer of more than :data:`MAX_JSON_INT_DIGITS`
    digits and ``NaN`` / ``Infinity`` (unless ``constants``: a record's
    schema names them): a ``ValueError`` naming ``source``."""
    try:
        if nesting_depth(text) > max_depth:
            raise ValueError(f'nested deeper than {max_depth} levels')
        return json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_int=_short_int,
            parse_constant=None if constants else _no_constant,
        )
    except ValueError as err:  # json's own messages name no input
        raise ValueError(f'{source}: not valid JSON ({err})') from None


def read_json_file(path: PathLike, what: str) -> Any:
    """:func:`loads_json` of the file ``path`` (``what`` names it)."""
    path = check_input_file(path, what)
    try:
        text = path.read_text(encoding='utf-8-sig')
    except UnicodeDecodeError as err:  # Python's message names no file
        raise ValueError(f'{what} {path}: not UTF-8 ({err.reason})') from None
    return loads_json(text, f'{what} {path}')


# Neither Python nor MMEngine checks an output before the work: an input,
# a device or a link is replaced, an unwritable folder fails at the end.
def _check_replaceable(out: Path) -> None:
    """Only regular files are replaced, never through a link (renaming over
    it replaces the link; /dev/stdout is one)."""
    kind = _special_kind(out) or (
        'a symbolic link' if out.is_symlink() else None
    )
    if kind:
        raise OSError(f'output {out} is {kind}: never replaced')


def output_file(text: str) -> Path:
    """An output's path as typed (an argparse ``type``: ``Path`` drops a
    trailing ``/``), which names a file."""
    if text.endswith(('/', os.sep)):
        raise ValueError(f'output {text} names a folder; give a file')
    return Path(text)


def check_output_path(
    out: PathLike, inputs: Iterable[PathLike] = (), force: bool = False
) -> Path:
    """``out`` if it may be written, checked before anything is computed:
    never an input (even with ``force``), a special file, a link, a folder
    or in a folder it cannot go into, and an existing file only with
    ``force``."""
    out = output_file(out) if isinstance(out, str) else Path(out)
    for inp in inputs:
        if same_file(out, inp):
            raise ValueError(f'output {out} is the same file as input {inp}')
    _check_replaceable(out)
    if (out.exists() or out.is_symlink()) and not force:
        raise FileExistsError(f'output {out} already exists; pass --force')
    # The nearest existing folder: atomic_path creates the missing ones.
    folder = next(p for p in out.absolute().parents if p.exists())
    if not folder.is_dir():
        raise NotADirectoryError(f'output {out}: {folder} is not a directory')
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f'output {out}: {folder} is not writable')
    return out


def check_output_paths(
    outputs: Iterable[PathLike],
    inputs: Iterable[PathLike] = (),
    force: bool = False,
) -> None:
    """:func:`check_output_path` for every output of one run, no two of them
    the same file."""
    outputs, inputs = [Path(p) for p in outputs], list(inputs)
    for out, other in itertools.combinations(outputs, 2):
        if same_file(out, other):
            raise ValueError(f'outputs {out} and {other} are the same file')
    for out in outputs:
        check_output_path(out, inputs, force)


def same_file(a: PathLike, b: PathLike) -> bool:
    """The same path, or the same file through a symlink or hard link
    (``os.path.samefile`` needs both to exist)."""
    a, b = Path(a), Path(b)
    return a.resolve() == b.resolve() or (
        a.exists() and b.exists() and os.path.samefile(a, b)
    )


# A killed writer's temporary file stays: nothing in Python removes it.
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


@contextlib.contextmanager
def _errors_naming(path: Path, tmp: Path) -> Iterator[None]:
    """Errors writing ``tmp`` name ``path``: torch.save on a full disk says
    only "unexpected pos 576 vs 534"."""
    try:
        yield
    except Exception as err:
        if isinstance(err, OSError):
            if not err.errno or err.filename not in (None, str(tmp)):
                raise
            code, reason = err.errno, err.strerror
        elif shutil.disk_usage(path.parent).free < FULL_DISK_BYTES:
            code, reason = errno.ENOSPC, f'{os.strerror(errno.ENOSPC)} ({err})'
        else:
            raise
        raise OSError(code, f'{reason} while writing {path}') from None


def _new_temp(path: Path) -> Path:
    """An empty temporary file beside ``path`` with the mode ``open(path,
    'w')`` would give (``tempfile.mkstemp`` makes it 0600, whatever the
    umask)."""
    _check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    name = f'.{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp'
    tmp = path.with_name(name)
    with _errors_naming(path, tmp):
        os.close(
            os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        )
    if path.exists():
        shutil.copymode(path, tmp)
    return tmp


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
        for done in linked:
            done.unlink()
        raise FileExistsError(
            f'output {path} was created by another process; pass --force'
        ) from None


def _remove(tmp: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()


# Python and MMEngine write in place: a run killed mid-write leaves a
# partial file at the final path (one --resume would pick).
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
