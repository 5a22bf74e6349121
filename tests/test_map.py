"""Model Accuracy Predictor (MAP), allocation, latency-aware allocation and
the tools/fit_map.py command line."""

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, load_tool

from hetdpt_mm.pruning import (
    Allocation,
    AnalyticCost,
    MAPFit,
    MAPPoint,
    MeasuredCost,
    allocate,
    allocate_for_accuracy,
    allocate_for_speedup,
    evaluate_cost_candidates,
    fit_map,
    load_allocation,
    load_points,
    pareto_front,
    polynomial_terms,
    rank_across_types,
    smallest_budget_reaching,
)

PAPER_POINTS = REPO / 'tests' / 'data' / 'map_points_paper.csv'
TOOL = REPO / 'tools' / 'fit_map.py'


@pytest.fixture(scope='module')
def paper_fit():
    return fit_map(load_points(PAPER_POINTS))


def write(path, text):
    path.write_text(text)
    return path


# ---------------------------------------------------------------- fitting --


def test_exact_polynomial_is_recovered():
    true = dict(zip(polynomial_terms(2), [60.0, 12.0, 8.0, -3.0, 5.0, -2.0]))
    grid = np.linspace(0.5, 1.0, 5)
    points = [
        (a, t, sum(c * a**i * t**j for (i, j), c in true.items()))
        for a in grid
        for t in grid
    ]
    fit = fit_map(points, degrees=(1, 2, 3))
    by_degree = {s.degree: s for s in fit.scores}
    assert by_degree[2].cv_rmse < 1e-8 and by_degree[1].cv_rmse > 1e-3
    exact = fit_map(points, degrees=(2,))
    np.testing.assert_allclose(
        exact.coefficients, list(true.values()), atol=1e-8
    )
    assert exact.term_names == ['1', 'a', 't', 'a^2', 'a*t', 't^2']
    assert exact.predict(0.7, 0.9) == pytest.approx(
        sum(c * 0.7**i * 0.9**j for (i, j), c in true.items())
    )
    assert exact.predict(grid, grid[::-1]).shape == (5,)


def test_leave_two_out_matches_brute_force():
    rng = np.random.default_rng(0)
    a, t = rng.uniform(0.5, 1.0, (2, 7))
    y = 70 + 5 * a + 3 * t + rng.normal(0, 0.3, 7)
    fit = fit_map(list(zip(a, t, y)), degrees=(1,))
    # By hand: for point i, average its predictions from every fold {i, j}.
    predictions = []
    for i in range(7):
        fold_predictions = []
        for j in range(7):
            if j == i:
                continue
            train = [k for k in range(7) if k not in (i, j)]
            X = np.column_stack([np.ones(5), a[train], t[train]])
            theta = np.linalg.solve(X.T @ X, X.T @ y[train])
            fold_predictions.append(theta @ [1, a[i], t[i]])
        predictions.append(np.mean(fold_predictions))
    errors = np.array(predictions) - y
    assert fit.cv_rmse == pytest.approx(np.sqrt(np.mean(errors**2)))
    assert fit.cv_mae == pytest.approx(np.mean(np.abs(errors)))


def test_paper_points_choose_degree_two(paper_fit):
    assert len(paper_fit.points) == 16
    assert paper_fit.degree == 2
    table = {s.degree: s for s in paper_fit.scores}
    assert table[1].cv_rmse == pytest.approx(0.5405, abs=1e-4)
    assert table[2].cv_mae == pytest.approx(0.4066, abs=1e-4)
    assert table[2].cv_rmse == pytest.approx(0.4870, abs=1e-4)
    assert table[3].cv_rmse == pytest.approx(1.0926, abs=1e-4)
    assert table[3].rank_deficient_folds == 1
    assert table[4].skipped == '15 terms > 14 points per training fold'
    assert table[4].cv_rmse is None
    text = paper_fit.format_table()
    assert 'chosen (lowest CV RMSE)' in text and 'skipped: 15 terms' in text


def test_fit_round_trips_through_json(paper_fit):
    restored = MAPFit.from_dict(json.loads(json.dumps(paper_fit.to_dict())))
    assert restored == paper_fit
    assert restored.predict(0.8, 0.9) == paper_fit.predict(0.8, 0.9)
    with pytest.raises(ValueError, match='format'):
        MAPFit.from_dict({'format': 'other'})
    broken = paper_fit.to_dict()
    del broken['terms'][0]
    with pytest.raises(ValueError, match='terms do not match degree 2'):
        MAPFit.from_dict(broken)


def test_data_hull_flags_extrapolation(paper_fit):
    inside = paper_fit.in_data_hull(
        [0.9, 1.0, 11 / 12, 0.7, 0.6], [0.9, 7 / 12, 1.0, 0.7, 0.95]
    )
    assert inside.tolist() == [True, True, True, False, False]
    assert sorted(map(tuple, paper_fit.hull_vertices.tolist())) == [
        (0.58, 1.0),
        (0.75, 0.75),
        (1.0, 0.58),
        (1.0, 1.0),
    ]
    on_a_line = paper_fit.to_dict()
    on_a_line['points'] = [
        {'a': 1.0, 't': t, 'accuracy': 80.0} for t in (0.5, 0.7, 0.9)
    ]
    with pytest.raises(ValueError, match='one line'):
        MAPFit.from_dict(on_a_line)


def test_too_few_points_and_rank_deficiency():
    four = [(1.0, 1.0, 80), (0.9, 1.0, 79), (1.0, 0.9, 78), (0.9, 0.9, 77)]
    with pytest.raises(ValueError, match='needs 5 points'):
        fit_map(four)
    with pytest.raises(ValueError, match='degree 2 needs 8 points'):
        fit_map((four + four)[:7], degrees=(2, 3))
    one_line = [(1.0, t, 70 + 10 * t) for t in (0.5, 0.6, 0.7, 0.8, 0.9)]
    with pytest.raises(ValueError, match='rank-deficient'):
        fit_map(one_line, degrees=(1,))
    with pytest.raises(ValueError, match='got 4 distinct'):
        fit_map(four + four, degrees=(1,))  # repeats are one point each


def direct_leave_two_out(X, y):
    """Leave-2-out by one least-squares fit per fold (the definition)."""
    n = len(y)
    predictions, deficient = np.zeros(n), 0
    for i in range(n):
        for j in range(i + 1, n):
            train = np.ones(n, dtype=bool)
            train[[i, j]] = False
            theta, _, rank, _ = np.linalg.lstsq(X[train], y[train], rcond=None)
            deficient += rank < X.shape[1]
            predictions[[i, j]] += X[[i, j]] @ theta
    return predictions / (n - 1), deficient


@pytest.mark.parametrize('degree', [1, 2, 3])
def test_closed_form_leave_two_out_equals_one_fit_per_fold(degree):
    from hetdpt_mm.pruning.map.fit import _design_matrix, _leave_two_out

    points = load_points(PAPER_POINTS)
    a, t, y = np.array([(p.a, p.t, p.accuracy) for p in points]).T
    X = _design_matrix(a, t, polynomial_terms(degree))
    fast, fast_deficient = _leave_two_out(X, y)
    slow, slow_deficient = direct_leave_two_out(X, y)
    assert np.allclose(fast, slow, atol=1e-8, rtol=0)
    assert fast_deficient == slow_deficient  # 1 fold at degree 3


def test_many_points_are_fast_and_too_many_are_refused():
    rng = np.random.default_rng(0)
    a, t = rng.uniform(0.3, 1, (2, 2000))
    points = [
        MAPPoint(x, y, 60 + 20 * x + 15 * y - 10 * x * y) for x, y in zip(a, t)
    ]
    fit = fit_map(points, degrees=(1, 2))  # 2 million folds, ~1 s
    assert fit.degree == 2 and fit.cv_rmse < 1e-9
    more = points + [MAPPoint(0.25, 0.25, 70.0)]
    with pytest.raises(ValueError, match='2001 distinct'):
        fit_map(more, degrees=(1,))


def test_repeated_points_are_averaged(fit_map_tool, tmp_path, capsys):
    text = PAPER_POINTS.read_text()
    rows = text.splitlines()
    repeated = write(
        tmp_path / 'points.csv',
        '\n'.join(rows + ['1.00,1.00,81.60', '1.00,1.00,82.00']) + '\n',
    )
    fit = fit_map(load_points(repeated))
    assert len(fit.points) == 16
    assert MAPPoint(1.0, 1.0, pytest.approx(81.8)) in fit.points
    assert fit.coefficients == pytest.approx(
        fit_map(load_points(PAPER_POINTS)).coefficients, abs=1e-9
    )
    assert fit_map_tool.main([str(repeated), '--depth', '12']) == 0
    assert (
        '2 rows repeat the (a, t) of another row: their accuracies are '
        'averaged, 16 distinct points' in capsys.readouterr().out
    )


# ------------------------------------------------------------- allocation --


@pytest.mark.parametrize(
    'budget, bounds, expected, best',
    [
        (
            3,
            'full',
            [(0, 3, 79.178), (1, 2, 79.733), (2, 1, 79.967), (3, 0, 79.879)],
            (2, 1),
        ),
        (3, 'paper', [(1, 2, 79.733), (2, 1, 79.967)], (2, 1)),
        (
            8,
            'full',
            [
                (0, 8, 71.562),
                (1, 7, 72.640),
                (2, 6, 73.397),
                (3, 5, 73.832),
                (4, 4, 73.946),
                (5, 3, 73.738),
                (6, 2, 73.208),
                (7, 1, 72.356),
                (8, 0, 71.183),
            ],
            (4, 4),
        ),
        (
            8,
            'paper',
            [
                (1, 7, 72.640),
                (2, 6, 73.397),
                (3, 5, 73.832),
                (4, 4, 73.946),
                (5, 3, 73.738),
                (6, 2, 73.208),
                (7, 1, 72.356),
            ],
            (4, 4),
        ),
        (
            10,
            'full',
            [
                (0, 10, 67.377),
                (1, 9, 68.665),
                (2, 8, 69.631),
                (3, 7, 70.276),
                (4, 6, 70.599),
                (5, 5, 70.600),
                (6, 4, 70.279),
                (7, 3, 69.637),
                (8, 2, 68.673),
                (9, 1, 67.388),
                (10, 0, 65.780),
            ],
            (5, 5),
        ),
        (
            10,
            'paper',
            [
                (1, 9, 68.665),
                (2, 8, 69.631),
                (3, 7, 70.276),
                (4, 6, 70.599),
                (5, 5, 70.600),
                (6, 4, 70.279),
                (7, 3, 69.637),
                (8, 2, 68.673),
                (9, 1, 67.388),
            ],
            (5, 5),
        ),
    ],
)
def test_paper_allocations(paper_fit, budget, bounds, expected, best):
    allocation = allocate(paper_fit, budget, 12, bounds)
    lo, hi = {'full': (0, 12), 'paper': (1, 11)}[bounds]
    rows = [
        (c.n_attn, c.n_act, round(c.predicted_accuracy, 3))
        for c in allocation.candidates
    ]
    assert rows == expected
    for c in allocation.candidates:
        assert c.n_attn + c.n_act == budget and lo <= c.n_attn <= hi
        assert lo <= c.n_act <= hi
        assert (c.a, c.t) == pytest.approx(
            ((12 - c.n_attn) / 12, (12 - c.n_act) / 12)
        )
    assert (allocation.n_attn, allocation.n_act) == best
    assert allocation.best == max(
        allocation.candidates, key=lambda c: c.predicted_accuracy
    )
    # The paper's 16 points stop at a + t = 1.5: budgets 8 and 10 are
    # extrapolated everywhere, budget 3 nowhere.
    assert {c.extrapolated for c in allocation.candidates} == {budget > 3}
    assert '*' in allocation.format_table()


@pytest.mark.parametrize(
    'kwargs, message',
    [
        (dict(budget=25), 'budget 25'),
        (dict(budget=-1), 'budget -1'),
        (dict(budget=2.5), 'budget'),
        (dict(budget=0, bounds='paper'), 'budget 0'),
        (dict(budget=23, bounds='paper'), r'2\.\.22'),
        (dict(budget=4, bounds=(3, 2)), 'bounds'),
        (dict(budget=4, bounds='wide'), 'bounds'),
        (dict(budget=4, depth=0), 'depth must be 1..1024'),
    ],
)
def test_allocate_rejects_bad_requests(paper_fit, kwargs, message):
    kwargs = {'depth': 12, **kwargs}
    with pytest.raises(ValueError, match=message):
        allocate(paper_fit, **kwargs)


def test_explicit_bounds(paper_fit):
    allocation = allocate(paper_fit, 8, 12, bounds=(3, 5))
    assert [(c.n_attn, c.n_act) for c in allocation.candidates] == [
        (3, 5),
        (4, 4),
        (5, 3),
    ]


# ---------------------------------------------------------- latency-aware --


def test_analytic_cost_counts_macs():
    low = AnalyticCost.from_arch('deit-base', img_size=(224, 224))
    high = AnalyticCost.from_arch('deit-base', img_size=(800, 1216))
    assert (low.num_tokens, high.num_tokens) == (197, 3801)
    n, d = 197, 768
    assert low.attention_macs == 4 * n * d * d + 2 * n * n * d
    assert low.ffn_macs == 8 * n * d * d
    assert low.merged_ffn_macs == n * d * d
    patch_embed = 196 * 3 * 16 * 16 * d
    assert low.total(0, 0) == patch_embed + 12 * (
        low.attention_macs + low.ffn_macs
    )
    assert low.total(0, 0) / 1e9 == pytest.approx(17.56, abs=0.01)
    # Attention grows with N^2: it dominates at detection resolution, so
    # removing one attention is worth more there and merging one FFN less.
    assert low.attention_share == pytest.approx(0.3607, abs=1e-4)
    assert high.attention_share == pytest.approx(0.6347, abs=1e-4)
    assert low.speedup(1, 0) == pytest.approx(1.0308, abs=1e-4)
    assert high.speedup(1, 0) == pytest.approx(1.0556, abs=1e-4)
    assert low.speedup(0, 1) == pytest.approx(1.0486, abs=1e-4)
    assert high.speedup(0, 1) == pytest.approx(1.0273, abs=1e-4)
    # The authors' DeiT-B spec (5 + 5 removed); paper measures 1.58x.
    assert low.speedup(5, 5) == pytest.approx(1.615, abs=1e-3)
    with pytest.raises(ValueError, match='n_attn=13 is outside'):
        low.total(13, 0)
    with pytest.raises(ValueError, match='not divisible by num_heads'):
        AnalyticCost(embed_dim=100, num_heads=3)


@pytest.mark.parametrize(
    'img_size, expected',
    [
        ((224, 224), {1.3: (0, 5), 1.5: (2, 6), 1.8: (1, 9)}),
        ((800, 1216), {1.3: (4, 1), 1.5: (6, 1), 1.8: (8, 1)}),
    ],
)
def test_allocate_for_speedup(paper_fit, img_size, expected):
    cost = AnalyticCost.from_arch('deit-base', img_size=img_size)
    for target, pair in expected.items():
        result = allocate_for_speedup(paper_fit, 12, cost, target)
        assert (result.best.n_attn, result.best.n_act) == pair
        assert result.best.speedup >= target
        assert all(c.speedup >= target for c in result.feasible)
        assert result.best.predicted_accuracy == max(
            c.predicted_accuracy for c in result.feasible
        )
        assert len(result.candidates) == 13 * 13


def test_allocate_for_accuracy_and_infeasible_targets(paper_fit):
    cost = AnalyticCost.from_arch('deit-base')
    result = allocate_for_accuracy(paper_fit, 12, cost, 78.0)
    assert (result.best.n_attn, result.best.n_act) == (1, 3)
    assert result.best.speedup == pytest.approx(1.203, abs=1e-3)
    assert result.best.speedup == max(c.speedup for c in result.feasible)
    with pytest.raises(ValueError, match='the fastest is 11.6'):
        allocate_for_speedup(paper_fit, 12, cost, 15.0)
    with pytest.raises(ValueError, match='no allocation'):
        allocate_for_accuracy(paper_fit, 12, cost, 99.0)
    with pytest.raises(ValueError, match='depth 12'):
        allocate_for_speedup(paper_fit, 6, cost, 1.2)
    front = pareto_front(evaluate_cost_candidates(paper_fit, 12, cost))
    assert [c.speedup for c in front] == sorted(c.speedup for c in front)
    assert all(
        x.predicted_accuracy > y.predicted_accuracy
        for x, y in zip(front, front[1:])
    )


def test_smallest_budget_reaching(paper_fit):
    """The paper's procedure: the first budget whose MAP split is fast
    enough, so one layer fewer is not."""
    cost = AnalyticCost.from_arch('deit-base', img_size=(800, 1216))
    best = smallest_budget_reaching(paper_fit, 12, cost, 1.5)
    assert cost.speedup(best.n_attn, best.n_act) >= 1.5
    assert best == allocate(paper_fit, best.removed, 12).best
    shorter = allocate(paper_fit, best.removed - 1, 12).best
    assert cost.speedup(shorter.n_attn, shorter.n_act) < 1.5
    assert smallest_budget_reaching(paper_fit, 12, cost, 50.0) is None


def test_allocation_round_trips_through_json(paper_fit):
    allocation = allocate(paper_fit, 8, 12, 'paper')
    data = json.loads(json.dumps(allocation.to_dict()))
    assert Allocation.from_dict(data) == allocation
    assert (
        Allocation.from_dict(data).format_table() == allocation.format_table()
    )
    with pytest.raises(ValueError, match='malformed MAP allocation'):
        Allocation.from_dict(dict(data, best=dict(data['best'], n_act=9)))
    with pytest.raises(ValueError, match='malformed MAP allocation'):
        Allocation.from_dict(
            {key: value for key, value in data.items() if key != 'candidates'}
        )


def test_measured_cost(tmp_path):
    path = write(
        tmp_path / 'cost.json',
        json.dumps(
            {
                'dense_total': 100.0,
                'attn': 4.0,
                'ffn_saving': 3.0,
                'depth': 12,
                'device': 'H800, fp32, batch 64',
            }
        ),
    )
    cost = MeasuredCost.from_json(path)
    assert cost.total(2, 3) == 100 - 8 - 9
    assert cost.speedup(2, 3) == pytest.approx(100 / 83)
    with pytest.raises(ValueError, match='missing keys'):
        MeasuredCost.from_json(write(tmp_path / 'bad.json', '{"attn": 1}'))
    with pytest.raises(ValueError, match='more than dense_total'):
        MeasuredCost(dense_total=10, attn=1, ffn_saving=1, depth=12)
    with pytest.raises(FileNotFoundError, match='nope.json'):
        MeasuredCost.from_json(tmp_path / 'nope.json')


# ---------------------------------------------------------------- loading --


def test_loads_csv_and_json_forms(tmp_path):
    hook_csv = write(
        tmp_path / 'hook.csv',
        (
            'step,schedule,n_attn,n_act,a,t,accuracy,removed_attn,removed_act\n'
            '0,interleaved,0,0,1.0,1.0,81.8,,\n'
            '1,interleaved,1,0,0.9167,1.0,81.3,3,\n'
            '2,interleaved,1,1,0.92,0.92,80.3,3,7\n'
        ),
    )
    points = load_points(hook_csv, depth=12)
    assert points[2] == MAPPoint(a=11 / 12, t=11 / 12, accuracy=80.3)
    # Without depth the ratios are used as written.
    assert load_points(hook_csv)[2] == MAPPoint(0.92, 0.92, 80.3)
    listed = write(
        tmp_path / 'p.json', json.dumps([{'a': 1.0, 't': 0.5, 'acc': 70.0}])
    )
    assert load_points(listed) == [MAPPoint(1.0, 0.5, 70.0)]
    wrapped = write(
        tmp_path / 'w.json',
        json.dumps({'points': [{'n_attn': 3, 'n_act': 0, 'accuracy': 75}]}),
    )
    assert load_points(wrapped, depth=12) == [MAPPoint(0.75, 1.0, 75.0)]


@pytest.mark.parametrize(
    'name, text, depth, message',
    [
        ('empty.csv', '', None, 'empty.csv: file is empty'),
        ('header.csv', 'a,t,accuracy\n', None, 'no data rows'),
        (
            'cols.csv',
            'x,y,acc\n1,2,3\n',
            None,
            r"need \"accuracy\" .* found \['acc', 'x', 'y'\]",
        ),
        (
            'nan.csv',
            'a,t,accuracy\n1,1,80\n0.9,1,nan\n',
            None,
            r'nan.csv, row 2 \(line 3\): accuracy is nan',
        ),
        (
            'inf.csv',
            'a,t,accuracy\n1,1,inf\n',
            None,
            r'row 1 \(line 2\): accuracy is inf',
        ),
        (
            'ratio.csv',
            'a,t,accuracy\n1.2,1,80\n',
            None,
            r'ratio a=1.2 is outside \[0, 1\]',
        ),
        (
            'count.csv',
            'n_attn,n_act,accuracy\n13,0,80\n',
            12,
            r'n_attn=13 is outside \[0, 12\]',
        ),
        (
            'negative.csv',
            'n_attn,n_act,accuracy\n0,-1,80\n',
            12,
            r'n_act=-1 is outside \[0, 12\]',
        ),
        (
            'fraction.csv',
            'n_attn,n_act,accuracy\n1.5,0,80\n',
            12,
            'n_attn=1.5 is not a whole number',
        ),
        (
            'nodepth.csv',
            'n_attn,n_act,accuracy\n1,0,80\n',
            None,
            'removed counts need depth',
        ),
        (
            'text.csv',
            'a,t,accuracy\n1,abc,80\n',
            None,
            'column "t" value \'abc\' is not a number',
        ),
        (
            'missing.csv',
            'a,t,accuracy\n1,,80\n',
            None,
            'row 1 .*missing value for "t"',
        ),
        (
            'mismatch.csv',
            'n_attn,n_act,a,t,accuracy\n1,0,0.8,1,80\n',
            12,
            r'a=0.8 disagrees with n_attn=1 at depth 12 '
            r'\(which gives a=0.9167\)',
        ),
        ('bad.json', '[{"a": 1, ', None, 'bad.json: not valid JSON'),
        ('nolist.json', '{"rows": []}', None, 'need a list of point objects'),
        ('none.json', '[]', None, 'contains no points'),
        (
            'bool.json',
            '[{"a": true, "t": 1, "acc": 80}]',
            None,
            r'point 1: column "a" value True is not a number',
        ),
    ],
)
def test_bad_points_files(tmp_path, name, text, depth, message):
    with pytest.raises(ValueError, match=message):
        load_points(write(tmp_path / name, text), depth=depth)


def test_missing_points_file(tmp_path):
    """Issue 60 item 3: the error says what writes a points file and where
    the paper's points are."""
    with pytest.raises(FileNotFoundError, match='not found: .*absent.csv'):
        load_points(tmp_path / 'absent.csv')
    with pytest.raises(FileNotFoundError) as error:
        load_points(tmp_path / 'absent.csv')
    assert 'map-collect' in str(error.value)
    assert (REPO / 'tests/data/map_points_paper.csv').exists()
    assert 'tests/data/map_points_paper.csv' in str(error.value)


@pytest.mark.parametrize(
    'config', ['deit-b_prune-10l_in1k.py', 'deit-s_prune-10l_in1k.py']
)
def test_the_one_run_configs_run_on_the_shipped_points(config):
    """Issue 60 item 3: the one-run configs need no collection run first
    (the paper's points ship with the clone)."""
    from mmengine.config import Config

    cfg = Config.fromfile(REPO / 'configs/hetdpt' / config)
    assert len(load_points(cfg.custom_hooks[0].map_points)) > 10


# -------------------------------------------------------------------- CLI --


@pytest.fixture(scope='module')
def fit_map_tool():
    """tools/fit_map.py as a module, to run its main() in-process (a fresh
    interpreter per case would cost seconds each)."""
    return load_tool('fit_map')


def test_cli_end_to_end(tmp_path):
    plot, saved = tmp_path / 'out' / 'map.png', tmp_path / 'fit.json'
    split = tmp_path / 'allocation.json'
    result = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            'tests/data/map_points_paper.csv',
            '--depth',
            '12',
            '--budget',
            '8',
            '--bounds',
            'both',
            '--plot',
            str(plot),
            '--save-fit',
            str(saved),
            '--save-allocation',
            str(split),
            '--cost',
            'analytic',
            '--arch',
            'deit-base',
            '--img-size',
            '800',
            '1216',
            '--speedup',
            '1.5',
            '--min-accuracy',
            '78',
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert 'chosen degree 2: CV MAE 0.4066, CV RMSE 0.4870' in out
    assert out.count('best: remove 4 attention + 4 GELU layers') == 2
    assert 'bounds paper (each count in [1, 11])' in out
    assert '3801 tokens' in out
    assert plot.read_bytes().startswith(b'\x89PNG')
    assert MAPFit.from_dict(json.loads(saved.read_text())).degree == 2
    for bounds in ('full', 'paper'):
        allocation = load_allocation(split, bounds)
        assert (allocation.n_attn, allocation.n_act) == (4, 4)
        assert allocation.budget == 8
    assert [p.name for p in plot.parent.iterdir()] == ['map.png']


def test_cli_keeps_existing_output_without_force(
    fit_map_tool, tmp_path, capsys
):
    plot = write(tmp_path / 'map.png', 'old')
    args = [
        str(PAPER_POINTS),
        '--depth',
        '12',
        '--budget',
        '3',
        '--plot',
        str(plot),
    ]
    assert fit_map_tool.main(args) == 2
    refused = capsys.readouterr()
    assert refused.err.startswith('error: output ')
    assert '--force' in refused.err and refused.out == ''
    assert plot.read_text() == 'old'
    assert fit_map_tool.main(args + ['--force']) == 0
    assert plot.read_bytes().startswith(b'\x89PNG')
    assert [p.name for p in tmp_path.iterdir()] == ['map.png']


@pytest.mark.parametrize(
    'case, message',
    [
        ('nan points', 'row 17 (line 18): accuracy is nan'),
        ('plot over input', 'is the same file as input'),
        ('speedup without cost', '--speedup and --min-accuracy need --cost'),
        ('infeasible', 'no allocation reaches a 50x speedup'),
        ('bad budget', 'budget 30'),
        ('bad option', 'argument --depth: invalid int value'),
        ('mixed units', 'accuracies mix fractions (<= 1, e.g. '),
        (
            'huge accuracy',
            'row 17 (line 18): accuracy is 1e+308; it must be a percentage',
        ),
        ('huge depth', 'depth must be 1..1024, got 1000000000'),
    ],
)
def test_cli_writes_nothing_on_bad_input(
    fit_map_tool, tmp_path, capsys, case, message
):
    original = PAPER_POINTS.read_text() + {
        'nan points': '0.5,0.5,nan\n',
        'mixed units': '0.5,0.5,0.6\n',
        'huge accuracy': '0.5,0.5,1e308\n',
    }.get(case, '')
    points = write(tmp_path / 'points.csv', original)
    plot = points if case == 'plot over input' else tmp_path / 'map.png'
    depth = {'bad option': 'twelve', 'huge depth': '1000000000'}.get(
        case, '12'
    )
    args = [
        str(points),
        '--depth',
        depth,
        '--budget',
        '30' if case == 'bad budget' else '8',
        '--save-fit',
        str(tmp_path / 'fit.json'),
        '--plot',
        str(plot),
    ]
    if case == 'speedup without cost':
        args += ['--speedup', '1.5']
    if case == 'infeasible':
        args += [
            '--cost',
            'analytic',
            '--arch',
            'deit-tiny',
            '--speedup',
            '50',
        ]
    assert fit_map_tool.main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith('error: ') and message in captured.err
    assert captured.out == ''
    assert [p.name for p in tmp_path.iterdir()] == ['points.csv']
    assert points.read_text() == original


def test_rank_across_types_takes_the_lowest_raw_scores_of_both_types():
    scores = dict(attn=[0.02, -0.01, 0.03], act=[-0.5, 0.4, -0.01])
    # -0.01 twice: the tie goes to GELU.
    assert rank_across_types(scores, 2) == dict(attn=[], act=[0, 2])
    assert rank_across_types(scores, 3) == dict(attn=[1], act=[0, 2])
    assert rank_across_types(scores, 0) == dict(attn=[], act=[])
    with pytest.raises(ValueError, match=r'budget must be in 0..6, got 7'):
        rank_across_types(scores, 7)
