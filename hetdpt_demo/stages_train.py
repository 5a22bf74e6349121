"""The demo's stages up to the compared pruning runs (1-7): data, dense
training, MAP points, recovery, the MAP fit, pruning, the naive split."""

import csv
import io
from pathlib import Path
from typing import List, Sequence

from mmengine.config import Config

from hetdpt_mm.checkpoint.reader import (
    read_backbone_checkpoint,
)
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.fileio import atomic_write_text
from hetdpt_mm.hooks.map_collect_hook import POINT_COLUMNS
from hetdpt_mm.hooks.prune_hook import STATE_KEY as PRUNE_STATE
from hetdpt_mm.pruning import MAPFit, load_points, rank_across_types
from hetdpt_mm.pruning.map import load_allocation
from hetdpt_mm.spec import ACT, ATTN, PruneSpec

from .claims import counts_label
from .data import make_all
from .helpers import (
    classifier_schedule_options,
    last_accuracy,
    last_checkpoint,
    read_json,
    scalar_curve,
    train_scalars,
    val_records,
)
from .jobs import Job
from .results import (
    CompareResult,
    CompareRun,
    DenseResult,
    MapFitResult,
    MapPoints,
    NaiveSplit,
    PruneResult,
    RecoveryRun,
)
from .settings import DENSE_CONFIG, MAP_CONFIG, MAP_SCHEDULES, PRUNE_CONFIG


class TrainingStages:
    """Stages 1-7 of :class:`~.pipeline.Demo`."""

    # ------------------------------------------------------------ stages
    def stage_data(self) -> None:
        paths = make_all(self.data_root)
        self.logger.info(
            'demo datasets: '
            + ', '.join(
                f'{name} {self.rel(path)}' for name, path in paths.items()
            )
        )

    def stage_dense(self) -> None:
        s = self.settings
        work = self.rel(self.out('vit-demo_digits'))
        options = self.data_options('cls') + classifier_schedule_options(
            s.dense_epochs, s.dense_train_images
        )
        self.jobs.run_lanes(
            [
                [
                    Job(
                        'dense-train',
                        self.train_argv(DENSE_CONFIG, work, options),
                    )
                ]
            ]
        )
        checkpoint = last_checkpoint(self.out('vit-demo_digits'))
        record = read_backbone_checkpoint(checkpoint, mmap=True).record
        # The last validation is of the last checkpoint, on the test split.
        self.results.dense = DenseResult(
            checkpoint=self.rel(checkpoint),
            arch=record.arch,
            depth=record.spec.depth,
            accuracy=last_accuracy(self.out('vit-demo_digits')),
        )

    def stage_map(self) -> None:
        s = self.settings
        dense = self.results.dense
        jobs = {}
        for schedule in MAP_SCHEDULES:
            steps = s.map_steps[schedule]
            name = f'map-{schedule}'
            config = self.hook_config(
                name,
                MAP_CONFIG,
                'MAPCollectHook',
                dict(
                    schedule=schedule,
                    interval=s.map_interval,
                    max_removed=steps,
                    calib_images=s.map_calib_images,
                ),
            )
            options = [
                f'load_from={dense.checkpoint}',
                f'train_cfg.max_epochs={steps * s.map_interval}',
                f'train_dataloader.sampler.subset={s.map_subset}',
                f'optim_wrapper.optimizer.lr={s.map_lr}',
            ] + self.data_options('cls')
            jobs[schedule] = Job(
                name,
                self.train_argv(
                    config, self.rel(self.out('map', schedule)), options
                ),
            )
        self.jobs.run_lanes([[jobs[name]] for name in MAP_SCHEDULES])
        # One points file: the starting (dense) point once, then every
        # removal step of every schedule.
        rows = []
        for schedule in MAP_SCHEDULES:
            with open(
                self.out('map', schedule, 'map_points.csv'), encoding='utf-8'
            ) as file:
                rows += [
                    row
                    for row in csv.DictReader(file)
                    if not (rows and row['step'] == '0')
                ]
        text = io.StringIO()
        writer = csv.DictWriter(
            text, fieldnames=POINT_COLUMNS, lineterminator='\n'
        )
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.out('map', 'map_points.csv'), text.getvalue())
        load_points(self.out('map', 'map_points.csv'), depth=dense.depth)
        self.results.map = MapPoints(points=rows, interval=s.map_interval)
        self.logger.info(
            f'{len(rows)} MAP points in '
            f'{self.rel(self.out("map", "map_points.csv"))}'
        )

    def stage_recovery(self) -> None:
        """Recovery asymmetry (docs/method.md §2): remove from the dense model
        the one attention layer, or the one GELU, that the MAP schedules
        removed first (the TE score's choice); validate at once
        (``--validate-first``), then fine-tune ``recovery_epochs`` epochs,
        validating after each."""
        s = self.settings
        depth = self.results.dense.depth
        prune_lr = Config.fromfile(
            self.repo / PRUNE_CONFIG
        ).optim_wrapper.optimizer.lr
        lanes, runs = [], {}
        for kind in (ATTN, ACT):
            first = next(
                p
                for p in self.results.map.points
                if p['schedule'] == kind and p['step'] == '1'
            )
            block = int(first[f'removed_{kind}'])
            spec = PruneSpec(depth, **{f'{kind}_removed': [block]})
            work = self.out('recovery', kind)
            start = self.rel(work / 'start.pth')
            # Built from the pruned start (its record gives the structure),
            # fine-tuned as the prune runs fine-tune: their learning rate,
            # pos_embed at 1x (the dense 1e-3 cost more in its warm-up epoch
            # than the removal did).
            options = [
                'model.backbone.init_cfg.type=Pretrained',
                f'model.backbone.init_cfg.checkpoint={start}',
                f'load_from={start}',
                f'optim_wrapper.optimizer.lr={prune_lr}',
                'optim_wrapper.paramwise_cfg.custom_keys.pos_embed.'
                'lr_mult=1.0',
                f'train_cfg.max_epochs={s.recovery_epochs}',
                'train_cfg.val_interval=1',
            ] + self.data_options('cls')
            if s.prune_train_images is not None:
                options.append(
                    f'train_dataloader.dataset.indices={s.prune_train_images}'
                )
            lanes.append(
                [
                    Job(
                        f'recovery-{kind}-remove',
                        [
                            'tools/merge_ckpt.py',
                            self.results.dense.checkpoint,
                            start,
                            '--spec',
                            spec.to_json(),
                            '--form',
                            'pruned',
                            '--force',
                        ],
                        in_process=True,
                    ),
                    Job(
                        f'recovery-{kind}-train',
                        self.train_argv(
                            DENSE_CONFIG,
                            self.rel(work),
                            options,
                            validate_first=True,
                        ),
                    ),
                ]
            )
            runs[kind] = dict(block=block, work=work)
        self.jobs.run_lanes(lanes)
        self.results.recovery = {}
        for kind, run in runs.items():
            at_once, *after_epochs = [
                record['accuracy/top1'] for record in val_records(run['work'])
            ]
            self.results.recovery[kind] = RecoveryRun(
                block=run['block'], at_once=at_once, after_epochs=after_epochs
            )

    def stage_fit(self) -> None:
        depth = self.results.dense.depth
        fit_path = self.out('map', 'map_fit.json')
        allocation_path = self.out('map', 'map_allocation.json')
        self.jobs.run_lanes(
            [
                [
                    Job(
                        'fit-map',
                        [
                            'tools/fit_map.py',
                            self.rel(self.out('map', 'map_points.csv')),
                            '--depth',
                            str(depth),
                            '--budget',
                            str(self.settings.budget),
                            '--bounds',
                            'full',
                            '--plot',
                            self.rel(self.out('map', 'map_fit.png')),
                            '--save-fit',
                            self.rel(fit_path),
                            '--save-allocation',
                            self.rel(allocation_path),
                            '--force',
                        ],
                        show_all=True,
                        in_process=True,
                    )
                ]
            ]
        )
        fit = MAPFit.from_dict(read_json(fit_path))
        allocation = load_allocation(allocation_path, 'full')
        self.results.fit = MapFitResult(
            fit=fit.to_dict(),
            bounds='full',
            fit_path=self.rel(fit_path),
            allocation=allocation.to_dict(),
        )

    def prune_job(
        self, name: str, counts: Sequence[int], seed: int, work: Path
    ) -> Job:
        """A ``HetDPTPruneHook`` run from the dense model removing
        ``counts`` = (attention, GELU) layers, with the demo's fine-tuning
        and seed ``seed``; it logs the gate-score gradients."""
        s = self.settings
        config = self.hook_config(
            name,
            PRUNE_CONFIG,
            'HetDPTPruneHook',
            dict(
                counts=dict(attn=counts[0], act=counts[1]),
                log_score_grads=True,
            ),
            unset=('map_points', 'map_fit', 'budget'),
        )
        options = [
            f'load_from={self.results.dense.checkpoint}',
            f'randomness.seed={seed}',
        ]
        options += classifier_schedule_options(
            s.prune_epochs, s.prune_train_images
        )
        options += self.data_options('cls')
        return Job(name, self.train_argv(config, self.rel(work), options))

    def compare_lane(self, key: str) -> List[Job]:
        """Prune and merge (the run's MergeCheckpointHook) one compared run
        (not the main one: the later stages handle that); its accuracy is
        its last validation, gates closed: the merged model's function (the
        main run checks that merging changes no prediction)."""
        run = self.results.compare.runs[key]
        work = self.out('compare', key)
        run.merged = self.rel(work / f'{Path(PRUNE_CONFIG).stem}_merged.pth')
        run.work = self.rel(work)
        return [self.prune_job(f'compare-{key}', run.counts, run.seed, work)]

    def add_compare_run(
        self, split: str, counts: Sequence[int], seed: int
    ) -> str:
        """Register ``split`` (a name) at ``counts`` for ``seed``; splits
        with the same counts share one run.  Returns the run's key."""
        runs = self.results.compare.runs
        key = f'{counts_label(*counts)}_seed{seed}'
        runs.setdefault(
            key, CompareRun(counts=list(counts), seed=seed, splits=[])
        )
        runs[key].splits.append(split)
        return key

    def stage_prune(self) -> None:
        """The MAP split (the main run: merged, transferred, benchmarked by
        the later stages) beside the single-type splits of the same budget,
        each with the same fine-tuning, once per seed."""
        s = self.settings
        best = self.results.fit.allocation['best']
        counts = dict(
            MAP=(best['n_attn'], best['n_act']),
            attention_only=(s.budget, 0),
            gelu_only=(0, s.budget),
        )
        self.results.compare = CompareResult(
            runs={}, naive={}, seeds=list(s.seeds)
        )
        main_key = None
        for seed in s.seeds:
            for name, value in counts.items():
                key = self.add_compare_run(name, value, seed)
                if main_key is None:
                    main_key = key
        work = self.out('vit-demo_digits_hetdpt')
        main = self.results.compare.runs[main_key]
        main.main, main.work = True, self.rel(work)
        lanes = [
            [self.prune_job('prune-train', counts['MAP'], s.seeds[0], work)]
        ]
        lanes += [
            self.compare_lane(key)
            for key in self.results.compare.runs
            if key != main_key
        ]
        self.jobs.run_lanes(lanes)
        checkpoint = last_checkpoint(work)
        loaded = load_checkpoint_file(checkpoint, mmap=True)
        spec = read_backbone_checkpoint(loaded, checkpoint).record.spec
        self.results.prune = PruneResult(
            checkpoint=self.rel(checkpoint),
            # The run's last validation: the last checkpoint, gates closed.
            accuracy=last_accuracy(work),
            hook_merged=self.rel(work / 'vit-demo_digits_hetdpt_merged.pth'),
            spec=dict(spec.to_dict(), n_attn=spec.n_attn, n_act=spec.n_act),
            decisions=loaded['meta'][PRUNE_STATE]['decisions'],
            score_grads={
                kind: scalar_curve(train_scalars(work), f'score_grad_{kind}')
                for kind in (ATTN, ACT)
            },
        )
        self.read_compare_runs()

    def read_compare_runs(self) -> None:
        """Checkpoint, decisions and merged accuracy of the finished
        compared runs (the main one's accuracy comes with the merge)."""
        for run in self.results.compare.runs.values():
            if run.main or run.accuracy is not None:
                continue
            work = self.repo / run.work
            checkpoint = last_checkpoint(work)
            run.checkpoint = self.rel(checkpoint)
            run.decisions = load_checkpoint_file(checkpoint, mmap=True)[
                'meta'
            ][PRUNE_STATE]['decisions']
            run.accuracy = last_accuracy(work)

    def stage_compare(self) -> None:
        """The naive allocation HetDPT argues against: the budget's layers
        with the lowest raw gate scores, both types ranked together, read
        from the MAP run of the same seed when it closed its first layer
        (every run of a seed is identical until then); then pruned with the
        same fine-tuning as the other splits."""
        compare = self.results.compare
        runs = compare.runs
        new = []
        for seed in compare.seeds:
            source = next(
                run
                for run in runs.values()
                if 'MAP' in run.splits and run.seed == seed
            )
            first = (
                self.results.prune.decisions[0]
                if source.main
                else source.decisions[0]
            )
            removed = rank_across_types(
                first['gate_scores'], self.settings.budget
            )
            counts = (len(removed[ATTN]), len(removed[ACT]))
            compare.naive[str(seed)] = NaiveSplit(
                scores=first['gate_scores'],
                removed=removed,
                counts=list(counts),
            )
            key = self.add_compare_run('naive', counts, seed)
            if runs[key].accuracy is None and not runs[key].main:
                new.append(key)
        self.jobs.run_lanes([self.compare_lane(key) for key in new])
        self.read_compare_runs()
