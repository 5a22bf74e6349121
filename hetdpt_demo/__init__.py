"""HetDPT end to end on the embedded CPU demo (``tools/demo.py``): the
project's own tools run stage by stage (:class:`Demo`, its ``STAGES``) on a
shape-matching task, from the dense classifier through MAP, pruning,
merging, DETR/UperNet, HetDPT+, benchmarks and token merging to
``report.md`` and ``summary.json``.  Each stage writes a typed record into
:class:`~hetdpt_demo.results.DemoResults` (kept in the state file, so
``--resume`` skips finished stages); the report computes its claims from
them (:mod:`hetdpt_demo.claims`) and words them (:mod:`hetdpt_demo.report`).
The stages, their commands and outputs, threads and jobs:
docs/user_guides/demo.md.
"""

from .pipeline import Demo
from .settings import (
    DEFAULT_DATA_ROOT,
    FULL,
    QUICK,
    DemoError,
    DemoInputError,
    DemoOptions,
    Settings,
)

__all__ = [
    'DEFAULT_DATA_ROOT',
    'FULL',
    'QUICK',
    'Demo',
    'DemoError',
    'DemoInputError',
    'DemoOptions',
    'Settings',
]
