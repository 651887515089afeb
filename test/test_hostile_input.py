"""Property-based tests of every decoder the network can reach: random and mutated inputs are either decoded
or refused with the package's InputError (a reason, counted by the node); nothing else escapes, nothing
reads outside its buffer. The suite runs a few hundred inputs per decoder; `HVLA_FUZZ_EXAMPLES=100000`
runs a benchmark-sized campaign."""

import os
import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_vla_ros.engine.handover import codec, tensor_record
from hybrid_vla_ros.engine.handover import message as hvlm
from hybrid_vla_ros.engine.handover.endpoints import HandoverDecoder, HandoverEncoder, pack_envelope
from hybrid_vla_ros.engine.handover.shm_ring import DESCRIPTOR, DESCRIPTOR_MAGIC, SlotDescriptor
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.types import BoundaryState, DeepStack

EXAMPLES = int(os.environ.get("HVLA_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def state():
    return BoundaryState(hidden=torch.randn(1, 6, 4), position_ids=torch.arange(6).view(1, 6),
                         attention_mask=torch.ones(1, 6, dtype=torch.long), partition=2, seq=1, stamp_ns=5)


def chunk():
    """Chunk 2 of 4 of a Qwen3-VL-like frame: M-RoPE position ids, DeepStack additions at 2 image tokens."""
    return BoundaryState(hidden=torch.randn(1, 5, 4), position_ids=torch.arange(15).view(3, 1, 5),
                         attention_mask=torch.ones(1, 5, dtype=torch.long), partition=1, seq=1, stamp_ns=5,
                         query_index=19, deepstack=DeepStack(torch.tensor([0, 3]), torch.randn(2, 2, 4), 1),
                         chunk_index=2, chunk_count=4, chunk_start=10)


GOOD_PAYLOAD = codec.encode(state())
GOOD_CHUNK_PAYLOAD = codec.encode(chunk())
GOOD_INLINE = HandoverEncoder("inline", 1, "fuzz").encode(state())
GOOD_CHUNK_INLINE = bytes(HandoverEncoder("inline", 1, "fuzz").encode(chunk()))


def mutated(good: bytes):
    """Random byte flips, truncations and extensions of a valid input (reach deep into the parser)."""
    flips = st.lists(st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255)), max_size=8)
    return st.builds(lambda f, cut, tail: _apply(good, f, cut, tail), flips, st.integers(0, len(good)),
                     st.binary(max_size=16))


def _apply(good: bytes, flips, cut: int, tail: bytes) -> bytes:
    data = bytearray(good)
    for index, value in flips:
        data[index] = value
    return bytes(data[:cut]) + tail


def refused_or_decoded(call):
    try:
        call()
    except InputError:
        pass  # a reason the node logs and counts


@FUZZ
@given(st.one_of(st.binary(max_size=256), mutated(GOOD_PAYLOAD), mutated(GOOD_CHUNK_PAYLOAD)))
def test_boundary_payload_codec(data):
    refused_or_decoded(lambda: codec.decode(data))


def _near(limit: int, bits: int, signed: bool = False):
    """Values near the valid range most of the time, anywhere in the field's range otherwise."""
    low = -2**(bits - 1) if signed else 0
    return st.one_of(st.integers(-2 if signed else 0, limit + 2), st.integers(low, 2**(bits - int(signed)) - 1))


def with_entry(good: bytes, **fields) -> bytes:
    message = hvlm.decode(good)
    for name, value in fields.items():
        setattr(message.entries[0], name, value)
    return hvlm.encode(message)


@FUZZ
@given(_near(64, 16), _near(64, 16), _near(64, 32, signed=True), _near(64, 32))
def test_codec_chunk_fields(index, count, start, message_index):
    """The entry's chunk fields drawn across their whole range (and its message index): decoded only when the
    chunk is one engine/chunking.py can make, refused with an InputError otherwise."""
    data = with_entry(GOOD_CHUNK_PAYLOAD, chunk_index=index, chunk_count=count, start=start, index=message_index)
    try:
        out = codec.decode(data)
    except InputError:
        return
    assert 1 <= count <= 64 and index < count and start >= 0 and (index == 0) == (start == 0)
    assert message_index == index and (out.chunk_index, out.chunk_count, out.chunk_start) == (index, count, start)


def _segment_names():
    """Ring names this user's suffix would attach to (its prefix), with hostile tails, and foreign ones."""
    from hybrid_vla_ros.engine.handover.shm_segment import segment_prefix
    return st.one_of(st.builds(lambda tail: segment_prefix("local") + tail, st.text(max_size=24)), st.text(max_size=40))


def _slots():
    """Slot descriptors: packed ones with drawn fields (past the magic check), and raw bytes."""
    fields = st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                       st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
    return st.one_of(st.builds(lambda f: DESCRIPTOR.pack(DESCRIPTOR_MAGIC, *f), fields), st.binary(max_size=48))


CARRIER_PARTS = st.fixed_dictionaries({}, optional={"handle": st.integers(2**40, 2**62),   # no live state's handle
                                                    "shm_segment": _segment_names(), "shm_slot": _slots()})


def carrier_message(kind: str, parts: dict) -> bytes:
    """A message of carrier `kind` with drawn parts."""
    return pack_envelope(kind, 1, parts)


@FUZZ
@given(st.one_of(st.binary(max_size=256), mutated(GOOD_INLINE), mutated(GOOD_CHUNK_INLINE),
                 st.builds(carrier_message, st.sampled_from(["inproc", "shm", "inline"]), CARRIER_PARTS)))
def test_boundary_envelope(data):
    decoder = HandoverDecoder()
    try:
        decoder.watch(data)   # the subscription callback's look at it: never raises
        refused_or_decoded(lambda: decoder.decode(data))
    finally:
        decoder.close()


@FUZZ
@given(st.binary(min_size=0, max_size=DESCRIPTOR.size + 8), st.booleans())
def test_shared_memory_slot_descriptor(data, with_magic):
    if with_magic and len(data) >= DESCRIPTOR.size:
        data = DESCRIPTOR_MAGIC + data[len(DESCRIPTOR_MAGIC):DESCRIPTOR.size]
    refused_or_decoded(lambda: SlotDescriptor.unpack("hvla_fuzz", data))


@FUZZ
@given(st.sampled_from(["rgb8", "bgr8", "rgba8", "bgra8", "mono8", "yuv422", "RGB8", ""]),
       st.integers(-2, 40), st.integers(-2, 40), st.integers(-4, 200), st.binary(max_size=4096))
def test_raw_camera_image(encoding, height, width, step, data):
    from sensor_msgs.msg import Image
    from hybrid_vla_ros.ros import messages
    msg = Image()
    msg.encoding, msg.height, msg.width, msg.step = encoding, max(0, height), max(0, width), max(0, step)
    msg.data = data
    try:
        out = messages.image_to_array(msg, "fuzz camera")
    except InputError:
        return
    assert out.dtype == np.uint8 and out.shape == (msg.height, msg.width, 3)


@FUZZ
@given(st.sampled_from(["jpeg", "png", "rgb8; jpeg compressed rgb8", "bmp", ""]), st.binary(max_size=2048))
def test_compressed_camera_image(fmt, data):
    from sensor_msgs.msg import CompressedImage
    from hybrid_vla_ros.ros import messages
    msg = CompressedImage()
    msg.format, msg.data = fmt, data
    try:
        out = messages.compressed_to_array(msg, "fuzz camera")
    except InputError:
        return
    assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3


@FUZZ
@given(st.one_of(st.just((2, 4)), st.tuples(_near(4, 16), _near(4, 16))), st.sampled_from([1, 1, 1, 0, 2, 9]))
def test_message_chunk_fields_and_version(chunk_fields, version):
    """The message's chunk index and count (and its version): a state comes out only with a chunk
    engine/chunking.py can make (the inline message is the state: it says what the state is), in the one version
    this release reads."""
    index, count = chunk_fields
    data = bytearray(with_entry(bytes(GOOD_CHUNK_INLINE), chunk_index=index, chunk_count=count, index=index))
    struct.pack_into("<H", data, 4, version)
    decoder = HandoverDecoder()
    try:
        out, _ = decoder.decode(bytes(data))
    except InputError:
        return
    finally:
        decoder.close()
    assert version == 1 and 0 < index < count <= 64 and (index, count) == (out.chunk_index, out.chunk_count)


def test_the_message_header_is_what_the_fuzzers_assume():
    assert struct.unpack_from("<H", GOOD_CHUNK_INLINE, 4)[0] == hvlm.VERSION and struct.calcsize("<Q") == 8
    decoder = HandoverDecoder()
    try:
        with pytest.raises(InputError):
            decoder.decode(b"")
    finally:
        decoder.close()  # an open decoder makes this process's auto encoders choose in-process handles


# ---- parameter values: every node's table ---------------------------------------------------------------

ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20),
                      st.lists(st.one_of(st.integers(), st.text(max_size=5), st.booleans()), max_size=5))


@FUZZ
@given(st.data())
def test_parameter_values(data):
    """Any value for any parameter: accepted only when it has the declared type and lies in range or among the
    choices; otherwise a ConfigError that names the parameter."""
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.ros.params import NODE_PARAMS
    node = data.draw(st.sampled_from(sorted(NODE_PARAMS)))
    spec = data.draw(st.sampled_from(NODE_PARAMS[node]))
    value = data.draw(ANY_VALUE)
    try:
        spec.check(value)
    except ConfigError as exc:
        assert spec.name in str(exc)
        return
    if spec.minimum is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        assert spec.minimum <= value <= spec.maximum
    if spec.choices:
        assert value in spec.choices


# ---- checkpoint metadata: config.json and the head's metadata ----------------------------------------

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from hybrid_vla_ros.model.checkpoint import save_checkpoint
    from hybrid_vla_ros.model.load import load_vla
    directory = tmp_path_factory.mktemp("ckpt")
    save_checkpoint(load_vla(preset="tiny"), directory)
    return directory


@settings(max_examples=max(30, EXAMPLES // 10), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_checkpoint_config(exported, tmp_path_factory, data):
    """config.json with a field removed, retyped or replaced by junk bytes: loaded or refused with a
    ConfigError/InputError; nothing else escapes."""
    import json
    import shutil
    from hybrid_vla_ros.errors import HybridVLAError
    from hybrid_vla_ros.model.checkpoint import checkpoint_spec, inspect_checkpoint
    directory = tmp_path_factory.mktemp("mutated")
    shutil.copytree(exported, directory, dirs_exist_ok=True)
    config = json.loads((directory / "config.json").read_text())
    if data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(config)))
        if data.draw(st.booleans()):
            config.pop(key)
        else:
            config[key] = data.draw(ANY_VALUE)
        text = json.dumps(config)
    else:
        text = data.draw(st.binary(max_size=64)).decode("latin-1")
    (directory / "config.json").write_text(text)
    try:
        checkpoint_spec(inspect_checkpoint(directory))
    except HybridVLAError:
        pass


# ---- bag files: metadata.yaml, the storage file (mcap chunks and index, sqlite3 pages), message payloads ----

@pytest.fixture(scope="module")
def drives(tmp_path_factory):
    """A short valid drive per storage plugin: what the mutations start from."""
    from hybrid_vla_ros.ros.demo import write_sample_drive
    root = tmp_path_factory.mktemp("drives")
    return {storage: write_sample_drive(root / storage, "tiny", ["/cam0/image/compressed", "/cam1/image/compressed"],
                                        frames=2, storage=storage) for storage in ("mcap", "sqlite3")}


def _mutated_copy(bag, directory, data) -> None:
    """Copy `bag` into `directory` with one of its files (metadata or storage) flipped, cut or extended."""
    import shutil
    shutil.copytree(bag, directory, dirs_exist_ok=True)
    target = data.draw(st.sampled_from(sorted(p.name for p in directory.iterdir())))
    good = (directory / target).read_bytes()
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255)), max_size=8))
    cut = data.draw(st.one_of(st.just(len(good)), st.integers(0, len(good))))
    (directory / target).write_bytes(_apply(good, flips, cut, data.draw(st.binary(max_size=16))))


@settings(max_examples=max(30, EXAMPLES // 5), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_bag_files(drives, tmp_path_factory, data):
    """A damaged bag is read to the end (whatever survived) or refused with a ConfigError naming it; the frame
    grouping parses each camera message's header stamp or refuses it; nothing else escapes."""
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.ros.bags.replay import bag_frames
    storage = data.draw(st.sampled_from(sorted(drives)))
    directory = tmp_path_factory.mktemp("bag")
    _mutated_copy(drives[storage], directory, data)
    try:
        for frame in bag_frames(directory, skew_ns=20_000_000):
            assert all(isinstance(m.raw, bytes) for m in frame.messages)
    except ConfigError as exc:
        assert str(directory) in str(exc) or "message" in str(exc)


@FUZZ
@given(st.binary(max_size=64), st.integers(0, 2**31 * 10**9 - 1))
def test_bag_message_payload(raw, stamp):
    """A recorded payload that is not the CDR it claims: its header stamp is read and rewritten (the replay's
    probe) or refused with a ConfigError; nothing of it is deserialised (rclpy's deserialize_message
    crashes the process on some of these: 100,000 inputs found 00 0a 17 6b for CompressedImage)."""
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.ros.bags.storage import header_stamp_ns, with_header_stamp
    try:
        assert isinstance(header_stamp_ns(raw), int)
    except ConfigError:
        return
    out = with_header_stamp(raw, stamp)
    assert len(out) == len(raw) and out[12:] == raw[12:] and out[:4] == raw[:4]
    assert header_stamp_ns(out) == stamp
    with pytest.raises(ConfigError, match="int32 seconds"):
        with_header_stamp(raw, 2**31 * 10**9)




def _tensor_record(code: int, dims: list[int], nbytes: int, body: bytes = b"") -> bytes:
    return tensor_record.TENSOR_HEAD.pack(code, len(dims)) + b"".join(tensor_record.U64.pack(d) for d in dims) + \
        tensor_record.U64.pack(nbytes) + body


def test_an_empty_tensor_declaring_a_huge_side_is_refused_before_any_reshape():
    """Shape [0, 2**64-1, 4] with 0 bytes: the byte count matches (0), and torch's reshape raised TypeError."""
    record = _tensor_record(1, [0, 2**64 - 1, 4], 0)
    with pytest.raises(InputError, match=r"declares shape \(0, 18446744073709551615, 4\), a side above"):
        tensor_record.read_tensor(memoryview(record), 0, "hidden", "fuzz")


@FUZZ
@given(code=st.integers(0, 7), dims=st.lists(st.one_of(st.integers(0, 8), st.integers(0, 2**64 - 1)), max_size=6),
       nbytes=st.one_of(st.integers(0, 256), st.integers(0, 2**64 - 1)), body=st.binary(max_size=256))
def test_tensor_records_with_every_field_hostile_at_once(code, dims, nbytes, body):
    """dtype code, dims, byte count and body drawn together: a tensor of exactly the declared shape, or an
    InputError; no other exception, no read past the record."""
    record = _tensor_record(code, dims, nbytes, body)
    try:
        tensor, end = tensor_record.read_tensor(memoryview(record), 0, "hidden", "fuzz")
    except InputError:
        return
    assert list(tensor.shape) == dims and end <= len(record)
