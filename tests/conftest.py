"""Fixtures shared by the test modules."""
import pytest
import torch


@pytest.fixture(scope='module')
def one_thread():
    """Tiny models on a busy 2-core machine: extra OpenMP threads only wait
    for each other (10x slower here)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
