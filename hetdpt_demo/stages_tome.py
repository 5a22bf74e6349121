"""The demo's token-merging stage: the paper's Fig. 8 (accuracy against
measured throughput of dense + ToMe and HetDPT + ToMe at several ``r``),
what blocks whose attention was removed merge on (``removed_attn``), and
DETR and UperNet with ToMe; no model is trained again."""

import contextlib
import copy
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Tuple

import torch
from mmengine.config import Config, DictAction
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

from hetdpt_benchmark.builders import build_backbone_variants
from hetdpt_benchmark.timing import time_runs
from hetdpt_mm.analysis import count_macs, macs_convention
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.deploy.networks import build_from_config
from hetdpt_mm.runner import load_fitting, take_checkpoint_structure

from .helpers import read_json
from .jobs import Job
from .results import (
    AttnOnlyRun,
    CurvePoint,
    TomePoint,
    TomeResult,
    TomeTiming,
    TomeTransfer,
    TomeTransferPoint,
)
from .settings import (
    BACKBONE_OPTIONS,
    DENSE_CONFIG,
    TRANSFER_CONFIGS,
    TRANSFER_METRICS,
)

#: The classifiers with ToMe: (name, whose merged checkpoint, what blocks
#: whose attention was removed merge on): Fig. 8 compares the dense model
#: (no such block) and the MAP split; ``removed_attn`` is compared on the
#: attention-only split of the same budget (the most such blocks; the MAP
#: split may remove no attention at all).
TOME_MODELS = (
    ('dense', 'dense', 'norm'),
    ('hetdpt', 'MAP', 'norm'),
    ('attn_only', 'attention_only', 'norm'),
    ('attn_only_none', 'attention_only', 'none'),
)
#: The images the demo's DETR and UperNet test on (their test pipelines
#: resize the toy datasets' 128x128 images to these): 36 and 64 patches.
TRANSFER_IMG_SIZE = dict(detr=(48, 48), upernet=(64, 64))
TRANSFER_BATCH = 8


def token_merge_options(r: int, removed_attn: str) -> List[str]:
    """``--cfg-options`` giving a config's backbone ToMe (``r=0``: the
    option set, nothing merged)."""
    return [
        f'model.backbone.token_merge.r={r}',
        f'model.backbone.token_merge.removed_attn={removed_attn}',
    ]


#: The models of Fig. 8's curves and whose checkpoints they are; GTP-ViT
#: also on the attention-only split, to measure what blocks whose
#: attention was removed do with it (nothing: no attention map to rank
#: by) against ToMe's two ``removed_attn`` there.
FIG8_MODELS = dict(dense='dense', hetdpt='MAP')
GTP_MODELS = dict(FIG8_MODELS, attn_only='attention_only')


def point_name(model: str, r: int) -> str:
    return f'{model}-r{r}'


def fig8_points(settings) -> Dict[str, Tuple[str, str, str, Dict[str, Any]]]:
    """Fig. 8's operating points beyond the constant ``tome_r`` (their
    r=0 is each model without token reduction), by name: (model, method,
    setting, backbone options)."""
    points = {}
    for model in FIG8_MODELS:
        for r, inflect in settings.fig8_schedules:
            points[f'{model}-r{r}-inflect{inflect:g}'] = (
                model,
                'tome',
                f'r={r}, inflect={inflect:g}',
                dict(token_merge=dict(r=r, inflect=inflect)),
            )
    for model in GTP_MODELS:
        for num_prop in settings.fig8_num_prop:
            points[f'{model}-gtp{num_prop}'] = (
                model,
                'gtp',
                f'num_prop={num_prop}',
                dict(graph_propagation=dict(num_prop=num_prop)),
            )
    return points


class TomeStages:
    """The ``tome`` stage of :class:`~.pipeline.Demo`."""

    def stage_tome(self) -> None:
        s = self.settings
        if not s.tome_r:
            self.results.tome_skipped = True
            return
        work = self.out('tome')
        attn_only = self.attention_only_run()
        checkpoints = dict(
            dense=self.results.dense.checkpoint,
            MAP=self.results.merge.merged,
            attention_only=attn_only['merged'],
        )
        equal_r = {
            point_name(model, r): (
                source,
                dict(token_merge=dict(r=r, removed_attn=removed_attn)),
            )
            for model, source, removed_attn in TOME_MODELS
            for r in s.tome_r
        }
        fig8 = fig8_points(s)
        curve_specs = {
            name: (GTP_MODELS[model], options)
            for name, (model, _, _, options) in fig8.items()
        }
        # r=0 merges nothing (bit-identical): its top-1 is the earlier
        # stages' test of the same checkpoint.
        tests = self.evaluate_classifiers(
            checkpoints,
            {
                name: spec
                for name, spec in (equal_r | curve_specs).items()
                if not name.endswith('-r0')
            },
        )
        tests.update(
            {
                point_name('dense', 0): self.results.dense.accuracy,
                point_name('hetdpt', 0): self.results.transfer.merged_accuracy,
                point_name('attn_only', 0): attn_only['accuracy'],
                point_name('attn_only_none', 0): attn_only['accuracy'],
            }
        )
        tests.update(self.run_transfer_tests(work))
        # Speed: DETR and UperNet with tools/benchmark.py (each r its own
        # --config, alternating in one run); the classifiers' backbones in
        # this process, every model and point in one rotation.
        self.run_transfer_benchmarks(work)
        timing = self.time_tome_backbones(checkpoints, equal_r | curve_specs)
        measured = timing['points']
        curves = [
            CurvePoint(
                model,
                method,
                setting,
                tests[name],
                measured[name]['throughput'],
                measured[name]['macs'],
            )
            for name, (model, method, setting) in (
                [
                    (point_name(model, r), (model, 'tome', f'r={r}'))
                    for model in FIG8_MODELS
                    for r in s.tome_r
                ]
                + [
                    (point_name(model, 0), (model, 'gtp', 'num_prop=0'))
                    for model in GTP_MODELS
                ]
                + [(name, spec[:3]) for name, spec in fig8.items()]
            )
        ]
        points = [
            TomePoint(
                model=model,
                r=r,
                removed_attn=removed_attn,
                accuracy=tests[point_name(model, r)],
                **timing['points'][point_name(model, r)],
            )
            for model, _, removed_attn in TOME_MODELS
            for r in s.tome_r
        ]
        transfer = {}
        for kind, metric in TRANSFER_METRICS.items():
            bench = read_json(work / f'benchmark-{kind}.json')
            speed = {m['name']: m for m in bench['models']}
            transfer[kind] = TomeTransfer(
                metric=metric,
                img_size=bench['settings']['img_size'],
                batch_size=bench['settings']['batch_size'],
                repeats=bench['settings']['repeats'],
                macs_convention=bench['settings']['macs_convention'],
                points=[
                    TomeTransferPoint(
                        r=r,
                        metric=tests[point_name(kind, r)],
                        median_ms=speed[point_name(kind, r)]['timing'][
                            'median_ms'
                        ],
                        throughput=speed[point_name(kind, r)]['timing'][
                            'throughput'
                        ],
                        macs=speed[point_name(kind, r)]['macs']['total'],
                        speedup=speed[point_name(kind, r)]['speedup'][
                            'paired_median'
                        ],
                    )
                    for r in self.transfer_r(kind)
                ],
            )
        self.results.tome = TomeResult(
            r=list(s.tome_r),
            points=points,
            timing=timing['settings'],
            transfer=transfer,
            map_attn_removed=self.results.prune.spec['attn_removed'],
            attn_only=AttnOnlyRun(
                attn_removed=attn_only['attn_removed'], seed=attn_only['seed']
            ),
            curves=curves,
        )

    def attention_only_run(self) -> Dict[str, Any]:
        """The attention-only split's run of the first seed: its merged
        checkpoint, accuracy, seed and removed attention layers."""
        r = self.results
        run = next(
            run
            for run in r.compare.runs.values()
            if 'attention_only' in run.splits
            and run.seed == self.settings.seeds[0]
        )
        if run.main:  # the MAP split is attention only
            merged, accuracy = r.merge.merged, r.transfer.merged_accuracy
        else:
            merged, accuracy = run.merged, run.accuracy
        spec = read_backbone_checkpoint(
            self.repo / merged, mmap=True
        ).record.spec
        return dict(
            merged=merged,
            accuracy=accuracy,
            seed=run.seed,
            attn_removed=list(spec.attn_removed),
        )

    def transfer_r(self, kind: str) -> List[int]:
        return [0] + list(self.settings.tome_transfer_r[kind])

    def run_transfer_tests(self, work: Path) -> Dict[str, float]:
        """The DETR and UperNet metric at each r, by point name:
        ``tools/test.py`` with ToMe; r=0 merges nothing (bit-identical), so
        its numbers are the transfer stage's tests."""
        r = self.results
        merged = r.merge.merged
        metrics = {}
        runs = {}
        for kind, config in TRANSFER_CONFIGS.items():
            metrics[point_name(kind, 0)] = getattr(r.transfer, kind).after[
                TRANSFER_METRICS[kind]
            ]
            for value in self.transfer_r(kind)[1:]:
                runs[point_name(kind, value)] = (
                    config,
                    getattr(r.transfer, kind).checkpoint,
                    TRANSFER_METRICS[kind],
                    self.transfer_options(kind, merged)
                    + token_merge_options(value, 'norm'),
                )
        lanes: List[List[Job]] = [[], []]
        for index, (name, (config, checkpoint, _, options)) in enumerate(
            runs.items()
        ):
            lanes[index % 2].append(
                Job(
                    f'tome-{name}',
                    self.test_argv(
                        config,
                        checkpoint,
                        self.rel(work / name),
                        self.rel(work / name / 'test_metrics.json'),
                        options,
                    ),
                )
            )
        self.jobs.run_lanes(lanes)
        for name, (_, _, metric, _) in runs.items():
            metrics[name] = read_json(work / name / 'test_metrics.json')[
                metric
            ]
        return metrics

    def run_transfer_benchmarks(self, work: Path) -> None:
        """DETR and UperNet at each of their ``r`` side by side
        (``tools/benchmark.py --config``; the structure from the merged
        file, timing does not need the trained weights)."""
        s = self.settings
        threads = self.options.threads or 1
        merged = self.results.merge.merged
        lane = []
        for kind, config in TRANSFER_CONFIGS.items():
            rs = self.transfer_r(kind)
            names = [point_name(kind, r) for r in rs]
            options = (
                [f'model.backbone.init_cfg.checkpoint={merged}']
                + list(BACKBONE_OPTIONS[kind])
                + [
                    f'{name}:{option}'
                    for name, r in zip(names, rs)
                    for option in token_merge_options(r, 'norm')
                ]
            )
            lane.append(
                Job(
                    f'tome-benchmark-{kind}',
                    [
                        'tools/benchmark.py',
                        kind,
                        *[
                            arg
                            for name in names
                            for arg in ('--config', f'{name}={config}')
                        ],
                        '--cfg-options',
                        *options,
                        '--img-size',
                        *map(str, TRANSFER_IMG_SIZE[kind]),
                        '--batch-size',
                        str(TRANSFER_BATCH),
                        '--repeats',
                        str(s.bench_repeats),
                        '--threads',
                        str(threads),
                        '--force',
                        '--json',
                        self.rel(work / f'benchmark-{kind}.json'),
                        '--md',
                        self.rel(work / f'benchmark-{kind}.md'),
                    ]
                    + (['--clock', 'process'] if threads == 1 else []),
                    show_all=True,
                    in_process=True,
                )
            )
        self.jobs.run_lanes([lane])

    def time_tome_backbones(
        self,
        checkpoints: Mapping[str, str],
        points: Mapping[str, Tuple[str, Dict[str, Any]]],
    ) -> Dict[str, Any]:
        """Throughput (images/s at the median batch time) and MACs of the
        classifier backbone at every point (name: whose checkpoint, its
        backbone options), timed in one alternating rotation in this
        process (as ``tools/benchmark.py`` times, with its settings of the
        benchmark stage)."""
        s = self.settings
        threads = self.options.threads or 1
        clock = 'process' if threads == 1 else 'wall'
        size = self.results.dense.arch['img_size']
        inputs = torch.randn(
            s.bench_batch, 3, *size, generator=torch.Generator().manual_seed(0)
        )
        runs: Dict[str, Callable[[], Any]] = {}
        macs = {}
        for name, (source, options) in points.items():
            backbone = build_backbone_variants(
                checkpoint=str(self.repo / checkpoints[source]),
                prefix='backbone.',
                variants=('merged',),
                **options,
            )['merged']
            runs[name] = lambda backbone=backbone: backbone(inputs)
            macs[name] = count_macs(backbone, inputs[:1]).total
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            stats = time_runs(
                runs,
                s.bench_batch,
                repeats=s.bench_repeats,
                clock=clock,
                logger=self.logger,
            )
        finally:
            torch.set_num_threads(previous)
        return dict(
            settings=TomeTiming(
                batch_size=s.bench_batch,
                threads=threads,
                repeats=s.bench_repeats,
                clock=clock,
                img_size=list(size),
                # count_macs's default
                macs_convention=macs_convention(True),
            ),
            points={
                name: dict(
                    median_ms=1e3 * stats[name].median,
                    throughput=stats[name].throughput,
                    macs=macs[name],
                )
                for name in runs
            },
        )

    def evaluate_classifiers(
        self,
        checkpoints: Mapping[str, str],
        points: Mapping[str, Tuple[str, Dict[str, Any]]],
    ) -> Dict[str, float]:
        """Top-1 (%) on the val split of the classifier at every point, in
        this process: the val batches are loaded and preprocessed once, as
        ``tools/test.py`` would on the plain dense config, then each model
        (the checkpoint's structure, its backbone options) classifies
        them."""
        cfg = Config.fromfile(self.repo / DENSE_CONFIG)
        cfg.merge_from_dict(
            {
                key: DictAction._parse_iterable(value)
                for key, _, value in (
                    option.partition('=')
                    for option in self.data_options('cls')
                )
            }
        )
        previous = torch.get_num_threads()
        torch.set_num_threads(self.options.threads or 1)
        try:
            with contextlib.chdir(self.repo), torch.inference_mode():
                return self._top1(cfg, checkpoints, points)
        finally:
            torch.set_num_threads(previous)

    @staticmethod
    def _top1(
        cfg: Config,
        checkpoints: Mapping[str, str],
        points: Mapping[str, Tuple[str, Dict[str, Any]]],
    ) -> Dict[str, float]:
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            loader = Runner.build_dataloader(cfg.test_dataloader)
        batches: List[Dict[str, Any]] = []
        accuracies = {}
        for name, (source, options) in points.items():
            point = copy.deepcopy(cfg)
            point.model.backbone.update(options)
            point.load_from = checkpoints[source]
            # As the runner does: the config's top-level preprocessor.
            point.model.setdefault('data_preprocessor', cfg.data_preprocessor)
            take_checkpoint_structure(point)
            model = build_from_config(point)
            load_fitting(model, checkpoints[source], 'the demo classifier')
            # Preprocessed once: the preprocessor is the same in every model.
            batches = batches or [
                model.data_preprocessor(batch, False) for batch in loader
            ]
            correct = sum(
                (
                    model(batch['inputs'], mode='tensor').argmax(-1)
                    == torch.cat([s.gt_label for s in batch['data_samples']])
                )
                .sum()
                .item()
                for batch in batches
            )
            total = sum(len(batch['data_samples']) for batch in batches)
            accuracies[name] = 100 * correct / total
        return accuracies
