"""Safe checkpoint loading (issue 8): MMEngine's own checkpoints load and
resume on torch >= 2.6 with weights_only=True; nothing else is trusted."""
import os
import pickle

import pytest
import torch
import torch.nn as nn
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import Dataset

from hetdpt_mm.checkpoint import (TRUST_ENV, CheckpointError,
                                  load_checkpoint_file)


class ToyModel(BaseModel):

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, inputs, labels, mode='tensor'):
        out = self.linear(inputs).squeeze(1)
        if mode == 'loss':
            return dict(loss=((out - labels)**2).mean())
        return out


class ToyData(Dataset):

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return dict(inputs=torch.tensor([float(index), 1.0]),
                    labels=torch.tensor(float(index % 2)))


def toy_runner(work_dir, max_epochs, resume=False):
    """A stock MMEngine run: nothing of hetdpt_mm in it."""
    return Runner(
        model=ToyModel(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=ToyData(), batch_size=4,
                              sampler=dict(type='DefaultSampler',
                                           shuffle=False),
                              collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        param_scheduler=dict(type='MultiStepLR', milestones=[1], end=100),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook',
                                           interval=1)),
        resume=resume, randomness=dict(seed=0))


def test_stock_mmengine_resume_works_without_disabling_safety(tmp_path):
    toy_runner(tmp_path, 1).train()
    path = tmp_path / 'epoch_1.pth'
    # The problem: torch's default (weights_only=True) rejects MMEngine's
    # HistoryBuffer / numpy objects.
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)
    checkpoint = load_checkpoint_file(path)
    assert isinstance(checkpoint['message_hub']['log_scalars']['train/loss'],
                      HistoryBuffer)
    resumed = toy_runner(tmp_path, 2, resume=True)
    resumed.train()
    assert resumed.epoch == 2 and resumed.iter == 4
    # The scheduler continued from its saved step instead of restarting.
    assert resumed.param_schedulers[0].last_step == 2
    assert resumed.optim_wrapper.get_lr()['lr'][0] == pytest.approx(1e-3)
    assert len(resumed.message_hub.get_scalar('train/loss').data[0]) == 4


class Payload:

    def __reduce__(self):
        return (os.getcwd, ())


class SneakyGetattr:

    def __reduce__(self):
        return (getattr, (HistoryBuffer, '__init__'))


@pytest.mark.parametrize('payload', [Payload(), SneakyGetattr()])
def test_full_objects_need_an_explicit_opt_in(tmp_path, monkeypatch,
                                              payload):
    path = tmp_path / 'unsafe.pth'
    torch.save({'state_dict': {}, 'extra': payload}, path)
    with pytest.raises(CheckpointError, match='not safe to load.*'
                       'HETDPT_TRUST_CHECKPOINTS=1'):
        load_checkpoint_file(path)
    if isinstance(payload, Payload):
        assert load_checkpoint_file(path, trusted=True)['extra'] == \
            os.getcwd()
        monkeypatch.setenv(TRUST_ENV, '1')
        assert load_checkpoint_file(path)['extra'] == os.getcwd()


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match='does not exist'):
        load_checkpoint_file(tmp_path / 'missing.pth')
    with pytest.raises(CheckpointError, match='is a directory'):
        load_checkpoint_file(tmp_path)
    noise = tmp_path / 'noise.pth'
    noise.write_bytes(os.urandom(4096))
    with pytest.raises(CheckpointError, match='not a .*PyTorch checkpoint'):
        load_checkpoint_file(noise)
    good = tmp_path / 'good.pth'
    torch.save({'state_dict': {'w': torch.randn(64, 64)}}, good)
    truncated = tmp_path / 'truncated.pth'
    truncated.write_bytes(good.read_bytes()[:-300])
    with pytest.raises(CheckpointError, match='truncated or corrupt'):
        load_checkpoint_file(truncated)
    tensor = tmp_path / 'tensor.pth'
    torch.save(torch.zeros(3), tensor)
    with pytest.raises(CheckpointError, match='not a checkpoint dict'):
        load_checkpoint_file(tensor)
