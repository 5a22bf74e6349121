"""Conventions shared by the command-line tools: bad usage and bad input are
reported as ``error: <message>`` on stderr with exit status 2, no
traceback."""
import argparse
import sys
from typing import Callable

EXIT_USAGE = 2
#: What a tool reports as bad input rather than as a crash.
INPUT_ERRORS = (ValueError, TypeError, OSError)


class UsageError(Exception):
    """Invalid command-line usage, reported like any other error."""


class ArgumentParser(argparse.ArgumentParser):
    """Reports usage errors as ``error: <message>`` with status 2."""

    def error(self, message):
        raise UsageError(message)


def run_reporting_errors(action: Callable[[], None]) -> int:
    """Run a tool's work; return its exit status."""
    try:
        action()
    except (UsageError, ) + INPUT_ERRORS as err:
        print(f'error: {err}', file=sys.stderr)
        return EXIT_USAGE
    return 0
