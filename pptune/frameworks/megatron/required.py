"""Megatron-LM's required arguments: what validate_args asserts before any other rule.

megatron/training/arguments.py ``validate_args`` (core_v0.16.1, and unchanged at the
Megatron-LM HEAD read for this module):

    if args.num_layers is not None:
        assert args.encoder_num_layers is None, \\
            'cannot have both num-layers and encoder-num-layers specified'
        args.encoder_num_layers = args.num_layers
    else:
        assert args.encoder_num_layers is not None, \\
            'either num-layers or encoder-num-layers should be specified'
        args.num_layers = args.encoder_num_layers
    required_args = ['num_layers', 'hidden_size', 'num_attention_heads',
                     'max_position_embeddings']
    for req_arg in required_args:
        _check_arg_is_not_none(args, req_arg)   # '{arg} argument is None'

Each defaults to None (``--num-layers``, ``--hidden-size`` and ``--num-attention-heads``
come from TransformerConfig's fields with ``argparse_meta: {"default": None}``,
``--max-position-embeddings`` and ``--encoder-num-layers`` from argparse's
``default=None``), so a script without one stops on every rank before training. pptune's
own ``--model``, ``--hf-config`` or ``--profile`` price a model but never reach
Megatron-LM's command line, so they do not stand in for a missing flag. Not an error
where words out of sight may supply the flag (``supplied``:
flags.supplied_elsewhere): the script's own arguments, a checkpoint's, a --yaml-cfg,
or a settings file a launcher sources.
"""

from __future__ import annotations

from pptune.frameworks.megatron.flags import FlagReader

CITE = "megatron/training/arguments.py"
# validate_args' required arguments besides --num-layers (checked through
# --encoder-num-layers first), in its order; --max-position-embeddings has its own rule
# id, megatron-max-position (``positions``)
SIZES = ("--hidden-size", "--num-attention-heads")


def required(r: FlagReader, supplied: bool, comment_hint: str = "") -> None:
    """The ``megatron-required-arg`` error naming every one of --num-layers (unless
    --encoder-num-layers gives it), --hidden-size and --num-attention-heads the command
    does not give, with the assertion validate_args stops at and the ones after it;
    ``comment_hint``: where a comment line ended the command early (launch.py)."""
    flags = r.flags
    if flags.has("--num-layers") and flags.has("--encoder-num-layers"):
        r.ctx.refuse("megatron-required-arg",
                     "--num-layers and --encoder-num-layers are both given: Megatron-LM "
                     "validate_args asserts 'cannot have both num-layers and "
                     f"encoder-num-layers specified' ({CITE}); keep --num-layers")
    if supplied:
        return
    layers = not flags.has("--num-layers") and not flags.has("--encoder-num-layers")
    missing = ["--num-layers"] * layers + [name for name in SIZES if not flags.has(name)]
    if not missing:
        return
    asserts = (["'either num-layers or encoder-num-layers should be specified'"] * layers
               + [f"'{name[2:].replace('-', '_')} argument is None'"
                  for name in missing[layers:]])
    verb = "is" if len(missing) == 1 else "are"
    later = f" (then {', '.join(asserts[1:])}, once that is given)" if asserts[1:] else ""
    r.ctx.refuse("megatron-required-arg",
                 f"{', '.join(missing)} {verb} not given: Megatron-LM validate_args stops at "
                 f"{asserts[0]}{later} (its required arguments, {CITE}), on every rank "
                 "before training starts; add "
                 f"{', '.join(name + ' N' for name in missing)} (pptune's --model, "
                 f"--hf-config or --profile price a model but do not give Megatron-LM its "
                 f"flags){comment_hint}")


def positions(r: FlagReader, seq_len: int | None, supplied: bool,
              comment_hint: str = "") -> None:
    """validate_args asserts --max-position-embeddings is given (``required``'s fourth
    argument; not where ``supplied``) and >= --seq-length."""
    if not r.flags.has("--max-position-embeddings"):
        if not supplied:
            r.ctx.refuse("megatron-max-position",
                         "--max-position-embeddings is not given: Megatron-LM validate_args "
                         "asserts 'max_position_embeddings argument is None' (one of its "
                         f"required arguments, {CITE}); add "
                         f"--max-position-embeddings {seq_len or 'N'} (at least --seq-length)"
                         f"{comment_hint}")
        return
    value = r.number("--max-position-embeddings")
    if value is not None and seq_len is not None and value < seq_len:
        r.ctx.refuse("megatron-max-position",
                     f"--max-position-embeddings {value} is below --seq-length {seq_len}: "
                     f"Megatron-LM validate_args asserts 'max_position_embeddings ({value}) "
                     f"must be greater than or equal to seq_length ({seq_len})' "
                     f"({CITE}); set it to {seq_len} or more")
