"""Fixtures shared by the test modules."""
import pytest
import torch
from mmengine.logging import MMLogger


@pytest.fixture(scope='module')
def one_thread():
    """Tiny models on a busy 2-core machine: extra OpenMP threads only wait
    for each other (10x slower here)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def runner_loggers_stay_in_their_test():
    """MMEngine keeps loggers by name, and a runner's name is its config's
    name and the second it was built: a runner built in the same second as
    an earlier test's would reuse that logger, whose handler writes to the
    earlier test's captured (now closed) stream."""
    known = set(MMLogger._instance_dict)
    yield
    for name in set(MMLogger._instance_dict) - known:
        del MMLogger._instance_dict[name]
