"""The demo's Fig. 8 reading (hetdpt_demo/fig8.py) on synthetic curves:
the monotone envelope, and the throughput ratio at equal accuracy and at
equal accuracy drop by interpolation along each envelope."""

import pytest

from hetdpt_demo.fig8 import envelope, fig8_method, throughput_at
from hetdpt_demo.results import CurvePoint


def curve(model, method, pairs):
    return [
        CurvePoint(model, method, f'p{i}', accuracy, throughput, 1)
        for i, (accuracy, throughput) in enumerate(pairs)
    ]


#: Dense 90 % at 1000 img/s down to 84 % at 2000; HetDPT 89 % at 1500 down
#: to 83 % at 3000; each with one noisy point another of its own beats.
DENSE = curve(
    'dense',
    'tome',
    [(90, 1000), (88, 1100), (89, 1200), (87, 1500), (84, 2000)],
)
HETDPT = curve(
    'hetdpt',
    'tome',
    [(89, 1500), (88, 1800), (85, 1700), (86, 2400), (83, 3000)],
)


def test_the_envelope_drops_beaten_points_and_duplicates():
    twin = CurvePoint('dense', 'tome', 'twin', 90, 1000, 1)
    front = envelope(DENSE + [twin])
    assert [(p.accuracy, p.throughput) for p in front] == [
        (90, 1000),
        (89, 1200),
        (87, 1500),
        (84, 2000),
    ]
    assert front[0] is DENSE[0]  # of two equal points, the first stays


def test_throughput_is_interpolated_along_the_envelope_only_inside_it():
    front = envelope(DENSE)
    assert throughput_at(front, 88) == pytest.approx(1350)
    assert throughput_at(front, 86) == pytest.approx(1500 + 500 / 3)
    assert throughput_at(front, 90) == 1000
    assert throughput_at(front, 90.5) is None
    assert throughput_at(front, 83.9) is None


def test_ratios_at_equal_accuracy_and_at_equal_drop():
    gtp = curve('dense', 'gtp', [(90, 5000)])  # another method: not read
    reading = fig8_method(
        'tome', DENSE + HETDPT + gtp, dict(dense=90, hetdpt=89)
    )
    assert [(row.level, row.ratio) for row in reading.equal_accuracy] == [
        (89, pytest.approx(1500 / 1200)),
        (88, pytest.approx(1800 / 1350)),
        (87, pytest.approx(2100 / 1500)),
        (86, pytest.approx(2400 / (1500 + 500 / 3))),
        (84, pytest.approx(2800 / 2000)),
    ]  # 90 % and 83 %: one curve does not reach them
    assert [(row.level, row.ratio) for row in reading.equal_drop] == [
        (0, 1.5),
        (1, 1.5),
        (3, 1.6),
        (6, 1.5),
    ]
    at = reading.at_paper_drop
    assert (at.level, at.dense_throughput, at.hetdpt_throughput) == (
        0.9,
        pytest.approx(1180),
        pytest.approx(1770),
    )
    assert at.ratio == pytest.approx(1.5)
    assert [p.setting for p in reading.envelopes['hetdpt']] == [
        'p0',
        'p1',
        'p3',
        'p4',
    ]


def test_curves_that_share_no_accuracy_give_no_ratio():
    far = curve('hetdpt', 'tome', [(50, 9000), (40, 9900)])
    reading = fig8_method('tome', DENSE + far, dict(dense=90, hetdpt=50))
    assert reading.equal_accuracy == []
    assert [row.level for row in reading.equal_drop] == [0, 1, 3, 6]
    assert reading.at_paper_drop is not None
