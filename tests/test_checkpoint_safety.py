"""Safe checkpoint loading (issues 8, 14): MMEngine's own checkpoints load
and resume on torch >= 2.6 with weights_only=True; nothing else is trusted,
from a local file or from any of MMEngine's remote schemes."""

import functools
import http.server
import os
import pickle
import re
import sys
import threading
import types
from collections import OrderedDict

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine import fileio
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.model import BaseModel
from mmengine.model.weight_init import PretrainedInit
from mmengine.runner import Runner
from mmengine.runner import checkpoint as mmengine_checkpoint
from torch.utils.data import Dataset

import hetdpt_mm.checkpoint.safe_load
from hetdpt_mm.checkpoint.safe_load import TRUST_ENV, load_checkpoint_file
from hetdpt_mm.errors import CheckpointError


class ToyModel(BaseModel):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, inputs, labels, mode='tensor'):
        out = self.linear(inputs).squeeze(1)
        if mode == 'loss':
            return dict(loss=((out - labels) ** 2).mean())
        return out


class ToyData(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        return dict(
            inputs=torch.tensor([float(index), 1.0]),
            labels=torch.tensor(float(index % 2)),
        )


def toy_runner(work_dir, max_epochs, resume=False, load_from=None):
    """A stock MMEngine run: nothing of hetdpt_mm in it."""
    return Runner(
        model=ToyModel(),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=ToyData(),
            batch_size=4,
            sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='default_collate'),
        ),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        param_scheduler=dict(type='MultiStepLR', milestones=[1], end=100),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1)),
        resume=resume,
        load_from=load_from,
        randomness=dict(seed=0),
    )


def test_stock_mmengine_resume_works_without_disabling_safety(tmp_path):
    toy_runner(tmp_path, 1).train()
    path = tmp_path / 'epoch_1.pth'
    # The problem: torch's default (weights_only=True) rejects MMEngine's
    # HistoryBuffer / numpy objects.
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)
    checkpoint = load_checkpoint_file(path)
    assert isinstance(
        checkpoint['message_hub']['log_scalars']['train/loss'], HistoryBuffer
    )
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
def test_full_objects_need_an_explicit_opt_in(tmp_path, monkeypatch, payload):
    path = tmp_path / 'unsafe.pth'
    torch.save({'state_dict': {}, 'extra': payload}, path)
    with pytest.raises(
        CheckpointError, match='not safe to load.*HETDPT_TRUST_CHECKPOINTS=1'
    ):
        load_checkpoint_file(path)
    if isinstance(payload, Payload):
        assert load_checkpoint_file(path, trusted=True)['extra'] == os.getcwd()
        monkeypatch.setenv(TRUST_ENV, '1')
        assert load_checkpoint_file(path)['extra'] == os.getcwd()


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match='does not exist'):
        load_checkpoint_file(tmp_path / 'missing.pth')
    with pytest.raises(OSError, match='is a directory'):
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


# Remote checkpoints (issue 14): every scheme MMEngine can load from is
# fetched and then loaded by load_checkpoint_file, with the same opt-in.


def test_every_mmengine_scheme_is_loaded_safely():
    # Enumerates MMEngine's schemes: one it adds in a new version fails here.
    schemes = mmengine_checkpoint.CheckpointLoader._schemes
    assert schemes
    for prefix, loader in schemes.items():
        assert loader.__module__ == 'hetdpt_mm.checkpoint.safe_load', prefix
        assert (
            loader in hetdpt_mm.checkpoint.safe_load.SAFE_LOADERS.values()
        ), prefix


class MarkerPayload:
    """Runs code while unpickling: creates the directory ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def mmengine_style_checkpoint():
    return {
        'state_dict': OrderedDict(w=torch.ones(2)),
        'meta': {'epoch': np.int64(1)},
        'message_hub': {'loss': HistoryBuffer([1.0, 0.5], [1, 1])},
    }


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A loopback HTTP server for ``tmp_path/'served'`` and an empty torch.hub
    cache (``TORCH_HOME``); the server stops when the test ends."""
    root = tmp_path / 'served'
    root.mkdir()
    torch.save(
        {'state_dict': {}, 'extra': MarkerPayload(tmp_path / 'ran')},
        root / 'evil.pth',
    )
    torch.save(mmengine_style_checkpoint(), root / 'good.pth')
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    monkeypatch.delenv(TRUST_ENV, raising=False)
    server = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), functools.partial(QuietHandler, directory=root)
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield types.SimpleNamespace(
            url=f'http://127.0.0.1:{server.server_port}',
            root=root,
            marker=tmp_path / 'ran',
            cache=tmp_path / 'torch_home' / 'hub' / 'checkpoints',
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_http_checkpoint_with_code_is_refused(served, monkeypatch):
    url = f'{served.url}/evil.pth'
    with pytest.raises(
        CheckpointError,
        match=f'{url} \\(cached as .*evil.pth\\).*not safe.*TRUST_',
    ):
        mmengine_checkpoint._load_checkpoint(url, map_location='cpu')
    assert not served.marker.exists()
    # Downloaded where torch.hub.load_state_dict_from_url keeps it.
    assert (served.cache / 'evil.pth').read_bytes() == (
        served.root / 'evil.pth'
    ).read_bytes()
    # init_cfg=dict(type='Pretrained', checkpoint=URL) takes the same path.
    with pytest.raises(CheckpointError, match='not safe'):
        PretrainedInit(checkpoint=url)(nn.Linear(2, 1))
    assert not served.marker.exists()
    monkeypatch.setenv(TRUST_ENV, '1')
    mmengine_checkpoint._load_checkpoint(url)
    assert served.marker.is_dir()


def test_a_cached_copy_is_refused_too(served):
    # No server behind this address: the cached file must be used as is.
    url = 'http://127.0.0.1:9/models/evil.pth'
    served.cache.mkdir(parents=True)
    (served.cache / 'evil.pth').write_bytes(
        (served.root / 'evil.pth').read_bytes()
    )
    with pytest.raises(CheckpointError, match=f'{url} \\(cached'):
        mmengine_checkpoint._load_checkpoint(url)
    assert not served.marker.exists()


def test_benign_http_checkpoint_loads(served):
    model = nn.Module()
    model.w = nn.Parameter(torch.zeros(2))
    checkpoint = mmengine_checkpoint.load_checkpoint(
        model, f'{served.url}/good.pth', map_location='cpu'
    )
    assert torch.equal(model.w.data, torch.ones(2))
    assert isinstance(checkpoint['message_hub']['loss'], HistoryBuffer)


def test_unreadable_http_checkpoint_is_named(served):
    (served.root / 'noise.pth').write_bytes(b'<html>not found</html>' * 50)
    url = f'{served.url}/noise.pth'
    with pytest.raises(
        CheckpointError,
        match=(
            f'{url} \\(cached as .*noise.pth\\) is not a .*PyTorch checkpoint'
        ),
    ):
        mmengine_checkpoint._load_checkpoint(url)


@pytest.mark.parametrize(
    'scheme, url_map',
    [
        ('torchvision://', 'get_torchvision_models'),
        ('modelzoo://', 'get_torchvision_models'),
        ('open-mmlab://', 'get_external_models'),
        ('openmmlab://', 'get_external_models'),
        ('mmcls://', 'get_mmcls_models'),
    ],
)
def test_model_zoo_names_resolve_to_the_safe_http_loader(
    served, monkeypatch, scheme, url_map
):
    monkeypatch.setattr(
        mmengine_checkpoint,
        url_map,
        lambda: {
            'evil': f'{served.url}/evil.pth',
            'good': f'{served.url}/good.pth',
        },
    )
    with pytest.raises(
        CheckpointError, match=f'{served.url}/evil.pth \\(cached'
    ):
        mmengine_checkpoint._load_checkpoint(f'{scheme}evil')
    assert not served.marker.exists()
    good = mmengine_checkpoint._load_checkpoint(f'{scheme}good')
    if scheme == 'mmcls://':  # MMEngine keeps only backbone.* weights
        assert good == {'state_dict': OrderedDict()}
    else:
        assert torch.equal(good['state_dict']['w'], torch.ones(2))


def test_open_mmlab_name_of_a_local_file(served, monkeypatch):
    monkeypatch.setenv('MMENGINE_HOME', str(served.root))
    monkeypatch.setattr(
        mmengine_checkpoint,
        'get_external_models',
        lambda: {'evil': 'evil.pth'},
    )
    with pytest.raises(CheckpointError, match='open-mmlab://evil .*not safe'):
        mmengine_checkpoint._load_checkpoint('open-mmlab://evil')
    assert not served.marker.exists()


def test_storage_backends(served, monkeypatch):
    evil = (served.root / 'evil.pth').read_bytes()
    # Without their packages: the errors of MMEngine's own loaders.
    for url, theirs in (
        ('s3://bucket/evil.pth', mmengine_checkpoint.load_from_ceph),
        ('pavi://evil', mmengine_checkpoint.load_from_pavi),
    ):
        with pytest.raises(ImportError) as expected:
            theirs(url)
        with pytest.raises(ImportError, match=re.escape(str(expected.value))):
            mmengine_checkpoint._load_checkpoint(url)

    class Backend:
        def get(self, filepath):
            return evil

    monkeypatch.setattr(
        fileio, 'get_file_backend', lambda *args, **kwargs: Backend()
    )
    for url in ('s3://bucket/evil.pth', 'open-mmlab:petrel://evil.pth'):
        with pytest.raises(CheckpointError, match=f'{url}.*not safe'):
            mmengine_checkpoint._load_checkpoint(url)

    class Model:
        name = 'evil.pth'

        def download(self, path):
            with open(path, 'wb') as file:
                file.write(evil)

    modelcloud = types.SimpleNamespace(get=lambda name: Model())
    monkeypatch.setitem(
        sys.modules, 'pavi', types.SimpleNamespace(modelcloud=modelcloud)
    )
    with pytest.raises(CheckpointError, match='pavi://evil.*not safe'):
        mmengine_checkpoint._load_checkpoint('pavi://evil')
    assert not served.marker.exists()


@pytest.mark.parametrize('resume', [False, True])
def test_runner_load_from_url_is_refused(served, tmp_path, resume):
    runner = toy_runner(
        tmp_path / 'work', 1, resume=resume, load_from=f'{served.url}/evil.pth'
    )
    with pytest.raises(CheckpointError, match='not safe'):
        runner.train()
    assert not served.marker.exists()
