"""The library's exceptions.  Each tool reports them as one ``error:`` line
(:func:`hetdpt_mm.cli.run_reporting_errors`); Python's own (``TypeError``
for a wrong argument, ``OSError`` for files) are used where they fit."""


class CheckpointError(ValueError):
    """A file, its HetDPT record or its tensors cannot give the network
    asked for: the message names the file, the setting and the fix."""


class UsageError(ValueError):
    """A configuration, command line or run state the library cannot work
    with: the message names the setting and what to set."""


class VerificationError(Exception):
    """An exported graph that does not compute what the model computes."""
