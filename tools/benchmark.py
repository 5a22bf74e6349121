#!/usr/bin/env python
"""Measure the speed, MACs and parameters of dense vs HetDPT-pruned models.

Three comparisons, each run in ONE process with every model timed once per
repeat in rotating order (after warm-up): ``backbone`` (a HetDPTViT, a
HetDPTSwin with ``--family swin`` or a DeiT-III / DINOv2 with ``--family
layerscale_vit``: dense, pruned and merged), ``detr`` and
``upernet`` (end to end, built-in models or ``--config NAME=PATH``); see
:mod:`hetdpt_benchmark` (beside ``tools/``), which does the work, and
docs/user_guides/benchmark.md.

Examples (from the repository root)::

    python tools/benchmark.py backbone --arch deit-base \\
        --spec '{"attn_removed": [0, 3, 7, 8, 11],
                 "act_removed": [2, 7, 8, 10, 11]}' \\
        --batch-size 16 --json bench/deit-b.json --md bench/deit-b.md
    python tools/benchmark.py backbone --arch deit-base --batch-size 1 \\
        --models dense merged --runtime torch onnxruntime openvino
    python tools/benchmark.py backbone --batch-size 16 --models dense merged \\
        --runtime onnxruntime onnxruntime-int8 openvino openvino-int8
    python tools/benchmark.py backbone --family swin --arch base \\
        --spec '{"attn_removed": [10, 12, 14, 16, 18, 20],
                 "act_removed": [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                                 19]}'
    python tools/benchmark.py backbone --models dense \\
        --checkpoint plus-2.4g=work_dirs/plus_2.4g.pth \\
        --checkpoint width-2.6g=work_dirs/width_2.6g.pth
    python tools/benchmark.py detr --img-size 800 1216
    python tools/benchmark.py upernet --img-size 512 512 --profile 10
    python tools/benchmark.py detr \\
        --config dense=configs/detr_deit_b_dense.py \\
        --config merged=configs/detr_hetdpt_deit_b.py

Outputs are written atomically, only after every input has been validated,
and an existing output is kept unless ``--force``. Errors print
``error: <message>`` and exit with status 2.
"""

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a clone without installing

from hetdpt_benchmark.options import (  # noqa: E402
    TASKS,
    BenchmarkOptions,
    resolve_options,
)
from hetdpt_benchmark.run import run_and_write  # noqa: E402
from hetdpt_mm.analysis import MACS_CONVENTIONS  # noqa: E402
from hetdpt_mm.cli import (  # noqa: E402
    ArgumentParser,
    output_path,
    run_reporting_errors,
)
from hetdpt_mm.models.graph_propagation import GRAPHS  # noqa: E402
from hetdpt_mm.registry import FAMILIES  # noqa: E402


def parse_args(argv: List[str]) -> BenchmarkOptions:
    parser = ArgumentParser(
        description='Benchmark dense vs HetDPT-pruned models (speed, MACs, '
        'parameters) in one process.'
    )
    parser.add_argument(
        'task', choices=TASKS, help='backbone variants, DETR, or UperNet'
    )
    model = parser.add_argument_group('models')
    model.add_argument(
        '--family',
        choices=sorted(FAMILIES),
        help='backbone: HetDPTViT (default), HetDPTSwin '
        '(specs index the blocks of all stages), '
        'HetDPTLayerScaleViT (DeiT-III, DINOv2) or HetDPTWindowedViT '
        '(windowed_vit: SAM, ViTDet)',
    )
    model.add_argument(
        '--arch',
        help='vit: deit-tiny/small/base (default deit-base) '
        'or a JSON dict (embed_dims, num_layers, num_heads'
        '[, mlp_ratio]); swin: tiny/small/base/large '
        '(default base) or a JSON dict (embed_dims, depths, '
        'num_heads[, mlp_ratio]); layerscale_vit: '
        'deit3-*, dinov2-* (default dinov2-base) or a JSON '
        'dict (the vit keys[, ffn]); windowed_vit: base/large/huge '
        '(default base) or a JSON dict (the vit keys, '
        'global_attn_indexes)',
    )
    model.add_argument(
        '--spec',
        help='JSON prune spec, e.g. \'{"attn_removed": [0, 3],'
        ' "act_removed": [2]}\' (default: the authors\' '
        'DeiT-B spec, unless a --checkpoint says)',
    )
    model.add_argument(
        '--checkpoint',
        dest='checkpoints',
        action='append',
        metavar='[NAME=]PATH',
        help='backbone: a checkpoint whose HetDPT meta (or '
        'keys) gives the structure; its weights are loaded. '
        'Repeat it (or name it) to time several models side '
        'by side, each in its deployable form, the first as '
        "baseline (--models dense: the first one's dense "
        'form before them)',
    )
    model.add_argument(
        '--prefix',
        help='backbone: key prefix of the backbone in '
        '--checkpoint (e.g. backbone.)',
    )
    model.add_argument(
        '--distilled',
        action=argparse.BooleanOptionalAction,
        help='with the DeiT distillation token (default: '
        'backbone no, detr/upernet yes, as HetDPT models)',
    )
    model.add_argument(
        '--models',
        nargs='+',
        help='which models, in order (the first is the '
        'baseline): dense pruned merged, and for upernet '
        "also stock (mmseg's own ViT)",
    )
    model.add_argument(
        '--config',
        action='append',
        metavar='NAME=PATH',
        help='detr/upernet: benchmark this config instead of '
        'the built-in models (repeatable, first = baseline)',
    )
    model.add_argument(
        '--cfg-options',
        nargs='+',
        metavar='[NAME:]KEY=VALUE',
        help='override settings of every --config, or of '
        'NAME only (VALUE: JSON, or as mmengine parses it)',
    )
    run = parser.add_argument_group('measurement')
    run.add_argument(
        '--img-size',
        type=int,
        nargs='+',
        metavar='H [W]',
        help='input size (default: backbone 224, detr 800 1216, upernet 512)',
    )
    run.add_argument(
        '--batch-size',
        type=int,
        help='images per batch (default: backbone 16, else 1)',
    )
    run.add_argument(
        '--dtype',
        choices=('fp32', 'bf16', 'fp16'),
        help='fp32, or AMP (autocast) in bf16 / fp16; '
        'openvino: bf16 inference precision; onnxruntime: fp32 '
        'only',
    )
    run.add_argument(
        '--runtime',
        dest='runtimes',
        nargs='+',
        metavar='RUNTIME',
        help='backbone: run every model in each of torch '
        '(eager, default), compile (torch.compile), onnxruntime,'
        ' openvino (exported to ONNX first; needs the deploy '
        'extra), onnxruntime-int8, openvino-int8 (that graph '
        'quantized as by tools/export.py --int8)',
    )
    run.add_argument('--device', help='cpu, cuda, cuda:1 ...')
    run.add_argument(
        '--threads', type=int, help="torch.set_num_threads (default: torch's)"
    )
    run.add_argument(
        '--clock',
        choices=('wall', 'process'),
        help='wall: elapsed time (default); process: CPU '
        'seconds of this process, for a loaded machine (use '
        'with --threads 1, CPU only)',
    )
    run.add_argument(
        '--keep-freed-memory',
        action='store_true',
        default=None,
        help='glibc: serve every allocation from the heap and '
        'keep freed memory, so that large activations are not '
        'page-faulted in again every batch (what jemalloc / '
        'tcmalloc do; recommended on CPU, see '
        'docs/user_guides/benchmark.md)',
    )
    run.add_argument(
        '--warmup',
        type=int,
        help='untimed batches per model first (default 1)',
    )
    run.add_argument(
        '--repeats',
        type=int,
        help='timed rounds over all models (default: backbone 5, else 3)',
    )
    run.add_argument(
        '--iters', type=int, help='batches per model per round (default 1)'
    )
    run.add_argument(
        '--split-backbone',
        action=argparse.BooleanOptionalAction,
        help='also time each backbone alone and report the '
        'Amdahl bound (default: on for upernet)',
    )
    run.add_argument(
        '--token-merge',
        type=int,
        metavar='R',
        help='token merging (ToMe) with r=R per block in every '
        'HetDPT backbone, dense and pruned alike',
    )
    run.add_argument(
        '--graph-propagation',
        type=int,
        metavar='NUM_PROP',
        help='graph-based token propagation (GTP-ViT) of NUM_PROP patches '
        'per block in every HetDPT ViT backbone, instead of --token-merge',
    )
    run.add_argument(
        '--propagation-graph',
        choices=GRAPHS,
        help="--graph-propagation's patch graph (default: the option's, "
        'mixed)',
    )
    run.add_argument(
        '--no-macs',
        dest='macs',
        action='store_false',
        default=None,
        help='skip counting MACs (saves one traced forward)',
    )
    run.add_argument(
        '--macs-convention',
        choices=list(MACS_CONVENTIONS),
        help='count the two token x token products of every '
        'attention (with-attention-products, default) or '
        'leave them out (without-attention-products: what '
        'counters blind to fused attention report, the '
        "paper's pruned rows)",
    )
    run.add_argument(
        '--profile',
        type=int,
        metavar='N',
        help='profile one batch of each model with '
        'torch.profiler and report its N costliest operators',
    )
    out = parser.add_argument_group('output')
    out.add_argument(
        '--json',
        dest='json_path',
        metavar='JSON',
        type=output_path,
        help='write the results as JSON',
    )
    out.add_argument(
        '--md',
        dest='md_path',
        metavar='MD',
        type=output_path,
        help='write the markdown tables',
    )
    out.add_argument(
        '--force', action='store_true', help='replace existing output files'
    )
    args = parser.parse_args(argv)
    # Options not given keep BenchmarkOptions' defaults.
    given = {
        name: value for name, value in vars(args).items() if value is not None
    }
    return resolve_options(BenchmarkOptions(argv=argv, **given))


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_reporting_errors(lambda: run_and_write(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
