"""The demo's stages from the merge on (8-11): merge, DETR and UperNet,
HetDPT+, benchmarks."""

from pathlib import Path
from typing import List

import torch

from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file

from .claims import split_benchmark_runs
from .helpers import (
    classifier_schedule_options,
    condense_benchmark,
    last_checkpoint,
    read_json,
    scalar_curve,
    train_scalars,
    val_records,
)
from .jobs import Job
from .results import (
    DensePredictionRun,
    MergeResult,
    PlusResult,
    TransferResult,
)
from .settings import DENSE_CONFIG, TRANSFER_CONFIGS, TRANSFER_METRICS


class TransferStages:
    """Stages 8-11 of :class:`~.pipeline.Demo`."""

    def stage_merge(self) -> None:
        prune = self.results.prune
        work = self.out('vit-demo_digits_hetdpt')
        merged = self.rel(work / 'merged.pth')
        self.jobs.run_lanes(
            [
                [
                    Job(
                        'merge',
                        [
                            'tools/merge_ckpt.py',
                            prune.checkpoint,
                            merged,
                            '--force',
                        ],
                        show_all=True,
                        in_process=True,
                    )
                ]
            ]
        )
        self.results.merge = MergeResult(
            merged=merged,
            hook_output_identical=self.same_weights(
                self.repo / merged, self.repo / prune.hook_merged
            ),
        )

    @staticmethod
    def same_weights(path_a: Path, path_b: Path) -> bool:
        """Whether two checkpoints hold bit-identical tensors."""
        a = load_checkpoint_file(path_a)['state_dict']
        b = load_checkpoint_file(path_b)['state_dict']
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    def stage_transfer(self) -> None:
        s = self.settings
        merged = self.results.merge.merged
        overrides = dict(
            detr=[]
            if s.detr_epochs is None
            else [
                f'train_cfg.max_epochs={s.detr_epochs}',
                f'train_cfg.val_interval={s.detr_epochs}',
            ],
            upernet=[]
            if s.upernet_iters is None
            else [
                f'train_cfg.max_iters={s.upernet_iters}',
                f'train_cfg.val_interval={s.upernet_iters}',
            ],
        )
        if s.detr_train_images is not None:
            overrides['detr'].append(
                f'train_dataloader.dataset.indices={s.detr_train_images}'
            )
        if s.transfer_log_interval is not None:
            for options in overrides.values():
                options.append(
                    f'default_hooks.logger.interval={s.transfer_log_interval}'
                )
        # Validated before training (the classifier's backbone, neck and
        # heads as initialised) and after it (the last checkpoint).
        lanes = [
            [
                Job(
                    f'{kind}-train',
                    self.train_argv(
                        config,
                        self.rel(self.transfer_work_dir(kind)),
                        self.transfer_options(kind, merged) + overrides[kind],
                        validate_first=True,
                    ),
                )
            ]
            for kind, config in TRANSFER_CONFIGS.items()
        ]
        prune_work = self.out('vit-demo_digits_hetdpt')
        # The deployment path: the plain dense config and the merged file,
        # whose meta rebuilds the pruned structure.  It runs on whichever
        # core the shorter of DETR and UperNet frees first.
        lanes.append(
            [
                Job(
                    'merged-test',
                    self.test_argv(
                        DENSE_CONFIG,
                        merged,
                        self.rel(prune_work),
                        self.rel(prune_work / 'test_metrics_merged.json'),
                        self.data_options('cls'),
                    ),
                )
            ]
        )
        self.jobs.run_lanes(lanes)
        runs = {}
        for kind in TRANSFER_CONFIGS:
            work = self.transfer_work_dir(kind)
            curve = scalar_curve(train_scalars(work))
            validations = val_records(work, TRANSFER_METRICS[kind])
            runs[kind] = DensePredictionRun(
                before=validations[0],
                after=validations[-1],
                loss_curve=curve,
                loss_first=curve[0][1],
                loss_last=curve[-1][1],
                iterations=curve[-1][0],
                checkpoint=self.rel(last_checkpoint(work)),
            )
        self.results.transfer = TransferResult(
            merged_accuracy=read_json(prune_work / 'test_metrics_merged.json')[
                'accuracy/top1'
            ],
            **runs,
        )

    def stage_plus(self) -> None:
        """HetDPT+: the merged classifier pruned in width (magnitude
        importance), fine-tuned briefly, validated before and after; the
        demo's DETR and UperNet configs build on it and are tested
        untrained (their necks take its embedding width)."""
        s = self.settings
        work = self.out('vit-demo_digits_plus')
        pruned = self.rel(work / 'plus.pth')
        report = work / 'plus_report.json'
        # The structure at build time (the optimizer takes its parameters),
        # the heads with the rest of the classifier; a fine-tune: pos_embed
        # at the base learning rate (as the demo's other fine-tunes).
        start = [
            'model.backbone.init_cfg.type=Pretrained',
            f'model.backbone.init_cfg.checkpoint={pruned}',
            f'load_from={pruned}',
            'optim_wrapper.paramwise_cfg.custom_keys.pos_embed.lr_mult=1.0',
        ]
        self.jobs.run_lanes(
            [
                [
                    Job(
                        'plus-prune',
                        [
                            'tools/prune_width.py',
                            self.results.merge.merged,
                            pruned,
                            '--ratio',
                            str(s.plus_ratio),
                            '--importance',
                            'magnitude',
                            '--report',
                            self.rel(report),
                            '--plot',
                            self.rel(work / 'widths.png'),
                            '--force',
                        ],
                        show_all=True,
                        in_process=True,
                    ),
                    # Validated right after the width pruning and after the
                    # fine-tune.
                    Job(
                        'plus-train',
                        self.train_argv(
                            DENSE_CONFIG,
                            self.rel(work),
                            start
                            + self.data_options('cls')
                            + classifier_schedule_options(
                                s.plus_epochs, s.plus_train_images
                            ),
                            validate_first=True,
                        ),
                    ),
                ]
            ]
        )
        trained = self.rel(last_checkpoint(work))
        # Their own work dirs: a test never runs where its input is.
        self.jobs.run_lanes(
            [
                [
                    Job(
                        f'plus-{kind}-test',
                        self.test_argv(
                            config,
                            trained,
                            self.rel(self.transfer_work_dir(kind)),
                            self.rel(work / f'test_metrics_{kind}.json'),
                            self.transfer_options(kind, trained),
                            strict=False,
                        ),
                    )
                ]
                for kind, config in TRANSFER_CONFIGS.items()
            ]
        )
        width = read_json(report)
        validations = val_records(work)
        self.results.plus = PlusResult(
            checkpoint=trained,
            ratio=width['ratio'],
            epochs=s.plus_epochs,
            widths=width['spec']['widths'],
            macs=[width['macs_before'], width['macs_after']],
            macs_convention=width['macs_convention'],
            params=[width['params_before'], width['params_after']],
            accuracy_before=validations[0]['accuracy/top1'],
            accuracy=validations[-1]['accuracy/top1'],
            detr=read_json(work / 'test_metrics_detr.json'),
            upernet=read_json(work / 'test_metrics_upernet.json'),
        )

    def stage_benchmark(self) -> None:
        s = self.settings
        out = self.out('benchmark')
        # One thread unless told, timed by the process's CPU time: on a
        # shared machine that is what other jobs cannot inflate.
        threads = self.options.threads or 1
        common = ['--threads', str(threads), '--force'] + (
            ['--clock', 'process'] if threads == 1 else []
        )

        def classifier_run(checkpoint: str, *options: str) -> List[str]:
            # The backbone of a demo classifier, at its 32-pixel images.
            return [
                'tools/benchmark.py',
                'backbone',
                '--checkpoint',
                checkpoint,
                '--prefix',
                'backbone.',
                *options,
                '--img-size',
                '32',
                '--batch-size',
                str(s.bench_batch),
                '--repeats',
                str(s.bench_repeats),
            ]

        runs = dict(demo=classifier_run(self.results.prune.checkpoint))
        # The other splits of the comparison (speed depends on the counts
        # only): each one's first seed, dense vs merged.
        for counts, run in split_benchmark_runs(self.results).items():
            runs[f'split-{counts}'] = classifier_run(
                run.checkpoint, '--models', 'dense', 'merged'
            )
        if s.context_bench:
            # For context: DeiT-S at 224 with the authors' DeiT-B spec.
            runs['context'] = [
                'tools/benchmark.py',
                'backbone',
                '--arch',
                'deit-small',
                '--batch-size',
                '4',
                '--repeats',
                '3',
            ]
        lane = [
            Job(
                f'benchmark-{name}',
                argv
                + common
                + [
                    '--json',
                    self.rel(out / f'{name}.json'),
                    '--md',
                    self.rel(out / f'{name}.md'),
                ],
                show_all=True,
                in_process=True,
            )
            for name, argv in runs.items()
        ]
        # Timings only mean something with nothing else of ours running.
        self.jobs.run_lanes([lane])
        self.results.benchmark = {
            name: condense_benchmark(
                read_json(out / f'{name}.json'),
                (out / f'{name}.md').read_text(encoding='utf-8'),
            )
            for name in runs
        }
