"""Sharded (FSDP) training for the HetDPT hooks: full parameters and state
dicts gathered on demand, scalar gate scores kept out of the sharding and
replicated, and gradient clipping over all shards (why each is needed:
docs/user_guides/dinov2.md, *Sharding (FSDP) for DINOv2-g*)."""

import contextlib
from typing import Dict, List

import torch
import torch.distributed as dist
import torch.nn as nn
from mmengine.model import is_model_wrapper
from mmengine.registry import MODEL_WRAPPERS, STRATEGIES
from mmengine.runner.checkpoint import weights_to_cpu

__all__ = [
    'unwrap_model',
    'is_fsdp',
    'full_params',
    'full_state_dict',
    'HetDPTFullyShardedDataParallel',
    'HetDPTFSDPStrategy',
]


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a DDP (or other MMEngine) wrapper."""
    return model.module if is_model_wrapper(model) else model


def _fsdp_class():
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    return FullyShardedDataParallel


def is_fsdp(model: nn.Module) -> bool:
    """Whether ``model`` is (or holds) an FSDP1-wrapped module."""
    fsdp = _fsdp_class()
    return fsdp is not None and any(
        isinstance(module, fsdp) for module in model.modules()
    )


def full_params(model: nn.Module):
    """Context in which every parameter of ``model`` is whole on every rank
    (read only: changes are not written back).  Every rank must enter it
    (it all-gathers); a no-op for an unsharded model."""
    if not is_fsdp(model):
        return contextlib.nullcontext()
    return _fsdp_class().summon_full_params(
        model, writeback=False, recurse=True
    )


def full_state_dict(model: nn.Module) -> Dict[str, torch.Tensor]:
    """The whole state dict of the (possibly wrapped) model on rank 0, on
    CPU, with the unwrapped module's keys; the other ranks get an empty
    dict.  Under FSDP it is gathered to rank 0: every rank must call
    this."""
    from mmengine.dist import is_main_process
    from mmengine.model import is_model_wrapper

    if not is_fsdp(model):
        if not is_main_process():
            return {}
        inner = model.module if is_model_wrapper(model) else model
        return weights_to_cpu(inner.state_dict())
    from torch.distributed.fsdp import FullStateDictConfig, StateDictType

    fsdp = _fsdp_class()
    with fsdp.state_dict_type(
        model,
        StateDictType.FULL_STATE_DICT,
        FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
    ):
        state = model.state_dict()
    return weights_to_cpu(state)


try:
    from mmengine.model.wrappers import MMFullyShardedDataParallel
except ImportError:  # pragma: no cover - torch without FSDP
    MMFullyShardedDataParallel = None


def scalar_parameters(module: nn.Module) -> List[nn.Parameter]:
    """The 0-dim parameters of ``module`` (the gate scores), which FSDP
    cannot shard."""
    return [p for p in module.parameters() if p.dim() == 0]


if MMFullyShardedDataParallel is not None:

    @MODEL_WRAPPERS.register_module()
    class HetDPTFullyShardedDataParallel(MMFullyShardedDataParallel):
        """``MMFullyShardedDataParallel`` for HetDPT backbones: the scalar
        gate scores stay whole on every rank (FSDP refuses to shard scalars)
        and their gradients are averaged over the ranks after each backward
        pass; on a machine without CUDA it runs on the CPU (FSDPStrategy
        passes ``device_id=LOCAL_RANK``, a CUDA device).

        Use it as ``strategy=dict(type='FSDPStrategy', model_wrapper=dict(
        type='HetDPTFullyShardedDataParallel', ...))``.
        """

        def __init__(self, module: nn.Module, *args, **kwargs):
            if not torch.cuda.is_available() and not isinstance(
                kwargs.get('device_id'), torch.device
            ):
                kwargs['device_id'] = torch.device('cpu')
            replicated = scalar_parameters(module)
            if replicated:
                if (
                    'ignored_parameters' in kwargs
                    or 'ignored_modules' in kwargs
                ):
                    raise ValueError('give ignored_states instead')
                kwargs['ignored_states'] = (
                    list(kwargs.get('ignored_states') or []) + replicated
                )
            super().__init__(module, *args, **kwargs)
            self._replicated = replicated
            self._reduce_queued = False
            for param in replicated:
                param.register_post_accumulate_grad_hook(
                    self._queue_replicated_reduce
                )

        def _queue_replicated_reduce(self, _param) -> None:
            if not self._reduce_queued:
                self._reduce_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(
                    self._reduce_replicated
                )

        def _reduce_replicated(self) -> None:
            """Average the replicated parameters' gradients over the ranks
            (every rank runs the same graph, so the same ones have one)."""
            self._reduce_queued = False
            grads = [p.grad for p in self._replicated if p.grad is not None]
            if (
                not grads
                or not dist.is_initialized()
                or dist.get_world_size() == 1
            ):
                return
            flat = torch.cat([g.reshape(1) for g in grads])
            dist.all_reduce(flat)
            flat /= dist.get_world_size()
            for grad, value in zip(grads, flat):
                grad.copy_(value)


try:
    from mmengine._strategy import FSDPStrategy
except ImportError:  # pragma: no cover - torch without FSDP
    FSDPStrategy = None

if FSDPStrategy is not None:

    @STRATEGIES.register_module()
    class HetDPTFSDPStrategy(FSDPStrategy):
        """MMEngine's ``FSDPStrategy`` with
        :class:`HetDPTFullyShardedDataParallel` as its default wrapper, and the
        optimizer state loaded as current PyTorch expects: MMEngine 0.10.7
        calls ``FSDP.optim_state_dict_to_load(state_dict, model,
        optimizer)``, the argument order of PyTorch 2.0, and a resume then
        fails with ``TypeError: unhashable type: 'dict'`` (PyTorch >= 2.1
        takes ``(model, optim, optim_state_dict)``)."""

        def __init__(self, *, model_wrapper=None, **kwargs):
            if model_wrapper is None:
                model_wrapper = dict(type='HetDPTFullyShardedDataParallel')
            super().__init__(model_wrapper=model_wrapper, **kwargs)

        def build_optim_wrapper(self, optim_wrapper, model=None):
            """MMEngine's, with clipping by norm through FSDP (see the
            module doc)."""
            built = super().build_optim_wrapper(optim_wrapper, model)
            wrappers = built.values() if hasattr(built, 'values') else [built]
            for wrapper in wrappers:
                if (
                    getattr(wrapper, 'clip_func', None)
                    is torch.nn.utils.clip_grad_norm_
                ):
                    self._check_clip_arguments(wrapper.clip_grad_kwargs)
                    wrapper.clip_func = self._clip_grad_norm
            return built

        @staticmethod
        def _check_clip_arguments(kwargs) -> None:
            unsupported = set(kwargs) - {'max_norm', 'norm_type'}
            if unsupported:
                raise ValueError(
                    f'clip_grad {sorted(unsupported)}: FSDP takes max_norm '
                    'and norm_type only'
                )

        def _clip_grad_norm(self, params, max_norm, norm_type=2.0):
            # FSDP clips every parameter of the model (those the optimizer
            # holds and have gradients, ``params``, are among them; the
            # others have none).  A collective: every rank steps.
            return self.model.clip_grad_norm_(max_norm, norm_type)

        def _optim_options(self):
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
            )

            full = self._is_full_state_dict()
            # Not cpu_offload when FSDP computes on the CPU: PyTorch's FSDP1
            # gathers every optimizer state of a flat parameter into one
            # reused buffer and, offloading, keeps ``value.cpu()`` of its
            # views, a copy from a GPU but the same memory on the CPU: each
            # saved ``exp_avg`` would be the ``exp_avg_sq`` gathered after
            # it.  Without offloading it clones.
            return StateDictOptions(
                full_state_dict=full,
                cpu_offload=full and torch.cuda.is_available(),
            )

        def optim_state_dict(self) -> dict:
            from torch.distributed.checkpoint.state_dict import (
                get_optimizer_state_dict,
            )

            return get_optimizer_state_dict(
                self.model,
                self.optim_wrapper.optimizer,
                options=self._optim_options(),
            )

        def load_optim_state_dict(self, state_dict: dict) -> None:
            from torch.distributed.checkpoint.state_dict import (
                set_optimizer_state_dict,
            )

            set_optimizer_state_dict(
                self.model,
                self.optim_wrapper.optimizer,
                state_dict,
                options=self._optim_options(),
            )
