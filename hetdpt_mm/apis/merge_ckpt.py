"""``tools/merge_ckpt.py``: convert a checkpoint's HetDPT backbone to the
merged (or pruned) form, validating everything before OUT is written
atomically (the conversion itself: :func:`hetdpt_mm.merge.merge_checkpoint`).
"""

import argparse
from typing import Optional

from ..checkpoint.safe_load import load_checkpoint_file
from ..fileio import check_output_path, checkpoint_writer, write_outputs
from ..merge import merge_checkpoint
from ..spec import read_json_value

__all__ = ['read_spec', 'run_merge']


def read_spec(value: Optional[str]):
    """``--spec``: inline JSON, or the path of a JSON file."""
    if value is None:
        return None
    spec = read_json_value(value, '--spec', file=True)
    if not isinstance(spec, dict):
        raise ValueError(f'--spec must be a JSON object, got {spec!r}')
    return spec


def run_merge(args: argparse.Namespace) -> None:
    """Write ``args.output`` from ``args.input`` with the options of
    ``tools/merge_ckpt.py``; an input that is already merged is written
    unchanged, in OUT's format."""
    inputs = [args.input]
    if args.spec is not None and not args.spec.lstrip().startswith('{'):
        inputs.append(args.spec)  # a spec file
    check_output_path(args.output, inputs, args.force)
    spec = read_spec(args.spec)
    checkpoint = load_checkpoint_file(args.input)
    merged, summary = merge_checkpoint(
        checkpoint,
        spec=spec,
        prefix=args.prefix,
        arch=args.arch,
        form=args.form,
        source=str(args.input),
    )
    write_outputs(
        {args.output: checkpoint_writer(merged, args.output)},
        exclusive=not args.force,
    )
    print(f'{args.input} -> {args.output}\n{summary.format()}')
