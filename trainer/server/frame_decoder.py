"""Robots' frames decoded for the trainer: on its GPU (nvJPEG) where one is present, else on CPU threads.

Many robots sending JPEG at 30 Hz cost the trainer about a millisecond of CPU per 640x480 frame; on a
GPU box nvJPEG (``torchvision.io.decode_jpeg`` on a CUDA device) decodes a whole observation's frames
in one batched call and leaves the CPU to the env pool. The decoded frames come back as the env
contract's ``uint8[H, W, 3]`` arrays either way, after the same checks as ``link_codec.decode_frame``.

``server.frame_decode``: ``auto`` (the GPU when CUDA and torchvision are there, else the CPU), ``cpu``,
or ``cuda`` (an error when it is not there, rather than a silent CPU fallback).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.shared_work import map_sharing

log = logging.getLogger(__name__)
FRAME_DECODE_DEVICES = ("auto", "cpu", "cuda")


class FrameDecodeError(RuntimeError):
    """``server.frame_decode`` asks for a device this machine cannot decode on."""


class FrameDecoder(Protocol):
    """Turns an observation's wire frames into ``{camera: uint8[H, W, 3]}``."""

    device: str

    def decode(self, frames, spec: EnvSpec) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


class CpuFrameDecoder:
    """libjpeg-turbo (simplejpeg), a frame per thread, the calling thread's included
    (``protos.shared_work``); raw frames come back as views of the received bytes."""

    device = "cpu"

    def __init__(self, threads: int = 4) -> None:
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="frame-decode")

    def decode(self, frames, spec: EnvSpec) -> dict[str, np.ndarray]:
        link_codec.check_cameras(frames, spec)
        calls = [(f, spec.camera(f.camera)) for f in frames]
        return {
            f.camera: image
            for f, image in zip(frames, map_sharing(self.pool, link_codec.decode_frame, calls))
        }

    def close(self) -> None:
        self.pool.shutdown(wait=False)


class GpuFrameDecoder:
    """nvJPEG through ``torchvision.io.decode_jpeg(..., device="cuda")``: an observation's full-size
    JPEG frames in one batched call. Raw and downscaled frames take the CPU path (nothing to decode,
    or a resize the CPU path already does)."""

    def __init__(self, device: str = "cuda") -> None:
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        self.torch, self._decode_jpeg, self._rgb = torch, decode_jpeg, ImageReadMode.RGB
        self.device = device

    def decode(self, frames, spec: EnvSpec) -> dict[str, np.ndarray]:
        link_codec.check_cameras(frames, spec)
        out: dict[str, np.ndarray] = {}
        batch: list[pb.Frame] = []
        for frame in frames:
            if frame.codec == pb.CODEC_JPEG and (frame.downscale or 1) == 1:
                batch.append(frame)
            else:
                out[frame.camera] = link_codec.decode_frame(frame, spec.camera(frame.camera))
        if batch:
            data = [self.torch.frombuffer(bytearray(f.data), dtype=self.torch.uint8) for f in batch]
            try:
                images = self._decode_jpeg(data, mode=self._rgb, device=self.device)
            except RuntimeError as exc:
                raise link_codec.LinkCodecError(
                    f"cameras {[f.camera for f in batch]}: corrupt JPEG ({exc})"
                ) from None
            for frame, image in zip(batch, images):
                height, width = int(image.shape[1]), int(image.shape[2])
                if (height, width) != (frame.height, frame.width):
                    raise link_codec.LinkCodecError(
                        f"camera {frame.camera!r}: JPEG is {height}x{width}, declared {frame.height}x{frame.width}"
                    )
                out[frame.camera] = image.permute(1, 2, 0).contiguous().cpu().numpy()
        return {frame.camera: out[frame.camera] for frame in frames}

    def close(self) -> None:
        pass


def gpu_decode_unavailable() -> str | None:
    """Why JPEG cannot be decoded on a GPU here, or None when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import torchvision.io  # noqa: F401
    except ImportError:
        return "torchvision is not installed (pip install torchvision matching your torch)"
    return None


def make_frame_decoder(device: str = "auto", threads: int = 4) -> FrameDecoder:
    """The decoder ``server.frame_decode`` asks for (see the module docstring)."""
    if device not in FRAME_DECODE_DEVICES:
        raise FrameDecodeError(f"server.frame_decode must be one of {FRAME_DECODE_DEVICES}, got {device!r}")
    if device == "cpu":
        return CpuFrameDecoder(threads)
    why_not = gpu_decode_unavailable()
    if why_not is None:
        log.info("robots' JPEG frames are decoded on the GPU (nvJPEG)")
        return GpuFrameDecoder("cuda")
    if device == "cuda":
        raise FrameDecodeError(f"server.frame_decode=cuda, but {why_not}; use auto or cpu")
    return CpuFrameDecoder(threads)
