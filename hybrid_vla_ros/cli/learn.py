"""Learning commands: train (a small driving VLA on synthetic road drives)."""

from __future__ import annotations

import json
from pathlib import Path

from .common import add_model_args, model_from_args


def cmd_train(args) -> int:
    from tqdm import tqdm
    from .. import stop
    from ..learn.train import TrainConfig, train
    from ..model.checkpoint import save_checkpoint
    from ..report import pyplot
    config = TrainConfig(steps=args.steps, batch=args.batch, lr=args.lr, drives=args.drives,
                         frames_per_drive=args.frames_per_drive, seed=args.seed)
    model = model_from_args(args)
    bar = tqdm(total=config.steps, desc="train", unit="step")

    def progress(step: int, loss: float) -> None:
        stop.check()  # Ctrl-C: stop cleanly (nothing written)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
    history = train(model, config, progress=progress)
    bar.close()
    out = Path(args.out)
    save_checkpoint(model, out)
    (out / "training.json").write_text(json.dumps({"config": vars(config), "history": history}, indent=1))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([h["step"] for h in history], [h["loss"] for h in history], lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (smooth L1, m)")
    ax.set_title(f"{model.spec.name}: {config.drives} drives x {config.frames_per_drive} frames, seed {config.seed}, "
                 f"{history[-1]['seconds'] / 60:.1f} min", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.plot or out / "loss.png", dpi=110)
    plt.close(fig)
    print(f"trained '{model.spec.name}' for {config.steps} steps (final loss {history[-1]['loss']:.3f}); "
          f"checkpoint in {out}, loss curve {args.plot or out / 'loss.png'}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="train a small driving VLA on synthetic road drives (CPU), save a checkpoint")
    add_model_args(p, default_preset="drive")
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--drives", type=int, default=40, help="training drives (seeds 1000, 1001, ...)")
    p.add_argument("--frames-per-drive", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, help="loss curve PNG (default OUT/loss.png)")
    p.set_defaults(func=cmd_train)
