"""What speed measurements are made of: a fair timing loop, the models the
benchmark compares, and the machine they run on (the program:
``hetdpt_benchmark/`` beside ``tools/``; MACs and parameters:
:mod:`hetdpt_mm.analysis`)."""

from .builders import (
    AUTHORS_SPEC,
    BACKBONE_VARIANTS,
    STOCK_CONFIGS,
    TensorForward,
    build_backbone_variants,
    build_from_config,
    gate_modules,
    hetdpt_config,
    make_test_batch,
    spec_text,
    stock_config,
)
from .machine import glibc_malloc, keep_freed_memory, machine_info
from .timing import (
    CLOCKS,
    TimingStats,
    amdahl_bound,
    autocast,
    paired_speedups,
    rotations,
    synchronize,
    time_runs,
)

__all__ = [
    'AUTHORS_SPEC',
    'BACKBONE_VARIANTS',
    'CLOCKS',
    'STOCK_CONFIGS',
    'TensorForward',
    'TimingStats',
    'amdahl_bound',
    'autocast',
    'build_backbone_variants',
    'build_from_config',
    'gate_modules',
    'glibc_malloc',
    'hetdpt_config',
    'keep_freed_memory',
    'machine_info',
    'make_test_batch',
    'paired_speedups',
    'rotations',
    'spec_text',
    'stock_config',
    'synchronize',
    'time_runs',
]
