"""What camera frames of real sizes cost before the model: decoding (CPU, on the prefix node's worker) and
resize + normalise (on the prefix device), per frame of all the model's cameras, side by side with the
prefix stage itself. `hybrid-vla bench --scenario preprocess --camera 1920x1080`."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from ..engine.cpu import default_stage_cores, pinned
from ..engine.stages import PrefixStage
from ..model.inputs import synthetic_frame
from ..model.preprocess import preprocess
from ..report import percentiles, pyplot


def _camera_images(count: int, height: int, width: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(count)]


def _messages(images: list[np.ndarray]) -> dict[str, list]:
    """The same images as the prefix node receives them: rgb8, yuv422 (UYVY) and jpeg messages."""
    from ..ros.messages import array_to_compressed
    h, w = images[0].shape[:2]
    raw = [SimpleNamespace(encoding="rgb8", height=h, width=w, step=w * 3, data=img.tobytes()) for img in images]
    yuv = [SimpleNamespace(encoding="yuv422", height=h, width=w, step=w * 2, data=img[..., :2].tobytes())
           for img in images]
    jpeg = [array_to_compressed(img, SimpleNamespace(), "jpeg") for img in images]
    return {"rgb8": raw, "yuv422": yuv, "jpeg": jpeg}


def _timed(fn, frames: int) -> dict:
    fn()  # warm-up
    times = []
    for _ in range(frames):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return percentiles(times)


def run_preprocess_bench(model, placement, width: int, height: int, frames: int = 10) -> dict:
    from ..ros.messages import compressed_to_array, image_to_array
    spec, cores = model.spec, default_stage_cores(0)
    images = _camera_images(spec.num_cameras, height, width)
    msgs = _messages(images)
    decode = {"rgb8": image_to_array, "yuv422": image_to_array, "jpeg": compressed_to_array}
    # every window's images encoded (one frame timed again and again: a kept encoding would time no tower)
    stage = PrefixStage(model, model.num_blocks // 2, placement, encode_once=False)
    small = synthetic_frame(spec, 0)
    big = synthetic_frame(spec, 0)
    big.images = [image for image in images for _ in range(spec.frames_per_camera)]   # camera-major windows
    big.image_keys = None
    with pinned(cores):
        report = {f"decode_{kind}_ms": _timed(lambda k=kind: [decode[k](m, "b") for m in msgs[k]], frames)
                  for kind in msgs}
        report["resize_normalise_ms"] = _timed(
            lambda: (preprocess(images, model.image_processing, placement.prefix_device), placement.synchronize()),
            frames)
        report["prefix_stage_at_input_size_ms"] = _timed(lambda: stage.run(small), frames)
        report["prefix_stage_at_camera_size_ms"] = _timed(lambda: stage.run(big), frames)
    return {"scenario": "preprocess", "preset": spec.name, "cameras": spec.num_cameras, "camera": f"{width}x{height}",
            "input": f"{spec.image_width}x{spec.image_height}", "prefix_device": str(placement.prefix_device),
            "cores": cores, "frames": frames, "partition": stage.partition, **report}


def plot_preprocess(report: dict, path) -> None:
    plt = pyplot()
    keys = [k for k in report if k.endswith("_ms")]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.barh(keys, [report[k]["p50"] for k in keys], color="tab:blue")
    ax.set_xlabel("ms per frame (p50)")
    ax.set_title(f"{report['preset']}: {report['cameras']} x {report['camera']} -> {report['input']} on "
                 f"{report['prefix_device']} (cores {report['cores']})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
