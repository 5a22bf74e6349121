"""Measure the speed, MACs and parameters of dense vs HetDPT-pruned models.

Three comparisons, each run in ONE process with every model timed once per
repeat in rotating order (after warm-up), reporting the median time per
batch with its spread and the speedup over the first (baseline) model, both
as a ratio of medians and per repeat (paired):

* ``backbone``: a HetDPTViT, HetDPTSwin or HetDPTLayerScaleViT
  (``--family``) in its dense, pruned (unmerged) and merged forms, given by
  ``--arch`` + ``--spec`` or by a ``--checkpoint`` with HetDPT meta; or
  several checkpoints side by side (``--checkpoint NAME=PATH`` repeated),
  each in its deployable form, with or without their dense baseline;
* ``detr``: DETR (mmdet's config) with the dense vs the merged HetDPT DeiT-B;
* ``upernet``: mmseg's stock DeiT-B UperNet vs the same UperNet with the
  merged HetDPT DeiT-B, with the backbone also timed alone (Amdahl's law).

``detr`` and ``upernet`` build these models from the stock configs with the
backbone swapped (random weights: speed does not depend on them), or take
real configs with ``--config NAME=PATH`` (repeatable; the first is the
baseline). End to end means ``model.test_step`` on a batch of uint8 images:
normalisation, backbone, neck, heads and post-processing, no data loading.

The options are those of ``tools/benchmark.py``
(:class:`~.options.BenchmarkOptions`, checked by
:func:`~.options.resolve_options`; the models under test:
:mod:`.entries`; the report: :mod:`.report`); outputs
are written atomically, only after every input has been validated, and an
existing output is kept unless ``force``.  The timing loop is
:mod:`.timing`, the MAC counts :mod:`hetdpt_mm.analysis`.
"""

import json
import os
import shlex
import statistics
from typing import Any, Callable, Dict, List, Optional

import torch
from torch.profiler import ProfilerActivity

from hetdpt_mm.analysis import (
    MACS_CONVENTIONS,
    MacCount,
    analytic_macs,
    count_macs,
    count_params,
)
from hetdpt_mm.fileio import write_outputs
from hetdpt_mm.models.family import HetDPTBackbone

from .entries import Entry, backbone_entries, config_entries
from .machine import keep_freed_memory, machine_info
from .options import (
    BenchmarkOptions,
    check_outputs,
    token_reduction,
)
from .report import format_markdown
from .runtimes import INT8, runtime_name
from .timing import (
    TimingStats,
    amdahl_bound,
    autocast,
    synchronize,
    time_runs,
)

__all__ = ['run_benchmark', 'run_and_write']


# ------------------------------------------------------------ measurement
def measure_macs(entry: Entry, options: BenchmarkOptions) -> Dict[str, Any]:
    counts: Dict[str, Any] = dict(params=count_params(entry.model))
    if entry.backbone is not entry.model:
        counts['backbone_params'] = count_params(entry.backbone)
    if not options.macs:
        return counts
    products = MACS_CONVENTIONS[options.macs_convention]
    macs: MacCount = count_macs(entry.macs_module, entry.macs_inputs, products)
    counts['macs'] = macs.to_dict()
    backbone = entry.backbone
    if backbone is not entry.model:
        counts['backbone_macs'] = count_macs(
            backbone, entry.backbone_inputs[:1], products
        ).to_dict()
    # The analytic model knows uniform widths (not HetDPT+'s) and every
    # token (not ToMe's or GTP-ViT's).
    analytic = (
        isinstance(backbone, HetDPTBackbone)
        and backbone.prune_spec.widths is None
        and not token_reduction(options)
    )
    if analytic and all(
        s % backbone.build_args()['patch_size'] == 0 for s in options.img_size
    ):
        counts['backbone_analytic_macs'] = analytic_macs(
            backbone, options.img_size, products
        )
    return counts


def profile(
    run: Callable, top: int, options: BenchmarkOptions
) -> List[Dict[str, Any]]:
    """The ``top`` operators by self time (device time on CUDA) in one
    batch of ``run``."""
    activities = [ProfilerActivity.CPU]
    if torch.device(options.device).type == 'cuda':
        activities.append(ProfilerActivity.CUDA)
    with torch.inference_mode(), autocast(options.device, options.dtype):
        run()  # warm
        with torch.profiler.profile(activities=activities) as prof:
            run()
            synchronize(options.device)
    events = prof.key_averages()
    key = (
        'self_device_time_total'
        if len(activities) > 1
        else 'self_cpu_time_total'
    )
    total = sum(getattr(e, key) for e in events) or 1.0
    rows = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:top]
    return [
        dict(
            op=e.key,
            calls=e.count,
            self_ms=getattr(e, key) / 1e3,
            share=getattr(e, key) / total,
        )
        for e in rows
    ]


def run_benchmark(options: BenchmarkOptions) -> Dict[str, Any]:
    if options.threads:
        torch.set_num_threads(options.threads)
    if options.keep_freed_memory:
        keep_freed_memory()
    machine = machine_info(options.device)
    entries = (
        backbone_entries(options)
        if options.task == 'backbone'
        else config_entries(options)
    )
    runs = {}
    for entry in entries:
        runs[entry.name] = entry.run
        if options.split_backbone:
            runs[f'{entry.name}/backbone'] = lambda e=entry: e.backbone(
                e.backbone_inputs
            )
    by_model: Dict[int, Dict[str, Any]] = {}
    for entry in entries:  # a model run in several runtimes counts once
        if id(entry.model) not in by_model:
            by_model[id(entry.model)] = measure_macs(entry, options)
    counts = {entry.name: by_model[id(entry.model)] for entry in entries}
    timings = time_runs(
        runs,
        batch_size=options.batch_size,
        repeats=options.repeats,
        warmup=options.warmup,
        iters=options.iters,
        device=options.device,
        dtype=options.dtype,
        clock=options.clock,
    )
    profiles = (
        {
            name: profile(run, options.profile, options)
            for name, run in runs.items()
        }
        if options.profile
        else {}
    )
    if hasattr(os, 'getloadavg'):
        machine['loadavg_after'] = [round(v, 2) for v in os.getloadavg()]
    baseline = entries[0].name
    models = []
    for entry in entries:
        name = entry.name
        record = dict(
            name=name,
            description=entry.description,
            **counts[name],
            timing=timings[name].to_dict(),
            speedup=speedup(
                timings[baseline],
                timings[name],
                counts[baseline].get('macs'),
                counts[name].get('macs'),
            ),
        )
        if options.split_backbone:
            key = f'{name}/backbone'
            record['backbone_timing'] = timings[key].to_dict()
            record['backbone_speedup'] = speedup(
                timings[f'{baseline}/backbone'],
                timings[key],
                counts[baseline].get('backbone_macs'),
                counts[name].get('backbone_macs'),
            )
        if options.task == 'backbone' and (
            entry.runtime != 'torch' or options.dtype != 'fp32'
        ):
            record.update(
                runtime=entry.runtime, max_abs_diff=entry.max_abs_diff
            )
        if profiles:
            record['profile'] = profiles[entry.name]
            if options.split_backbone:
                record['backbone_profile'] = profiles[f'{entry.name}/backbone']
        models.append(record)
    result = dict(
        task=options.task,
        command='python tools/benchmark.py ' + shlex.join(options.argv),
        settings=dict(
            img_size=list(options.img_size),
            batch_size=options.batch_size,
            dtype=options.dtype,
            device=options.device,
            threads=torch.get_num_threads(),
            clock=options.clock,
            keep_freed_memory=options.keep_freed_memory,
            warmup=options.warmup,
            repeats=options.repeats,
            iters=options.iters,
            macs_convention=options.macs_convention if options.macs else None,
            # --config models take all of these from configs.
            family=None if options.config else options.family,
            arch=None if options.config else options.arch,
            spec=None if options.config else options.spec,
            checkpoints=dict(options.checkpoints) or None,
            distilled=None if options.config else options.distilled,
            configs=dict(options.config) or None,
        ),
        machine=machine,
        baseline=baseline,
        models=models,
    )
    if options.split_backbone:
        result['amdahl'] = amdahl_section(timings, entries)
    if list(options.runtimes) != ['torch']:
        result['runtimes'] = runtime_section(timings, entries, options)
    int8 = int8_section(timings, counts, options)
    if int8:
        result['int8'] = int8
    return result


def int8_section(
    timings, counts: Dict[str, Dict[str, Any]], options: BenchmarkOptions
) -> List[Dict[str, Any]]:
    """Per runtime timed in FP32 and INT8, per model: INT8 over FP32, and
    INT8 over the first (baseline) model in INT8 and in FP32 (paired)."""
    base = options.models[0]
    rows = []
    for runtime in options.runtimes:
        if runtime + INT8 not in options.runtimes:
            continue
        int8 = runtime + INT8
        for variant in options.models:
            name = runtime_name(variant, int8)
            row = dict(
                runtime=runtime,
                model=variant,
                baseline=base,
                fp32_ms=1e3 * timings[runtime_name(variant, runtime)].median,
                int8_ms=1e3 * timings[name].median,
                vs_fp32=speedup(
                    timings[runtime_name(variant, runtime)], timings[name]
                ),
            )
            if variant != base:
                row['vs_baseline_int8'] = speedup(
                    timings[runtime_name(base, int8)],
                    timings[name],
                    counts[runtime_name(base, int8)].get('macs'),
                    counts[name].get('macs'),
                )
                row['vs_baseline_fp32'] = speedup(
                    timings[runtime_name(base, runtime)], timings[name]
                )
            rows.append(row)
    return rows


def runtime_section(
    timings, entries: List[Entry], options: BenchmarkOptions
) -> List[Dict[str, Any]]:
    """Per runtime: each variant's speedup over the first (baseline)
    variant in that runtime, and over the same variant in PyTorch eager
    (None where ``--runtime`` leaves eager out)."""
    base = options.models[0]
    diffs = {entry.name: entry.max_abs_diff for entry in entries}
    rows = []
    for runtime in options.runtimes:
        for variant in options.models[1:]:
            name = runtime_name(variant, runtime)
            rows.append(
                dict(
                    runtime=runtime,
                    model=variant,
                    baseline=base,
                    max_abs_diff=max(
                        diffs[name], diffs[runtime_name(base, runtime)]
                    ),
                    ms=1e3 * timings[name].median,
                    baseline_ms=1e3
                    * timings[runtime_name(base, runtime)].median,
                    speedup=speedup(
                        timings[runtime_name(base, runtime)], timings[name]
                    ),
                    vs_torch=speedup(timings[variant], timings[name])
                    if variant in timings
                    else None,
                )
            )
    return rows


def speedup(
    base: TimingStats,
    other: TimingStats,
    base_macs: Optional[Dict] = None,
    other_macs: Optional[Dict] = None,
) -> Dict[str, Any]:
    """Speedup of ``other`` over ``base``: ratio of medians, per-repeat
    (paired) ratios, ratio of the fastest repeats (the least disturbed on a
    shared machine), and the MACs ratio when both were counted, with the
    speedup of medians as a fraction of it (``of_macs``); the paired
    ratios cancel slow drifts of load."""
    paired = [b / o for b, o in zip(base.seconds, other.seconds)]
    result = dict(
        median=base.median / other.median,
        paired=paired,
        paired_median=statistics.median(paired),
        paired_min=min(paired),
        paired_max=max(paired),
        best=min(base.seconds) / min(other.seconds),
    )
    if base_macs and other_macs:
        result['macs'] = base_macs['total'] / other_macs['total']
        result['of_macs'] = result['median'] / result['macs']
    return result


def amdahl_section(timings, entries: List[Entry]) -> List[Dict[str, Any]]:
    """For each pair of models (earlier one as baseline): the backbone's
    share of the baseline's time, the backbone speedup, the end-to-end
    speedup it allows by Amdahl's law, and the speedup measured."""
    rows = []
    for index, base in enumerate(entries):
        base_total = timings[base.name].median
        base_backbone = timings[f'{base.name}/backbone'].median
        share = base_backbone / base_total
        for entry in entries[index + 1 :]:
            backbone_speedup = (
                base_backbone / timings[f'{entry.name}/backbone'].median
            )
            bound = amdahl_bound(share, backbone_speedup)
            end_to_end = base_total / timings[entry.name].median
            rows.append(
                dict(
                    baseline=base.name,
                    model=entry.name,
                    backbone_share=share,
                    backbone_speedup=backbone_speedup,
                    bound=bound,
                    end_to_end_speedup=end_to_end,
                    fraction_of_bound=end_to_end / bound,
                )
            )
    return rows


# --------------------------------------------------------------- markdown
def run_and_write(options: BenchmarkOptions) -> Dict[str, Any]:
    """Check the outputs, benchmark, print the markdown tables and write
    the requested files; returns the result."""
    check_outputs(options)
    result = run_benchmark(options)
    markdown = format_markdown(result)
    print(markdown)
    outputs = {}
    if options.json_path is not None:
        outputs[options.json_path] = json.dumps(result, indent=2) + '\n'
    if options.md_path is not None:
        outputs[options.md_path] = markdown
    write_outputs(outputs, exclusive=not options.force)
    return result
