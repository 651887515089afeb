"""`hybrid-vla convert`: a published checkpoint (mmcv / plain .pth, Lightning .ckpt, safetensors, OpenGVLab
internvl_chat directory) -> the package's checkpoint layout, by a mapping file; never runs pickle code."""

from __future__ import annotations


def cmd_convert(args) -> int:
    from ..convert import convert_checkpoint
    from ..convert.overrides import parse_set
    report = convert_checkpoint(args.source_format, args.src, args.mapping, args.out, config_dir=args.config,
                                max_shard=int(args.max_shard_gb * (1 << 30)), check=not args.no_check,
                                also=[_input(text) for text in args.also], sets=[parse_set(t) for t in args.set])
    print("\n".join(report.lines()))
    return 0


def _input(text: str) -> tuple[str, str]:
    """--also FORMAT:PATH -> (FORMAT, PATH)."""
    from ..convert.mapping import FORMATS
    from ..errors import ConfigError, expect
    fmt, _, path = text.partition(":")
    expect(fmt in FORMATS and bool(path), ConfigError,
           f"--also {text!r}: expected FORMAT:PATH with FORMAT one of {list(FORMATS)} (e.g. ckpt:planner.ckpt)")
    return fmt, path


def register(sub) -> None:
    from ..convert.mapping import FORMATS, shipped_mappings
    p = sub.add_parser("convert", help="convert a published checkpoint to the package's layout by a mapping file "
                                       "(docs/CHECKPOINTS.md, Converting a published checkpoint)")
    p.add_argument("--from", dest="source_format", required=True, choices=FORMATS,
                   help="pth: plain or mmcv state dict; ckpt: Lightning, or a trainer's {'state_dict': ...} alone; "
                        "safetensors: file or directory; internvl_chat: OpenGVLab remote-code directory")
    p.add_argument("--mapping", required=True,
                   help=f"a mapping file (YAML/JSON) or a shipped one: {', '.join(shipped_mappings()) or 'none'}")
    p.add_argument("--config", default=None,
                   help="the base model's Hugging Face directory: its config.json (and tokenizer / processor files) "
                        "become the backbone's (not needed for --from internvl_chat)")
    p.add_argument("--also", action="append", default=[], metavar="FORMAT:PATH",
                   help="a further file of the same model (repeatable), read like SRC and routed by the same "
                        "mapping: e.g. ReCogDrive's planner, --also ckpt:ReCogDrive_2B_IL.ckpt beside its VLM "
                        "directory (--from internvl_chat)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="change one size the mapping states (repeatable; integers and lists of integers only): e.g. "
                        "--set action_head.image_height=320 --set scene_encoder.config.det.num_query=12")
    p.add_argument("--max-shard-gb", type=float, default=4.0, help="backbone safetensors shard size (default 4)")
    p.add_argument("--no-check", action="store_true",
                   help="skip building the model on the meta device to check every tensor's name and shape")
    p.add_argument("src", help="the published checkpoint file or directory")
    p.add_argument("out", help="the checkpoint directory to write (new or empty)")
    p.set_defaults(func=cmd_convert)
