"""hetdpt_mm: heterogeneity-aware depth pruning of ViTs for OpenMMLab."""

from . import (
    hooks,  # noqa: F401  registers the hooks in MMEngine
    models,  # noqa: F401  fills the family table
    optim,  # noqa: F401  registers the optimizer constructor
    sharding,  # noqa: F401  registers the FSDP wrapper
)
from .checkpoint.safe_load import register_mmengine_loader
from .fileio import register_atomic_local_backend
from .registry import register_all_modules
from .spec import META_KEY, PruneSpec
from .version import __version__

register_mmengine_loader()
register_atomic_local_backend()
register_all_modules()

__all__ = ['__version__', 'PruneSpec', 'META_KEY']
