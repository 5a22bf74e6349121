"""Fixtures shared by the test modules, and the order they run in."""

import os

import pytest
import torch
from mmengine.logging import MMLogger
from mmengine.registry import DefaultScope
from mmengine.visualization import Visualizer

if os.environ.get('PYTEST_XDIST_WORKER'):
    # Two workers share two cores: a second OpenMP thread per worker only
    # waits (tests that need more set it themselves).
    torch.set_num_threads(1)

#: The longest test file (the --quick demo, minutes) starts first, so that
#: the other worker runs the rest of the suite beside it.
FIRST = 'test_demo.py'


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name != FIRST)


@pytest.fixture(scope='module')
def one_thread():
    """Tiny models on a busy 2-core machine: extra OpenMP threads only wait
    for each other (10x slower here)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def visualizer_classes(cls):
    """``cls`` and its subclasses (each keeps its own instances)."""
    return [cls] + [
        sub
        for child in cls.__subclasses__()
        for sub in visualizer_classes(child)
    ]


@pytest.fixture(autouse=True)
def scopes_and_loggers_stay_in_their_test():
    """MMEngine's default scope and loggers are global instances: a scope a
    test left current would decide what later tests build (whichever test
    ran before), and a runner built in the same second as an earlier test's
    from a config of the same name would reuse that test's logger, whose
    handler writes to its captured (now closed) stream, or that test's
    visualizer, whose files are in its (now removed) work dir."""

    def kinds():  # toolboxes' visualizers may be imported by the test
        return [DefaultScope, MMLogger, *visualizer_classes(Visualizer)]

    known = {kind: set(kind._instance_dict) for kind in kinds()}
    yield
    for kind in kinds():
        for name in set(kind._instance_dict) - known.get(kind, set()):
            del kind._instance_dict[name]
