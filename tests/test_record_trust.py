"""The record that travels with the weights is verified, never obeyed
(docs/advanced/checkpoint_record.md): every path that adopts a
record (``load_state_dict`` strict or not, mmdet's ``init_detector``,
mmseg's ``init_model``, the runner's ``load_from``, ``init_cfg``, the
tools' readers) checks it against its schema and against the tensors, and
a record never names what to load."""

import http.server
import json
import threading
from pathlib import Path

import pytest
import torch
from helpers import randomize_
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope

from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.record import (
    EXTRA_STATE_KEY,
    decode_record,
    encode_record,
)
from hetdpt_mm.errors import CheckpointError, UsageError
from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.pruning.width_checkpoint import prune_width_checkpoint
from hetdpt_mm.runner import build_runner

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / 'configs/demo'
#: The demo ViT's shapes (configs/demo): 6 blocks of width 96, 3 heads.
DEMO_ARCH = dict(
    arch=dict(embed_dims=96, num_layers=6, num_heads=3),
    img_size=32,
    patch_size=4,
)
SPEC = dict(attn_removed=[0], act_removed=[1])


def demo_backbone(**kwargs) -> HetDPTViT:
    return randomize_(HetDPTViT(**DEMO_ARCH, **kwargs)).eval()


def forged(state: dict, key: str = EXTRA_STATE_KEY, **changes) -> dict:
    """``state`` with its record at ``key`` changed (nested dicts merged
    one level deep)."""
    record = decode_record(state[key])
    for name, value in changes.items():
        if isinstance(value, dict) and isinstance(record.get(name), dict):
            record[name] = {**record[name], **value}
        else:
            record[name] = value
    return {**state, key: encode_record(record)}


def with_raw_record(
    state: dict, data: bytes, key: str = EXTRA_STATE_KEY
) -> dict:
    return {**state, key: torch.tensor(list(data), dtype=torch.uint8)}


def saved(path: Path, state: dict) -> str:
    torch.save(dict(state_dict=state), path)
    return str(path)


# ------------------------------------ a record that contradicts the tensors
def test_non_strict_loading_checks_the_record_against_the_tensors(tmp_path):
    """A record removing block 2's attention, whose tensors are there, is
    refused by ``load_state_dict(strict=False)``, naming the file."""
    source = demo_backbone(prune_spec=SPEC, merged=True)
    lying = forged(source.state_dict(), spec=dict(attn_removed=[0, 2]))
    for strict in (True, False):
        with pytest.raises(
            CheckpointError,
            match=r'the loaded state dict: .*removes \[0, 2\]',
        ):
            HetDPTViT(**DEMO_ARCH).load_state_dict(lying, strict=strict)
    path = saved(tmp_path / 'lying.pth', lying)
    from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file

    with pytest.raises(CheckpointError, match=f'{path}: '):
        HetDPTViT(**DEMO_ARCH).load_state_dict(
            load_checkpoint_file(path)['state_dict'], strict=False
        )
    with pytest.raises(CheckpointError, match=f'{path}: '):
        read_backbone_checkpoint(path)


def test_tensors_left_over_or_missing_are_refused():
    """Every tensor the record implies is there with its shape, and no
    other: a file without block 5's FFN, or with an extra tensor."""
    state = demo_backbone(prune_spec=SPEC, merged=True).state_dict()
    missing = {
        k: v for k, v in state.items() if not k.startswith('blocks.5.mlp.fc2')
    }
    extra = {**state, 'spare.weight': torch.zeros(2)}
    wrong = {**state, 'norm.weight': torch.zeros(95)}
    for bad, message in (
        (
            missing,
            'missing',
        ),
        (extra, r"not part of it \['spare.weight'\]"),
        (
            wrong,
            'norm.weight is \\(95,\\)',
        ),
    ):
        with pytest.raises(CheckpointError, match=message):
            HetDPTViT(**DEMO_ARCH).load_state_dict(bad, strict=False)


def demo_model(config: Path):
    cfg = Config.fromfile(config)
    cfg.model.backbone.update(prune_spec=SPEC, merged=True)
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return randomize_(MODELS.build(cfg.model))


@pytest.mark.parametrize('task', ['det', 'seg', 'load_from'])
def test_the_toolboxes_loading_paths_verify_the_record(
    task, tmp_path, one_thread
):
    """mmdet's init_detector, mmseg's init_model and the runner's load_from
    (MMEngine's non-strict loaders) refuse the lying record, naming the
    file, where they used to load a network without block 2's attention."""
    config = DEMO / (
        'upernet_hetdpt_demo.py' if task == 'seg' else 'detr_hetdpt_demo.py'
    )
    state = demo_model(config).state_dict()
    key = 'backbone.' + EXTRA_STATE_KEY
    path = saved(
        tmp_path / 'lying.pth',
        forged(state, key, spec=dict(attn_removed=[0, 2])),
    )
    message = f'{path}: .* removes \\[0, 2\\]'
    if task == 'det':
        from mmdet.apis import init_detector

        with pytest.raises(CheckpointError, match=message):
            init_detector(str(config), path, device='cpu')
    elif task == 'seg':
        from mmseg.apis import init_model

        with pytest.raises(CheckpointError, match=message):
            init_model(str(config), path, device='cpu')
    else:
        cfg = Config.fromfile(config)
        cfg.work_dir = str(tmp_path / 'work')
        cfg.load_from = path
        runner = build_runner(cfg)
        with pytest.raises(UsageError, match=f'cannot load {path}: {message}'):
            runner.load_or_resume()


# -------------------------------- the config's architecture is the record's
def test_a_configured_architecture_must_be_the_records():
    """``--cfg-options model.backbone.arch.num_heads=6`` on a 3-head
    checkpoint: shapes cannot show the heads; the record does."""
    state = demo_backbone().state_dict()
    six_heads = HetDPTViT(
        arch=dict(embed_dims=96, num_layers=6, num_heads=6),
        img_size=32,
        patch_size=4,
    )
    with pytest.raises(CheckpointError, match="'num_heads': 3"):
        six_heads.load_state_dict(state, strict=False)


# ------------------------------- the record never configures loading
class RecordingHandler(http.server.BaseHTTPRequestHandler):
    requests = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        RecordingHandler.requests.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback_server():
    server = http.server.HTTPServer(('127.0.0.1', 0), RecordingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    RecordingHandler.requests = []
    yield f'http://127.0.0.1:{server.server_address[1]}'
    server.shutdown()
    server.server_close()


def test_a_record_naming_a_url_or_a_file_is_refused(tmp_path, loopback_server):
    """``arch.pretrained=<url>`` and ``arch.init_cfg`` in a record: every
    reader refuses them before anything is fetched or read."""
    state = demo_backbone(prune_spec=SPEC, merged=True).state_dict()
    url = f'{loopback_server}/deit_base_patch16_224-b5f2ef4d.pth'
    for name, value in (
        ('pretrained', url),
        ('init_cfg', dict(type='Pretrained', checkpoint=url)),
        ('init_cfg', dict(type='Pretrained', checkpoint='/etc/hostname')),
    ):
        bad = forged(state, arch={name: value})
        path = saved(tmp_path / f'{name}.pth', bad)
        message = f'{path}: .*{name}.*not structural'

        with pytest.raises(CheckpointError, match=message):
            read_backbone_checkpoint(path)
        with pytest.raises(CheckpointError, match=message):
            prune_width_checkpoint(torch.load(path), source=path, ratio=0.25)
        with pytest.raises(CheckpointError, match='not structural'):
            HetDPTViT(**DEMO_ARCH).load_state_dict(bad, strict=False)
    assert RecordingHandler.requests == []


# ------------------------------------------ a corrupt record is an error
@pytest.mark.parametrize(
    'data, message',
    [
        (b'{"spec": ', 'corrupt HetDPT record'),
        (b'\xff\xfe', 'corrupt HetDPT record'),
        (b'[1, 2]', 'not a dict'),
        (b'[' * 200_000 + b']' * 200_000, 'nested deeper than 8'),
        (b'{"form": "merged", "form": "gated"}', 'given more than once'),
        (
            b'{"version": 2, "spec": {"depth": 1' + b'0' * 5000 + b'}}',
            'digits',
        ),
    ],
)
def test_a_corrupt_record_is_an_error_not_a_fallback(data, message, tmp_path):
    """``removed_attn_output='zero'`` in a record that cannot be read no
    longer loads as the default ``'norm'``: the file is refused."""
    state = demo_backbone(
        prune_spec=SPEC, merged=True, removed_attn_output='zero'
    ).state_dict()
    bad = with_raw_record(state, data)
    path = saved(tmp_path / 'corrupt.pth', bad)
    with pytest.raises(CheckpointError, match=message):
        read_backbone_checkpoint(path)
    with pytest.raises(CheckpointError, match=message):
        HetDPTViT(**DEMO_ARCH).load_state_dict(bad, strict=False)


@pytest.mark.parametrize(
    'changes, message',
    [
        (
            dict(semantics=dict(removed_attn_output=3)),
            'semantics',
        ),
        (
            dict(semantics=dict(removed_attn_output='nothing')),
            "removed_attn_output='nothing'",
        ),
        (dict(semantics=dict(colour='red')), 'colour'),
        (dict(arch=[1, 2]), 'arch'),
        (
            dict(
                arch=dict(
                    arch=dict(
                        embed_dims=96, num_layers=6, num_heads=3, init_cfg=1
                    )
                )
            ),
            'unknown arch keys',
        ),
        (dict(arch=dict(img_size=10**40)), 'Overflow'),
        (dict(spec=dict(depth=10**9)), 'spec.depth'),
        (dict(form='folded'), 'form'),
        (dict(family='../vit'), 'family'),
        (dict(loader='torch.load'), 'loader'),
        (dict(arch=dict(img_size=float('nan'))), 'NaN'),
    ],
)
def test_records_outside_the_schema_are_named(changes, message):
    state = demo_backbone(prune_spec=SPEC, merged=True).state_dict()
    record = decode_record(state[EXTRA_STATE_KEY])
    for name, value in changes.items():
        record[name] = (
            {**record[name], **value}
            if isinstance(value, dict) and isinstance(record.get(name), dict)
            else value
        )
    text = json.dumps(record).encode()
    with pytest.raises(CheckpointError, match=message):
        HetDPTViT(**DEMO_ARCH).load_state_dict(
            with_raw_record(state, text), strict=False
        )
