"""Conventions shared by the command-line tools: bad usage and bad input are
reported as ``error: <message>`` on stderr with exit status 2, no
traceback."""
import argparse
import importlib
import math
import signal
import sys
import threading
from typing import Callable, Tuple, Type, TypeVar

T = TypeVar('T')

EXIT_USAGE = 2
#: What a tool reports as bad input rather than as a crash.
INPUT_ERRORS = (ValueError, TypeError, OSError)


class UsageError(Exception):
    """Invalid command-line usage, reported like any other error."""


class RunError(ValueError):
    """A run that cannot start or continue; the tools print it as
    ``error: ...``."""


class ArgumentParser(argparse.ArgumentParser):
    """Reports usage errors as ``error: <message>`` with status 2."""

    def error(self, message):
        raise UsageError(message)


def argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse ``type`` from a parser that raises ``ValueError``: its
    message is the error (argparse's own says "invalid parse value")."""

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


def require_extra(module: str, extra: str):
    """Import a package of an optional extra (``requirements/<extra>.txt``),
    or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f'{module} is not installed: pip install -r '
            f'requirements/{extra}.txt (or hetdpt_mm[{extra}])') from None


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def run_reporting_errors(action: Callable[[], None],
                         errors: Tuple[Type[BaseException], ...] = INPUT_ERRORS
                         ) -> int:
    """Run a tool's work; return its exit status.

    SIGTERM ends the tool like an error would, through the ``finally``
    blocks that remove partial outputs (Python's default is to die on the
    spot, leaving them)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        action()
    except (UsageError, ) + errors as err:
        # A KeyError's str() is its repr; the message is its argument.
        message = err.args[0] if isinstance(err, KeyError) and err.args \
            else err
        print(f'error: {message}', file=sys.stderr)
        return EXIT_USAGE
    return 0
