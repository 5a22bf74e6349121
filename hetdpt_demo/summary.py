"""The demo's last stage: the summary, its claims, the report."""

import json
import math
from datetime import datetime

from hetdpt_mm.fileio import atomic_write_text
from hetdpt_mm.visualization import write_image

from . import plots
from . import report as demo_report
from .claims import Summary, summarise
from .helpers import machine_description, validation_size
from .jobs import load_average
from .results import RunInfo, StageTime, to_json
from .settings import CLS_CLASSES, DemoError


class ReportStage:
    """The ``report`` stage of :class:`~.pipeline.Demo`."""

    def stage_report(self) -> None:
        summary = self.summary()
        data = dict(to_json(summary), verdicts=demo_report.verdicts(summary))
        if not all(map(math.isfinite, demo_report.all_numbers(data))):
            atomic_write_text(
                self.out('summary.json'), json.dumps(data, indent=1) + '\n'
            )
            raise DemoError(
                'the results hold non-finite numbers: see '
                f'{self.rel(self.out("summary.json"))}'
            )
        self.write_plots(summary)
        atomic_write_text(
            self.out('summary.json'), json.dumps(data, indent=1) + '\n'
        )
        atomic_write_text(
            self.out('report.md'), demo_report.format_report(summary)
        )
        self.results.headline = demo_report.headline(summary)

    def write_plots(self, summary: Summary) -> None:
        r = self.results
        removal_steps = [
            (p, speedup)
            for p, speedup in zip(r.map.points, summary.point_speedups)
            if p['step'] != '0'
        ]
        accuracy = dict(
            dense=r.dense.accuracy,
            pruned=r.prune.accuracy,
            merged=r.transfer.merged_accuracy,
        )
        write_image(
            self.out('accuracy_vs_speedup.png'),
            plots.plot_accuracy_vs_speedup(
                *zip(*removal_steps),
                [
                    dict(
                        name=name,
                        accuracy=accuracy[name],
                        speedup=r.benchmark['demo'].models[name].speedup,
                    )
                    for name in ('dense', 'pruned', 'merged')
                ],
            ),
        )
        write_image(
            self.out('score_grads.png'),
            plots.plot_score_grads(r.prune.score_grads, r.prune.decisions),
        )
        write_image(
            self.out('recovery.png'),
            plots.plot_recovery(r.recovery, r.dense.accuracy),
        )
        write_image(
            self.out('comparison.png'),
            plots.plot_split_comparison(summary.splits, r.dense.accuracy),
        )
        if r.tome is not None:
            write_image(self.out('tome.png'), plots.plot_tome(r.tome.points))
            write_image(
                self.out('fig8.png'),
                plots.plot_fig8(r.tome.curves, summary.tome.fig8),
            )
        write_image(
            self.out('losses.png'),
            plots.plot_losses(
                {
                    'DETR (toy COCO)': r.transfer.detr.loss_curve,
                    'UperNet (toy ADE20K)': r.transfer.upernet.loss_curve,
                }
            ),
        )

    def summary(self) -> Summary:
        seconds = self.state['seconds']
        cpu = self.state.get('cpu_seconds', {})
        run = RunInfo(
            mode=self.options.mode,
            command=self.options.command,
            machine=machine_description(),
            jobs=self.options.jobs,
            threads=self.options.threads or 'auto',
            job_threads=self.jobs.threads_used,
            load_before=self.state['load_before'],
            load_after=load_average(),
            finished_at=datetime.now().isoformat(timespec='seconds'),
            wall_seconds=sum(seconds.values()),
            stages=[
                StageTime(
                    name=name,
                    title=title,
                    seconds=seconds.get(name, 0.0),
                    cpu_seconds=cpu.get(name, 0.0),
                )
                for name, title in self.STAGES
                if name != 'report'
            ],
            job_seconds=self.jobs.durations,
            commands=self.jobs.commands,
        )
        return summarise(
            run,
            self.results,
            budget=self.settings.budget,
            classes=CLS_CLASSES,
            val_images=validation_size(self.data_root),
        )
