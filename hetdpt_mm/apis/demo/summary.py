"""The demo's last stage: the summary, the claims it checks, the report."""
import json
import math
from datetime import datetime
from typing import Any, Dict, List, Tuple

from ... import visualization as plots
from ...fileio import atomic_write_text
from ...pruning import AnalyticCost
from ...spec import ACT, ATTN
from .. import demo_report
from ..demo_tome_report import tome_claims
from ..jobs import load_average
from .helpers import counts_label, machine_description, validation_size
from .settings import CLS_CLASSES, DemoError


class DemoSummary:
    """Stage 12 of :class:`~.pipeline.Demo`."""

    def stage_report(self) -> None:
        summary = self.summary()
        if not all(map(math.isfinite, demo_report.all_numbers(summary))):
            atomic_write_text(self.out('summary.json'),
                              json.dumps(summary, indent=1) + '\n')
            raise DemoError('the results hold non-finite numbers: see '
                            f'{self.rel(self.out("summary.json"))}')
        removal_steps = [(p, speedup) for p, speedup in zip(
            summary['map']['points'], summary['map']['point_speedups'])
            if p['step'] != '0']
        plots.write_image(
            self.out('accuracy_vs_speedup.png'),
            plots.plot_accuracy_vs_speedup(
                *zip(*removal_steps),
                [dict(name=name, accuracy=summary['classification'][name][
                    'accuracy'], speedup=summary['benchmark']['demo'][
                        'models'][name]['speedup'])
                 for name in ('dense', 'pruned', 'merged')]))
        claims = summary['claims']
        plots.write_image(self.out('score_grads.png'), plots.plot_score_grads(
            self.results['prune']['score_grads'],
            self.results['prune']['decisions']))
        plots.write_image(self.out('recovery.png'), plots.plot_recovery(
            claims['recovery'], summary['classification']['dense'][
                'accuracy']))
        plots.write_image(self.out('comparison.png'),
                          plots.plot_split_comparison(
                              claims['splits'], summary['classification'][
                                  'dense']['accuracy']))
        if not summary['tome'].get('skipped'):
            plots.write_image(self.out('tome.png'), plots.plot_tome(
                summary['tome']['points']))
        plots.write_image(self.out('losses.png'), plots.plot_losses(
            {'DETR (toy COCO)': self.results['detr']['loss_curve'],
             'UperNet (toy ADE20K)': self.results['upernet']['loss_curve']}))
        atomic_write_text(self.out('summary.json'),
                          json.dumps(summary, indent=1) + '\n')
        atomic_write_text(self.out('report.md'),
                          demo_report.format_report(summary))
        self.results['headline'] = demo_report.headline(summary)

    # ----------------------------------------------------------- summary
    def analytic_cost(self) -> AnalyticCost:
        """MACs of the demo ViT (from the dense checkpoint's meta) at its
        input size, by removed counts."""
        return AnalyticCost.from_build_args(self.results['dense']['arch'])

    def summary(self) -> Dict[str, Any]:
        r = self.results
        cost = self.analytic_cost()
        total = sum(self.state['seconds'].values())
        points = r['map']['points']
        return dict(
            mode=self.options.mode, command=self.options.command,
            machine=machine_description(), jobs=self.options.jobs,
            threads=self.options.threads or 'auto',
            job_threads=self.jobs.threads_used,
            load_before=self.state['load_before'],
            load_after=load_average(),
            finished_at=datetime.now().isoformat(timespec='seconds'),
            wall_seconds=total,
            stages=[dict(name=name, title=title,
                         seconds=self.state['seconds'].get(name, 0.0),
                         cpu_seconds=self.state.get('cpu_seconds', {}).get(
                             name, 0.0))
                    for name, title in self.STAGES if name != 'report'],
            job_seconds=self.jobs.durations,
            commands=self.jobs.commands,
            classification=dict(
                arch=r['dense']['arch'].get('arch'),
                patch_size=r['dense']['arch']['patch_size'],
                depth=r['dense']['depth'], budget=self.settings.budget,
                classes=CLS_CLASSES,
                val_images=validation_size(self.data_root),
                dense=dict(accuracy=r['dense']['accuracy'],
                           checkpoint=r['dense']['checkpoint']),
                pruned=dict(accuracy=r['prune']['accuracy'],
                            checkpoint=r['prune']['checkpoint']),
                merged=dict(accuracy=r['prune']['merged_accuracy'],
                            checkpoint=r['prune']['merged']),
                pruned_equals_merged=(r['prune']['accuracy'] ==
                                      r['prune']['merged_accuracy']),
                hook_output_identical=r['prune']['hook_output_identical'],
                spec=r['prune']['spec'], decisions=r['prune']['decisions']),
            map=dict(points=points, point_speedups=demo_report.map_speedups(
                points, cost), **{k: r['map'][k] for k in (
                    'fit', 'bounds', 'allocation', 'interval', 'degree',
                    'cv_mae', 'cv_rmse', 'n_attn', 'n_act', 'predicted')}),
            detr=r['detr'], upernet=r['upernet'], plus=r['plus'],
            benchmark=r['benchmark'], compare=r['compare'],
            claims=self.claims(cost), tome=r['tome'] if r['tome'].get(
                'skipped') else dict(r['tome'], claims=tome_claims(
                    r['tome'])))

    def claims(self, cost: AnalyticCost) -> Dict[str, Any]:
        """The numbers behind the report's claims section."""
        r = self.results
        types = {}
        for kind, curve in r['prune']['score_grads'].items():
            values = sorted(value for _, value in curve)
            types[kind] = dict(mean=sum(values) / len(values),
                               median=values[len(values) // 2],
                               count=len(values))
        speed = {counts_label(r['prune']['spec']['n_attn'],
                              r['prune']['spec']['n_act']):
                 r['benchmark']['demo']['models']['merged']}
        for counts in self.split_benchmark_runs():
            speed[counts] = r['benchmark'][f'split-{counts}']['models'][
                'merged']
        splits = []
        for name in ('MAP', 'attention_only', 'gelu_only', 'naive'):
            # The naive ranking may split the budget differently per seed:
            # one row per split, never a mean over different networks.
            groups: Dict[Tuple[int, int], List[Dict[str, Any]]] = {}
            for run in sorted((run for run in r['compare']['runs'].values()
                               if name in run['splits']),
                              key=lambda run: run['seed']):
                groups.setdefault(tuple(run['counts']), []).append(run)
            for (n_attn, n_act), runs in groups.items():
                splits.append(dict(
                    name=name if len(groups) == 1 else
                    f'{name} ({n_attn} + {n_act})', method=name,
                    n_attn=n_attn, n_act=n_act,
                    seeds=[run['seed'] for run in runs],
                    accuracies=[r['prune']['merged_accuracy']
                                if run.get('main') else run['accuracy']
                                for run in runs],
                    speedup=speed[counts_label(n_attn, n_act)]['speedup'],
                    macs_speedup=cost.speedup(n_attn, n_act)))
        for split in splits:
            split['mean'] = sum(split['accuracies']) / len(split[
                'accuracies'])
        ours = splits[0]
        seeds = f'mean over {len(ours["accuracies"])} seed(s)'
        rivals = [split for split in splits[1:]
                  if (split['n_attn'], split['n_act']) !=
                  (ours['n_attn'], ours['n_act'])]
        best = max(rivals, key=lambda split: split['mean'], default=None)
        if best is None:
            verdict = (f'Every split of this budget is MAP\'s own '
                       f'({ours["n_attn"]} + {ours["n_act"]}): nothing to '
                       'compare.')
        elif ours['mean'] > best['mean']:
            verdict = (f'**MAP\'s split is the most accurate** '
                       f'({ours["mean"]:.2f} % against at best '
                       f'{best["mean"]:.2f} % for the other splits, '
                       f'{seeds}).')
        elif ours['mean'] < best['mean']:
            verdict = (f'**MAP\'s split is not the most accurate here**: '
                       f'{best["name"]} reaches {best["mean"]:.2f} % against '
                       f'its {ours["mean"]:.2f} % ({seeds}).')
        else:
            # A tie in accuracy is decided by measured speed.
            tied = [split for split in rivals
                    if split['mean'] == ours['mean']]
            fastest = max(tied, key=lambda split: split['speedup'])
            verdict = (f'**No split is more accurate: {ours["name"]} ties '
                       f'with {", ".join(split["name"] for split in tied)} '
                       f'at {ours["mean"]:.2f} %** ({seeds}); ' + (
                           f'at equal accuracy {fastest["name"]} '
                           f'({fastest["n_attn"]} + {fastest["n_act"]}) is '
                           f'faster ({fastest["speedup"]:.2f}x against '
                           f'{ours["speedup"]:.2f}x), so on this task MAP\'s '
                           'split does not win.'
                           if fastest['speedup'] > ours['speedup'] else
                           'MAP\'s split is at least as fast.'))
        own = [split['name'] for split in splits[1:] if split not in rivals]
        if own:
            verdict += (f' ({", ".join(own)} removes MAP\'s own counts here: '
                        'the same split, not a rival.)')
        return dict(score_grads=dict(
            types=types, ratio=types[ACT]['mean'] / types[ATTN]['mean']),
            recovery=r['recovery'], splits=splits, verdict=verdict)
