"""The tools' one error convention: ``error: <message>`` on stderr, exit
status 2, no traceback but for an exception raised inside an installed
library (a toolbox, MMEngine, torch)."""

import argparse
import ast
import importlib
import math
import os
import re
import signal
import sys
import threading
import traceback
from types import MappingProxyType
from typing import Any, Callable, Mapping, Type, TypeVar

from mmengine.config import DictAction

from .errors import UsageError
from .fileio import MAX_JSON_DEPTH, nesting_depth, output_file

T = TypeVar('T')

EXIT_USAGE = 2
#: Set to 1 for the traceback of a failure no check anticipated.
TRACEBACK_ENV = 'HETDPT_TRACEBACK'
#: Packages of this project, wherever installed.
OWN_PACKAGES = ('hetdpt_mm', 'hetdpt_demo', 'hetdpt_benchmark')
#: What a tool reports with its message alone; any other exception is
#: reported with its type's name too.
INPUT_ERRORS = (ValueError, TypeError, OSError, KeyError)


class ArgumentParser(argparse.ArgumentParser):
    """Reports usage errors as ``error: <message>`` with status 2."""

    def error(self, message):
        raise UsageError(message)


def argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse ``type`` whose ``ValueError`` message is the error
    (argparse's own says "invalid parse value")."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = parse.__name__
    return convert


@argument_type
def positive_float(text: str) -> float:
    """A finite number above 0 (``float`` takes ``nan`` and ``inf`` too)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f'must be a positive number, got {text!r}')
    return value


#: The ``type`` of an output file's argument (``Path`` drops a trailing
#: ``/``, which names a folder).
output_path = argument_type(output_file)


#: JSON's spellings of the constants, in a dict typed on the command line.
_JSON_NAMES = {'true': True, 'false': False, 'null': None}


def _literal(node: ast.AST, text: str) -> Any:
    """A literal of Python or JSON, ``dict(key=...)`` calls included."""
    if isinstance(node, ast.Dict) and None not in node.keys:
        keys = [_literal(k, text) for k in node.keys]
        if len(set(keys)) < len(keys):
            raise ValueError('a key is given twice')
        return dict(zip(keys, (_literal(v, text) for v in node.values)))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == 'dict'
        and not node.args
        and all(kw.arg is not None for kw in node.keywords)
    ):
        return {kw.arg: _literal(kw.value, text) for kw in node.keywords}
    if isinstance(node, (ast.List, ast.Tuple)):
        values = [_literal(e, text) for e in node.elts]
        return values if isinstance(node, ast.List) else tuple(values)
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(
            f'{ast.get_source_segment(text, node)} is not a '
            'literal (quote strings)'
        ) from None


#: Whitespace between two characters of a list that are not separators is
#: part of an item, which MMEngine's ``DictAction`` would drop.
_INNER_SPACE = re.compile(r'[^\s,\[\]()]\s+[^\s,\[\]()]')


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        value = list(value.values())
    return not isinstance(value, (list, tuple)) or all(map(_finite, value))


def config_option_value(key: str, value: str, option: str) -> Any:
    """One ``--cfg-options KEY=VALUE`` value, read alike by every tool: a
    dict (``{"a": [1]}``, ``dict(a=[1])``), a quoted string or a value
    holding one as a Python / JSON literal; a value with spaces that is no
    list (a path) as it is; anything else as MMEngine's ``DictAction``."""
    text = value.strip()
    if nesting_depth(text) > MAX_JSON_DEPTH:
        raise UsageError(
            f'{option} {key}: the value nests deeper than '
            f'{MAX_JSON_DEPTH} levels'
        )
    is_list = text.startswith(('[', '(')) or ',' in text
    if text.startswith(('{', '[', '(', 'dict(', "'", '"')) and any(
        mark in text for mark in ('{', 'dict(', "'", '"')
    ):
        try:
            parsed = _literal(ast.parse(text, mode='eval').body, text)
        except (SyntaxError, ValueError, TypeError) as err:
            reason = (
                f'{err.msg} at column {err.offset}'
                if isinstance(err, SyntaxError)
                else err
            )
            raise UsageError(
                f'{option} {key}={value}: the value is not a literal '
                f'({reason}); quote strings, and write a dict as JSON, '
                f"""'{key}={{"name": [1, 2]}}', as dict(name=[1, 2]), """
                f'or one entry: {key}.name=[1,2]'
            ) from None
    elif not is_list and re.search(r'\s', text):
        parsed = text  # a path with spaces: DictAction drops them
    elif is_list and _INNER_SPACE.search(text):
        raise UsageError(
            f'{option} {key}={value}: the spaces inside its items would be '
            f"dropped; quote them: {key}=['a b', 'c']"
        )
    else:
        parsed = DictAction._parse_iterable(value)
    if not _finite(parsed):
        raise UsageError(f'{option} {key}={value}: not a finite number')
    return parsed


class ConfigOptionsAction(DictAction):
    """MMEngine's ``DictAction`` with every value read by
    :func:`config_option_value`: dicts, which it cannot split, and spaces,
    which it drops."""

    def __call__(self, parser, namespace, values, option_string=None):
        options = dict(getattr(namespace, self.dest, None) or {})
        for item in values:
            key, sep, value = item.partition('=')
            if not sep or not key:
                raise UsageError(
                    f'{option_string} takes KEY=VALUE, got {item!r}'
                )
            options[key] = config_option_value(key, value, option_string)
        setattr(namespace, self.dest, options)


def require_extra(module: str, extra: str):
    """Import a package of an optional extra, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f'{module} is not installed: pip install -r '
            f'requirements/{extra}.txt (or hetdpt_mm[{extra}])'
        ) from None


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def raised_in_a_library(err: BaseException) -> bool:
    """Whether ``err`` was raised inside an installed library (mmengine, a
    toolbox, torch), whose traceback is the user's lead, not in this
    project's code or the tools; an exception a registry re-raised with
    its class name is judged by the one it was handling."""
    while (
        inner := err.__cause__
        or (None if err.__suppress_context__ else err.__context__)
    ) is not None:
        err = inner
    tb = err.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame = tb.tb_frame
    package = frame.f_globals.get('__name__', '').partition('.')[0]
    installed = re.search(
        r'[/\\](site|dist)-packages[/\\]', frame.f_code.co_filename
    )
    return package not in OWN_PACKAGES and installed is not None


def run_reporting_errors(
    action: Callable[[], None],
    statuses: Mapping[Type[Exception], int] = MappingProxyType({}),
) -> int:
    """Run a tool's work and return its exit status: any exception ends it
    with ``error: <message>`` and status 2 (or ``statuses``'s), after its
    traceback if a library raised it.  SIGTERM runs the ``finally`` blocks
    that remove partial outputs."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        action()
    except Exception as err:
        shown = os.environ.get(TRACEBACK_ENV) == '1' or raised_in_a_library(
            err
        )
        if shown:
            traceback.print_exc()
        # A KeyError's str() is its repr; the message is its argument.
        message = (
            err.args[0] if isinstance(err, KeyError) and err.args else err
        )
        if not isinstance(err, (UsageError, *INPUT_ERRORS, *statuses)):
            message = f'{type(err).__name__}: {message}' + (
                '' if shown else f' ({TRACEBACK_ENV}=1 shows where)'
            )
        print(f'error: {message}', file=sys.stderr)
        return next(
            (code for kind, code in statuses.items() if isinstance(err, kind)),
            EXIT_USAGE,
        )
    return 0
