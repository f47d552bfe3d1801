"""The trainer's frame decoder: CPU threads by default, nvJPEG on a GPU where one is there (``gpu`` tests)."""

from __future__ import annotations

import numpy as np
import pytest

from protos import link_codec
from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from trainer.server.frame_decoder import (
    CpuFrameDecoder,
    FrameDecodeError,
    gpu_decode_unavailable,
    make_frame_decoder,
)

SPEC = EnvSpec("cams", (CameraSpec("front", 48, 64, 30.0, max_downscale=2), CameraSpec("wrist", 48, 64, 30.0)),
               (StateField("tcp_pos", 3),), ee_delta_action_space(), 30.0, "", 10)  # fmt: skip


def images(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    smooth = np.kron(rng.integers(0, 255, (6, 8, 3)), np.ones((8, 8, 1))).astype(np.uint8)  # JPEG-friendly
    return {"front": smooth, "wrist": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)}


def frames(codec_front: str = "jpeg", downscale: int = 1):
    pictures = images()
    return [
        link_codec.encode_frame("front", pictures["front"], codec_front, 90, downscale),
        link_codec.encode_frame("wrist", pictures["wrist"], "raw"),
    ]


def test_the_cpu_decoder_gives_what_decode_frame_gives_for_jpeg_raw_and_downscaled_frames():
    decoder = CpuFrameDecoder(2)
    try:
        for downscale in (1, 2):
            wire = frames(downscale=downscale)
            decoded = decoder.decode(wire, SPEC)
            assert list(decoded) == ["front", "wrist"]
            np.testing.assert_array_equal(
                decoded["front"], link_codec.decode_frame(wire[0], SPEC.camera("front"))
            )
            np.testing.assert_array_equal(decoded["wrist"], images()["wrist"])  # raw: bit-exact
            assert decoded["front"].shape == (48, 64, 3) and decoded["front"].dtype == np.uint8
    finally:
        decoder.close()


def test_a_wrong_camera_set_or_a_corrupt_jpeg_is_a_link_codec_error():
    decoder = CpuFrameDecoder(1)
    try:
        with pytest.raises(link_codec.LinkCodecError, match="cameras expected"):
            decoder.decode(frames()[:1], SPEC)
        broken = frames()
        broken[0].data = broken[0].data[:40]
        with pytest.raises(link_codec.LinkCodecError, match="front"):
            decoder.decode(broken, SPEC)
    finally:
        decoder.close()


def test_the_device_is_chosen_as_asked_and_an_impossible_ask_is_one_line():
    with pytest.raises(FrameDecodeError, match="must be one of"):
        make_frame_decoder("tpu")
    assert make_frame_decoder("cpu").device == "cpu"
    why_not = gpu_decode_unavailable()
    auto = make_frame_decoder("auto")
    assert auto.device == ("cpu" if why_not else "cuda")
    if why_not is not None:  # this machine cannot: cuda is refused with the reason, never a silent CPU
        with pytest.raises(FrameDecodeError, match=why_not.split(" (")[0]):
            make_frame_decoder("cuda")


@pytest.mark.gpu
def test_nvjpeg_on_the_gpu_decodes_like_libjpeg_turbo_and_refuses_a_corrupt_frame():
    from trainer.server.frame_decoder import GpuFrameDecoder

    decoder = GpuFrameDecoder("cuda")
    wire = frames()
    decoded = decoder.decode(wire, SPEC)
    cpu = link_codec.decode_frame(wire[0], SPEC.camera("front"))
    assert decoded["front"].shape == cpu.shape and decoded["front"].dtype == np.uint8
    # Two IDCT implementations: a few levels apart at most, not another picture.
    assert np.abs(decoded["front"].astype(int) - cpu.astype(int)).mean() < 3.0
    np.testing.assert_array_equal(decoded["wrist"], images()["wrist"])
    broken = frames()
    broken[0].data = broken[0].data[:40]
    with pytest.raises(link_codec.LinkCodecError, match="corrupt JPEG"):
        decoder.decode(broken, SPEC)
