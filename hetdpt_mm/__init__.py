"""hetdpt_mm: heterogeneity-aware depth pruning of ViTs for OpenMMLab."""
from .version import __version__

__all__ = ['__version__']
