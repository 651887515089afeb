"""`hybrid-vla convert`: a published checkpoint -> the package's layout, and what went where."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, expect
from .mapping import PARTS, load_mapping
from .internvl_chat import native_config, native_tensors
from .route import merge_adapters, route
from .sources import read_sources
from .write import MAX_SHARD_BYTES, torch_dtypes, write_checked


@dataclass
class Report:
    out: Path
    mapping: str
    counts: dict                      # part -> tensors written
    adapters: dict                    # adapter -> tensors written
    dropped: list                     # source keys dropped on purpose
    shards: int
    dtypes: list
    notes: dict = field(default_factory=dict)   # what the source's wrapper said (epoch, meta, ...)
    unread: list = field(default_factory=list)  # written tensors (any file) the model never reads
    sets: list = field(default_factory=list)    # the mapping's sizes changed by --set: [(KEY, VALUE)]

    def lines(self) -> list[str]:
        out = [f"converted with mapping {self.mapping} -> {self.out}"]
        out += [f"  size set: {key}={value}" for key, value in self.sets]
        out += [f"  {part:<14} {self.counts[part]:>6} tensors" for part in PARTS if self.counts[part]]
        out += [f"  {'adapter ' + name:<14} {n:>6} tensors -> adapters/{name}/" for name, n in sorted(self.adapters.items())]
        out.append(f"  dropped        {len(self.dropped):>6} keys (listed by the mapping)"
                   + "".join(f"\n    {k}" for k in self.dropped[:20]) + ("\n    ..." if len(self.dropped) > 20 else ""))
        out.append(f"  dtypes {', '.join(self.dtypes)}; backbone in {self.shards} file(s)")
        out += [f"  source {k}: {v}" for k, v in self.notes.items()]
        out += [f"  warning: written but read by no parameter: {k}" for k in self.unread]
        if not self.counts["action_head"]:
            out.append("  no action head: add action_head.safetensors, or load with --fresh-head to train one")
        out.append(f"next: hybrid-vla verify --checkpoint {self.out}")
        return out


def _config(source, config_dir: Path | None, mapping) -> dict:
    if config_dir is not None:
        path = Path(config_dir) / "config.json"
        expect(path.is_file(), ConfigError, f"--config '{config_dir}': no config.json (the base model's HF directory)")
        try:
            config = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--config '{path}': not JSON ({exc})") from exc
    else:
        expect(source.backbone_config is not None, ConfigError,
               "the backbone needs a config.json: pass --config DIR (the base model's Hugging Face directory, "
               "e.g. Qwen2-0.5B's); only --from internvl_chat brings its own")
        config = dict(source.backbone_config)
    if mapping.backbone_layout == "internvl_chat" and config.get("model_type") == "internvl_chat":
        config = native_config(config, config_dir)      # the base model's remote-code config.json
    for key, value in mapping.config_overrides.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) and isinstance(config.get(key), dict) else value
    return config


def convert_checkpoint(fmt: str, src: str | Path, mapping_name: str, out: str | Path,
                       config_dir: str | Path | None = None, max_shard: int = MAX_SHARD_BYTES,
                       check: bool = True, also: list | tuple = (), sets: list | tuple = ()) -> Report:
    """Read SRC (never running its code), and the further (FORMAT, PATH) inputs `also` of a model released as
    several files, route every tensor by the mapping (its sizes changed by `sets`, [(KEY, VALUE)]: overrides.py),
    write OUT once it is checked to load."""
    mapping = load_mapping(mapping_name, sets)
    source = read_sources([(fmt, src), *also], mapping.unwrap)
    routed = route(source.tensors, mapping)
    if mapping.merge_adapters:
        merge_adapters(routed, float(mapping.adapters["lora_alpha"]))
    config = _config(source, Path(config_dir) if config_dir else None, mapping)
    if mapping.backbone_layout == "internvl_chat":
        routed.parts["backbone"] = native_tensors(routed.parts["backbone"], config["vision_config"]["hidden_size"])
    out = Path(out)
    side_dir = Path(config_dir) if config_dir else source.config_dir
    shards, unread = write_checked(out, routed, mapping, config, side_dir, max_shard, check)
    return Report(out=out, mapping=mapping.source, counts={p: len(t) for p, t in routed.parts.items()},
                  adapters={n: len(t) for n, t in routed.adapters.items()}, dropped=routed.dropped,
                  shards=shards, dtypes=torch_dtypes(source.tensors), notes=source.notes, unread=unread,
                  sets=list(sets))
