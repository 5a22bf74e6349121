"""hetdpt_mm's registries: :data:`FAMILIES`, where a record's family finds
the class that rebuilds it (each family also enters every installed
toolbox's MODELS), and the pruning hooks' selection policies and removal
schedules."""

import difflib
import importlib
import inspect
from typing import Callable, Dict, Iterable, Mapping, Optional, Set, Type

from mmengine.registry import Registry

from .errors import CheckpointError

#: Family name -> backbone class (a ``HetDPTBackbone`` subclass).
FAMILIES: Dict[str, Type] = {}
#: Toolbox -> {name: builder}: modules registered in that toolbox only.
TOOLBOX_MODULES: Dict[str, Dict[str, Callable]] = {}
#: Toolbox -> {name: builder}: registered only where that toolbox has no
#: module of the name (mmdet's ViTDet parts, which its wheel lacks).
TOOLBOX_FALLBACKS: Dict[str, Dict[str, Callable]] = {}


def get_family(name: str) -> Type:
    if name not in FAMILIES:
        raise CheckpointError(f'unknown backbone family {name!r}')
    return FAMILIES[name]


def recognising_family(state: Mapping) -> Optional[Type]:
    """The family whose tensors ``state`` holds (keys relative to the
    backbone), or ``None``."""
    return next(
        (cls for cls in FAMILIES.values() if cls.codec.recognizes(state)), None
    )


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean `X`?)`` for a mistyped ``name``, or ``''``."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f' (did you mean `{close[0]}`?)' if close else ''


def unexpected_keywords_message(
    component: str, unknown: Iterable[str], valid: Iterable[str]
) -> str:
    """Unknown keys of ``component`` with their closest valid key, or (none
    close) every valid key."""
    unknown, valid = sorted(unknown), sorted(valid)
    hints = [did_you_mean(name, valid) for name in unknown]
    message = f'{component} got unexpected keyword arguments {unknown}'
    if all(hints):
        return message + ''.join(hints)
    return f'{message}; it takes {valid}'


def constructor_keywords(owner: type) -> Set[str]:
    """The named arguments of the constructors along ``owner``'s MRO."""
    return {
        parameter.name
        for cls in owner.__mro__
        if '__init__' in vars(cls)
        for parameter in inspect.signature(cls.__init__).parameters.values()
        if parameter.kind
        in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    } - {'self'}


def named_arguments(cls: type) -> Optional[Set[str]]:
    """The keywords ``cls(...)`` takes, or ``None`` where its constructor
    takes any (``**kwargs``)."""
    parameters = inspect.signature(cls).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {
        p.name
        for p in parameters
        if p.kind is not inspect.Parameter.VAR_POSITIONAL
    }


def build_registered(cfg: dict, registry: Registry):
    """Build ``cfg`` from ``registry`` without MMEngine's default-scope
    switch, which warns under every toolbox's scope."""
    args = dict(cfg)
    name = args.pop('type', None)
    module = registry.get(name) if isinstance(name, str) else None
    if module is None:
        raise ValueError(
            f'{name!r} is not a registered {registry.name}; '
            f'use one of {sorted(registry.module_dict)}'
        )
    return module(**args)


SELECTION_POLICIES = Registry(
    'selection policy',
    build_func=build_registered,
    scope='hetdpt_mm',
    locations=['hetdpt_mm.pruning.selection'],
)
REMOVAL_SCHEDULES = Registry(
    'removal schedule',
    build_func=build_registered,
    scope='hetdpt_mm',
    locations=['hetdpt_mm.pruning.schedules'],
)


def toolbox_model_registries():
    """The MODELS registry of each installed toolbox, by toolbox name."""
    registries = {}
    for toolbox in ('mmpretrain', 'mmdet', 'mmseg'):
        try:
            registries[toolbox] = importlib.import_module(
                f'{toolbox}.registry'
            ).MODELS
        except ImportError:
            continue
    return registries


def register_all_modules():
    """Register every family, :data:`TOOLBOX_MODULES` and the missing
    :data:`TOOLBOX_FALLBACKS` in the installed toolboxes."""
    registries = toolbox_model_registries()
    for registry in registries.values():
        for backbone in FAMILIES.values():
            registry.register_module(module=backbone, force=True)
    for toolbox, modules in TOOLBOX_MODULES.items():
        if toolbox in registries:
            for name, builder in modules.items():
                registries[toolbox].register_module(
                    name=name, force=True, module=builder
                )
    for toolbox, modules in TOOLBOX_FALLBACKS.items():
        registry = registries.get(toolbox)
        for name, builder in modules.items():
            if registry is not None and name not in registry.module_dict:
                registry.register_module(name=name, module=builder)
