"""Safe checkpoint loading: ``weights_only=True`` plus exactly the non-tensor
types MMEngine 0.10 stores (``HistoryBuffer``, numpy scalars), which torch
>= 2.6 refuses by default; full-object files load only with
``trusted=True`` or ``HETDPT_TRUST_CHECKPOINTS=1``.  Importing
:mod:`hetdpt_mm` routes every scheme of MMEngine's ``CheckpointLoader``
(local, ``http(s)://``, ``torchvision://``, ``open-mmlab://``, ``mmcls://``,
``pavi://``, ``s3://`` ...) here: fetched as MMEngine fetches it, loaded by
:func:`load_checkpoint_file`.
"""

import io
import logging
import os
import os.path as osp
import pickle
import zipfile
from collections import OrderedDict
from tempfile import TemporaryDirectory
from typing import Any, Mapping, Optional
from urllib.parse import urlparse

import numpy as np
import torch
from mmengine import fileio
from mmengine.dist import get_dist_info
from mmengine.logging import print_log
from mmengine.runner import checkpoint as mmengine_checkpoint
from safetensors import SafetensorError
from torch.utils._python_dispatch import _disable_current_modes

from ..errors import CheckpointError
from ..fileio import check_input_file

#: Setting this environment variable to 1 trusts every checkpoint file.
TRUST_ENV = 'HETDPT_TRUST_CHECKPOINTS'
#: Name torch gives a module's extra state in its state dict.
EXTRA_STATE_KEY = '_extra_state'
#: Attribute naming the file an extra-state tensor was read from: a record
#: is checked deep inside torch's ``load_state_dict`` (mmdet's
#: ``init_detector``, ``load_from``), where nothing else knows the file.
_SOURCE_ATTR = '_hetdpt_source'


def _numpy_safe_globals():
    """numpy objects MMEngine stores in ``message_hub`` and ``meta``."""
    multiarray = (
        np._core.multiarray if hasattr(np, '_core') else np.core.multiarray
    )
    names = ['bool', 'float16', 'float32', 'float64'] + [
        f'{sign}int{bits}' for sign in ('', 'u') for bits in (8, 16, 32, 64)
    ]
    entries = [np.ndarray, np.dtype] + [type(np.dtype(n)) for n in names]
    # Checkpoints written under numpy 1 name these `numpy.core.*`.
    for obj, name in (
        (multiarray.scalar, 'scalar'),
        (multiarray._reconstruct, '_reconstruct'),
    ):
        entries += [
            (obj, f'numpy.core.multiarray.{name}'),
            (obj, f'numpy._core.multiarray.{name}'),
        ]
    return entries


def _history_buffer_getattr(obj, name):
    """``getattr`` while unpickling, for HistoryBuffer's statistics methods
    only (pickled as ``getattr(HistoryBuffer, 'mean')``)."""
    from mmengine.logging.history_buffer import HistoryBuffer

    allowed = {'min', 'max', 'current', 'mean'} | set(
        HistoryBuffer._statistics_methods
    )
    if obj is HistoryBuffer and name in allowed:
        return getattr(obj, name)
    raise pickle.UnpicklingError(f'getattr({obj!r}, {name!r}) not allowed')


def mmengine_safe_globals():
    """The exact non-tensor types found in MMEngine 0.10 checkpoints."""
    from mmengine.logging.history_buffer import HistoryBuffer

    return [
        HistoryBuffer,
        OrderedDict,
        (_history_buffer_getattr, 'builtins.getattr'),
        (_history_buffer_getattr, '__builtin__.getattr'),
    ] + _numpy_safe_globals()


def trust_from_env() -> bool:
    return os.environ.get(TRUST_ENV, '').lower() in ('1', 'true', 'yes')


def load_checkpoint_file(
    path,
    map_location: Any = 'cpu',
    trusted: Optional[bool] = None,
    mmap: bool = False,
    source: Optional[str] = None,
) -> Mapping:
    """Load a local file or binary file object with ``weights_only=True``
    plus MMEngine's types; anything else is a :class:`CheckpointError`.
    ``source`` names it in messages (the URL it came from)."""
    is_file_object = hasattr(path, 'read')
    if not is_file_object:
        path = os.fspath(check_input_file(path, 'checkpoint'))
    name = path if source is None else source
    if trusted is None:
        trusted = trust_from_env()
    kwargs = dict(map_location=map_location, weights_only=not trusted)
    is_zip = zipfile.is_zipfile(path)
    if is_zip:
        _check_zip_claims(path, name)
    if mmap and not is_file_object and is_zip:
        kwargs['mmap'] = True
    try:
        # Real tensors even while a model is built on the meta device by a
        # dispatch mode (mmengine's MetaTensorContext, FSDP's
        # skip_init_weights), which would make them meta tensors.
        with (
            _disable_current_modes(),
            torch.serialization.safe_globals(mmengine_safe_globals()),
        ):
            checkpoint = torch.load(path, **kwargs)
    except pickle.UnpicklingError as error:
        lines = [line.strip() for line in str(error).splitlines()]
        refused = [
            line
            for line in lines
            if 'global' in line.lower() or 'not allowed' in line
        ]
        if refused:
            detail = refused[0].split('WeightsUnpickler error:')[-1].strip()
            # Not every tool has --trust-checkpoint (tools/merge_ckpt.py
            # does not); the variable works everywhere.
            raise CheckpointError(
                f'{name}: objects not safe to load ({detail[:200]}); if '
                f'you trust it, set {TRUST_ENV}=1'
            ) from None
        noise = ('documentation', 'file an issue', 'WeightsUnpickler error:')
        reason = next(
            (x for x in lines[1:] if x and not any(n in x for n in noise)),
            lines[0],
        )
        raise CheckpointError(
            f'{name} is not a PyTorch checkpoint ({reason[:200]})'
        ) from None
    # Random bytes also reach the weights-only unpickler's stack and memo
    # lookups (IndexError, KeyError in about 6% of 4 KiB noise files).
    except (
        RuntimeError,
        EOFError,
        zipfile.BadZipFile,
        OSError,
        ValueError,
        LookupError,
        SafetensorError,  # torch.load reads *.safetensors with it
    ) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise CheckpointError(
            f'{name}: truncated or corrupt ({lines[-1]})'
        ) from None
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(f'{name} is not a checkpoint dict')
    _check_tensor_claims(checkpoint, name)
    _tag_extra_states(checkpoint, name)
    return checkpoint


#: How much more a zip's entries may unpack to than the file's size:
#: torch.save stores them uncompressed (about 1x), a zip bomb is 1000x.
ZIP_EXPANSION = 4


def _check_zip_claims(path, name: str) -> None:
    """Refuse a zip whose entries would unpack far beyond its size before
    torch reads (and inflates) them."""
    with zipfile.ZipFile(path) as archive:
        claimed = sum(entry.file_size for entry in archive.infolist())
    if hasattr(path, 'seek'):
        size = path.seek(0, os.SEEK_END)
        path.seek(0)
    else:
        size = os.path.getsize(path)
    if claimed > ZIP_EXPANSION * size + (1 << 20):
        raise CheckpointError(f'{name}: zip entries unpack to {claimed} B')


def _check_tensor_claims(checkpoint: Mapping, name: str) -> None:
    """Refuse tensors with more elements than their storage holds (stride 0,
    overlapping views): a few bytes that any copy would blow up."""
    stack = [('', checkpoint)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend(
                (f'{where}.{k}'.lstrip('.'), v) for k, v in value.items()
            )
        elif isinstance(value, (list, tuple)):
            stack.extend((f'{where}[{i}]', v) for i, v in enumerate(value))
        elif (
            isinstance(value, torch.Tensor)
            and value.layout == torch.strided
            and value.numel() * value.element_size()
            > value.untyped_storage().nbytes()
        ):
            raise CheckpointError(f'{name}: {where} overlaps its storage')


def _tag_extra_states(checkpoint: Mapping, name: str) -> None:
    """Name the file on the extra-state tensors of the checkpoint's state
    dicts."""
    dicts = [checkpoint] + [
        v for v in checkpoint.values() if isinstance(v, Mapping)
    ]
    for state_dict in dicts:
        for key, value in state_dict.items():
            if (
                isinstance(key, str)
                and key.endswith(EXTRA_STATE_KEY)
                and isinstance(value, torch.Tensor)
            ):
                setattr(value, _SOURCE_ATTR, str(name))


def source_of(tensor: Any) -> Optional[str]:
    """The file an extra-state tensor was loaded from (or ``None``)."""
    return getattr(tensor, _SOURCE_ATTR, None)


# MMEngine's loaders for every scheme below call torch.load with
# weights_only=False (for URLs through torch.hub.load_state_dict_from_url,
# also on a file already in the hub cache).  Each replacement only fetches
# the bytes the way MMEngine does and leaves the loading to
# load_checkpoint_file.


def _fetch_into_hub_cache(url: str) -> str:
    """The file torch.hub caches for ``url``, downloaded unless it is there;
    rank 0 first, as in MMEngine's ``load_from_http``."""
    cached = osp.join(
        torch.hub.get_dir(), 'checkpoints', osp.basename(urlparse(url).path)
    )

    def download_if_absent():
        if not osp.exists(cached):
            os.makedirs(osp.dirname(cached), exist_ok=True)
            print_log(f'Downloading: "{url}" to {cached}', logger='current')
            torch.hub.download_url_to_file(url, cached, progress=os.isatty(0))

    rank, world_size = get_dist_info()
    if rank == 0:
        download_if_absent()
    if world_size > 1:
        torch.distributed.barrier()
        # Other nodes may not share rank 0's file system.
        download_if_absent()
    return cached


def load_from_http(url, map_location=None):
    cached = _fetch_into_hub_cache(url)
    return load_checkpoint_file(
        cached, map_location, source=f'{url} (cached as {cached})'
    )


def load_from_torchvision(filename, map_location=None):
    if filename.startswith('modelzoo://'):
        print_log(
            'The URL scheme of "modelzoo://" is deprecated, please '
            'use "torchvision://" instead',
            logger='current',
            level=logging.WARNING,
        )
    model_name = filename.split('://', 1)[1]
    model_urls = mmengine_checkpoint.get_torchvision_models()
    return load_from_http(model_urls[model_name], map_location)


def load_from_openmmlab(filename, map_location=None):
    prefix, model_name = filename.split('://', 1)
    deprecated = mmengine_checkpoint.get_deprecated_model_names()
    if model_name in deprecated:
        print_log(
            f'{prefix}://{model_name} is deprecated in favor of '
            f'{prefix}://{deprecated[model_name]}',
            logger='current',
            level=logging.WARNING,
        )
        model_name = deprecated[model_name]
    model_url = mmengine_checkpoint.get_external_models()[model_name]
    if model_url.startswith(('http://', 'https://')):
        return load_from_http(model_url, map_location)
    # Not a URL: a file under MMEngine's home directory.
    local = osp.join(mmengine_checkpoint._get_mmengine_home(), model_url)
    return load_checkpoint_file(
        local, map_location, source=f'{filename} ({local})'
    )


def load_from_mmcls(filename, map_location=None):
    model_url = mmengine_checkpoint.get_mmcls_models()[
        filename.split('://', 1)[1]
    ]
    return mmengine_checkpoint._process_mmcls_checkpoint(
        load_from_http(model_url, map_location)
    )


def load_from_pavi(filename, map_location=None):
    try:
        from pavi import modelcloud
    except ImportError:  # MMEngine's own message
        raise ImportError(
            'Please install pavi to load checkpoint from modelcloud.'
        ) from None
    model = modelcloud.get(filename.split('://', 1)[1])
    with TemporaryDirectory() as tmp_dir:
        downloaded = osp.join(tmp_dir, model.name)
        model.download(downloaded)
        return load_checkpoint_file(downloaded, map_location, source=filename)


def load_from_ceph(filename, map_location=None):
    backend = fileio.get_file_backend(
        filename, backend_args={'backend': 'petrel'}
    )
    with io.BytesIO(backend.get(filename)) as buffer:
        return load_checkpoint_file(buffer, map_location, source=filename)


#: MMEngine's prefixes and their safe loaders.
SAFE_LOADERS = {
    '': load_checkpoint_file,
    ('http://', 'https://'): load_from_http,
    ('modelzoo://', 'torchvision://'): load_from_torchvision,
    ('open-mmlab://', 'openmmlab://'): load_from_openmmlab,
    'mmcls://': load_from_mmcls,
    'pavi://': load_from_pavi,
    (r'(\S+\:)?s3://', r'(\S+\:)?petrel://'): load_from_ceph,
}


def register_mmengine_loader():
    """Route all of MMEngine's checkpoint loading through
    :func:`load_checkpoint_file`."""
    for prefixes, loader in SAFE_LOADERS.items():
        mmengine_checkpoint.CheckpointLoader.register_scheme(
            prefixes, loader, force=True
        )
