"""The demo's verdicts (hetdpt_demo/verdicts.py) on made-up measurements:
MAP's pick against the best split and the seed spread, the dense model
against its extra epochs, clipped predictions, and Fig. 8 read only at
measured token-reduced points."""

import pytest

from hetdpt_demo import verdicts


def results(splits, dense=90.0, points=(89.0,), candidates=None):
    """Measured splits as ``{(attn, act): [accuracy per seed]}``."""
    return dict(
        task=dict(chance=20.0),
        dense=dict(accuracy=dense),
        map=dict(
            pick=[2, 1],
            points=[dict(accuracy=str(a)) for a in points],
            candidates=candidates
            or [
                dict(n_attn=a, n_act=3 - a, predicted_accuracy=p)
                for a, p in ((0, 85.0), (1, 87.0), (2, 92.0), (3, 70.0))
            ],
        ),
        splits=[
            dict(counts=list(c), accuracy=dict(enumerate(v)))
            for c, v in splits.items()
        ],
    )


def test_spread_is_the_mean_and_half_the_range():
    assert verdicts.spread([1.0, 3.0, 8.0]) == [4.0, 3.5]
    assert verdicts.spread([5.0]) == [5.0, 0.0]


@pytest.mark.parametrize(
    'best_split, within',
    [([85.0, 86.0, 87.0], True), ([87.0, 88.0, 89.0], False)],
)
def test_maps_pick_is_read_against_the_best_split_and_the_spread(
    best_split, within
):
    measured = {
        (2, 1): [84.0, 85.0, 86.0],
        (0, 3): best_split,
        (3, 0): [40.0, 41.0, 42.0],
        (0, 0): [89.0, 90.0, 91.0],
    }
    v = verdicts.splits(results(measured))
    assert v['best'] == [0, 3] and not v['pick_is_best']
    assert v['gap'] == pytest.approx(best_split[1] - 85.0)
    assert v['pick_within_spread'] is within
    assert v['below_chance'] == []  # 41 is 21 points above chance
    # No removal: the dense model's own 90.0 within its spread.
    assert v['trained_to_end'] and v['extra_epochs_gain'] == 0.0
    assert v['points_above_dense'] == []


def test_extra_epochs_that_lift_the_dense_model_are_named():
    measured = {(2, 1): [88.0], (0, 3): [87.0], (0, 0): [92.0, 93.0]}
    v = verdicts.splits(results(measured, points=(89.0, 91.0)))
    assert v['pick_is_best'] and v['pick_within_spread']
    assert not v['trained_to_end']
    assert v['extra_epochs_gain'] == pytest.approx(2.5)
    assert [p['accuracy'] for p in v['points_above_dense']] == ['91.0']


def test_a_split_near_chance_and_predictions_above_dense_are_flagged():
    measured = {(2, 1): [80.0], (3, 0): [25.0], (0, 3): [86.0]}
    v = verdicts.splits(results(measured))
    assert v['below_chance'] == [[3, 0]]
    # 92 is above the dense 90: clipped to it, flagged.
    assert v['clipped']['2+1'] == 90.0 and v['above_dense'] == [[2, 1]]
    # Measured: 0+3 > 2+1 > 3+0; predicted 85 < 92 > 70: one pair of three.
    assert v['ordered_pairs'] == [2, 3]


def point(model, method, value, accuracy, throughput):
    return dict(
        model=model,
        method=method,
        value=value,
        accuracy=accuracy,
        throughput=throughput,
    )


def test_pareto_front_drops_beaten_points():
    a, b = point('d', 'tome', 1, 90, 100), point('d', 'tome', 2, 89, 120)
    c, d = point('d', 'tome', 3, 88, 110), point('d', 'tome', 4, 90, 100)
    assert verdicts.pareto_front([a, b, c]) == [a, b]
    assert len(verdicts.pareto_front([a, d])) == 2  # equal points stay


def test_fig8_reads_only_between_measured_token_reduced_points():
    points = [
        point('dense', 'none', 0, 92.0, 1000),
        point('dense', 'tome', 2, 91.0, 1200),
        point('dense', 'tome', 4, 87.0, 1600),
        point('hetdpt', 'none', 0, 90.0, 1500),
        point('hetdpt', 'tome', 2, 89.0, 1800),  # between 91 and 87
        point('hetdpt', 'tome', 4, 91.5, 1900),  # only below dense r=0
        point('hetdpt', 'gtp', 3, 85.0, 1400),  # slower than none
        point('hetdpt', 'gtp', 5, 80.0, 1700),  # faster than none
        point('dense', 'gtp', 3, 91.0, 1100),
    ]
    v = verdicts.fig8(points)
    tome, gtp = v['methods']['tome'], v['methods']['gtp']
    assert [(p['value'], p['ratio']) for p in tome['readings']] == [
        (2, pytest.approx(1800 / 1400))
    ]
    assert [p['value'] for p in tome['on_front']] == [4]
    # One panel per method, as the paper's: ToMe's faster, more accurate
    # points do not take GTP-ViT's off HetDPT's front in its own panel.
    assert gtp['readings'] == []
    assert [p['value'] for p in gtp['on_front']] == [5]
    assert [(p['method'], p['value']) for p in gtp['front']] == [
        ('none', 0),
        ('gtp', 5),
    ]
    assert verdicts.throughput_at([], 90.0) is None
