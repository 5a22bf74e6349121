"""Safe checkpoint loading.

torch >= 2.6 loads with ``weights_only=True`` by default, and MMEngine 0.10.x
calls ``torch.load`` without the argument, so resuming from MMEngine's own
checkpoints fails on the few non-tensor objects they contain (``HistoryBuffer``
and numpy scalars in ``message_hub``).  Rather than turning the safety off,
:func:`load_checkpoint_file` allows exactly those types and keeps every other
checkpoint on ``weights_only=True``.  Full-object checkpoints load only after
an explicit opt-in (``trusted=True`` or ``HETDPT_TRUST_CHECKPOINTS=1``).

Importing :mod:`hetdpt_mm` registers this loader as MMEngine's loader for
local files, so ``--resume``, ``load_from`` and ``init_cfg`` use it too.
"""
import os
import os.path as osp
import pickle
import zipfile
from collections import OrderedDict
from typing import Any, Mapping, Optional

import numpy as np
import torch

#: Setting this environment variable to 1 trusts every checkpoint file.
TRUST_ENV = 'HETDPT_TRUST_CHECKPOINTS'


class CheckpointError(ValueError):
    """A file that cannot be used as a checkpoint, with the reason."""


def _numpy_safe_globals():
    """numpy objects MMEngine stores in ``message_hub`` and ``meta``."""
    multiarray = np._core.multiarray if hasattr(np, '_core') else \
        np.core.multiarray
    scalar_types = (np.bool_, np.int8, np.int16, np.int32, np.int64,
                    np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
                    np.float32, np.float64)
    entries = [np.ndarray, np.dtype]
    entries += [type(np.dtype(t)) for t in scalar_types]
    # Checkpoints written under numpy 1 name these `numpy.core.*`.
    for obj, name in ((multiarray.scalar, 'scalar'),
                      (multiarray._reconstruct, '_reconstruct')):
        entries += [(obj, f'numpy.core.multiarray.{name}'),
                    (obj, f'numpy._core.multiarray.{name}')]
    return entries


def _history_buffer_getattr(obj, name):
    """Stands in for ``getattr`` while unpickling: HistoryBuffer pickles its
    statistics methods as ``getattr(HistoryBuffer, 'mean')``; nothing else
    may be looked up."""
    from mmengine.logging.history_buffer import HistoryBuffer
    allowed = {'min', 'max', 'current', 'mean'} | set(
        HistoryBuffer._statistics_methods)
    if obj is HistoryBuffer and name in allowed:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'getattr({obj!r}, {name!r}) is not allowed in a checkpoint')


def mmengine_safe_globals():
    """The exact non-tensor types found in MMEngine 0.10 checkpoints."""
    from mmengine.logging.history_buffer import HistoryBuffer
    return [HistoryBuffer, OrderedDict,
            (_history_buffer_getattr, 'builtins.getattr'),
            (_history_buffer_getattr, '__builtin__.getattr')
            ] + _numpy_safe_globals()


def trust_from_env() -> bool:
    return os.environ.get(TRUST_ENV, '').lower() in ('1', 'true', 'yes')


def load_checkpoint_file(path, map_location: Any = 'cpu',
                         trusted: Optional[bool] = None,
                         mmap: bool = False) -> Mapping:
    """Load a checkpoint with ``weights_only=True`` plus MMEngine's types.

    Raises :class:`FileNotFoundError` for a missing file and
    :class:`CheckpointError` naming the problem for anything that is not a
    readable checkpoint (random bytes, truncated files, unsafe objects).
    """
    path = osp.expanduser(os.fspath(path))
    if not osp.exists(path):
        raise FileNotFoundError(f'checkpoint {path} does not exist')
    if osp.isdir(path):
        raise CheckpointError(f'checkpoint {path} is a directory, not a file')
    if trusted is None:
        trusted = trust_from_env()
    kwargs = dict(map_location=map_location, weights_only=not trusted)
    if mmap and zipfile.is_zipfile(path):
        kwargs['mmap'] = True
    try:
        with torch.serialization.safe_globals(mmengine_safe_globals()):
            checkpoint = torch.load(path, **kwargs)
    except pickle.UnpicklingError as error:
        lines = [line.strip() for line in str(error).splitlines()]
        refused = [line for line in lines if 'global' in line.lower() or
                   'not allowed' in line]
        if refused:
            detail = refused[0].split('WeightsUnpickler error:')[-1].strip()
            raise CheckpointError(
                f'checkpoint {path} contains objects that are not safe to '
                f'load with weights_only=True ({detail[:300]}). Only load it '
                f'if you trust its source: set {TRUST_ENV}=1 or pass '
                '--trust-checkpoint.') from None
        reason = next((line for line in lines[1:] if line and
                       'documentation' not in line), lines[0])
        raise CheckpointError(
            f'{path} is not a PyTorch checkpoint (unreadable pickle: '
            f'{reason[:200]})') from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError,
            ValueError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise CheckpointError(
            f'{path} is not a readable PyTorch checkpoint (truncated or '
            f'corrupt: {lines[-1][:200]})') from None
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(f'{path} holds a {type(checkpoint).__name__}, '
                              'not a checkpoint dict or state dict')
    return checkpoint


def register_mmengine_loader():
    """Route MMEngine's local-file checkpoint loading through
    :func:`load_checkpoint_file` (MMEngine's own extension point)."""
    from mmengine.runner.checkpoint import CheckpointLoader

    @CheckpointLoader.register_scheme(prefixes='', force=True)
    def load_from_local(filename, map_location):
        return load_checkpoint_file(filename, map_location)
