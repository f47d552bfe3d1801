"""Camera frames to wire frames: each camera encoded on its own thread (raw, or JPEG at a quality, as
the :class:`CodecSelector` says), stamped with the time the camera captured it. Raw frames to a
trainer on this host go into the frame ring (shared memory) instead, once the trainer has accepted it."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb
from protos.env_spec import EnvSpec
from protos.frame_ring import FrameRingError, FrameRingWriter, address_is_local
from protos.shared_work import map_sharing
from robot_agent.codec_choice import CodecSelector, measure_costs

log = logging.getLogger(__name__)
REMEASURE_S = 30.0  # the options' costs are measured again on newer frames this often


class FrameEncoder:
    """Encodes one observation's images in parallel (the codecs release the GIL)."""

    def __init__(self, cameras: int, selector: CodecSelector) -> None:
        self.selector = selector
        self.pool = ThreadPoolExecutor(max(1, cameras), thread_name_prefix="jpeg")
        self.ring: FrameRingWriter | None = None
        self.ring_active = False  # set by the link while a trainer that accepted the ring is connected
        self._ring_cameras: list[str] = []
        self._measured_at = 0.0
        self._remeasuring = ThreadPoolExecutor(1, thread_name_prefix="codec-costs")  # off the encode pool
        self._measuring = None  # the remeasurement in flight

    def offer_ring(self, spec: EnvSpec, server: str, slots: int) -> None:
        """Make a frame ring when raw frames go to a trainer on this host (else frames stay in-band)."""
        if self.selector.codec == "jpeg" or slots == 0 or not spec.cameras or not address_is_local(server):
            return
        try:
            self.ring = FrameRingWriter([c.shape for c in spec.cameras], slots)
        except (OSError, FrameRingError) as exc:
            log.warning("no frame ring (%s): raw frames go in-band", exc)
            return
        self._ring_cameras = list(spec.camera_names)

    def ring_proto(self) -> pb.FrameRing | None:
        if self.ring is None:
            return None
        return pb.FrameRing(path=str(self.ring.path), slots=self.ring.slots, slot_bytes=self.ring.slot_bytes)

    def encode(
        self, images: dict[str, np.ndarray], capture_ns: dict[str, int], seq: int = 0
    ) -> tuple[list[pb.Frame], dict[str, np.ndarray]]:
        """The frames, and the pixels of those sent raw in-band: a raw frame carries no data here, its
        pixels go straight into the bytes sent and spooled (``link_codec.observation_parts``)."""
        pixels: dict[str, np.ndarray] = {}
        if self.ring is not None and self.ring_active:
            frames = self._into_ring(images, seq)
        else:
            self._measure_costs(images)
            to_encode = []
            for name, image in images.items():
                option = self.selector.option(name)
                if option.codec == "raw" and option.downscale == 1:
                    pixels[name] = np.ascontiguousarray(image)
                else:
                    to_encode.append((name, image, option.codec, option.quality, option.downscale))
            encoded = dict(zip((job[0] for job in to_encode),
                               map_sharing(self.pool, link_codec.encode_frame, to_encode)))  # fmt: skip
            frames = [
                encoded[name] if name in encoded else
                pb.Frame(camera=name, codec=pb.CODEC_RAW_RGB8, height=image.shape[0], width=image.shape[1])
                for name, image in images.items()
            ]  # fmt: skip
        for frame in frames:
            frame.capture_mono_ns = capture_ns.get(frame.camera, 0)
        return frames, pixels

    def _measure_costs(self, images: dict[str, np.ndarray]) -> None:
        """What each option costs on these cameras: now, the first time; then on the pool, now and then."""
        if not self.selector.measuring:
            return
        if self.selector.needs_costs():
            for name, image in images.items():
                self.selector.set_costs(name, measure_costs(image, self.selector.ladders[name]))
            self._measured_at = time.monotonic()
        elif time.monotonic() - self._measured_at > REMEASURE_S and self._measuring is None:
            copies = {name: image.copy() for name, image in images.items()}
            self._measured_at = time.monotonic()
            self._measuring = self._remeasuring.submit(self._remeasure, copies)

    def _remeasure(self, images: dict[str, np.ndarray]) -> None:
        try:
            for name, image in images.items():
                self.selector.set_costs(name, measure_costs(image, self.selector.ladders[name]))
        finally:
            self._measuring = None

    def _into_ring(self, images: dict[str, np.ndarray], seq: int) -> list[pb.Frame]:
        assert self.ring is not None
        slot, offsets = self.ring.write(seq, [images[name] for name in self._ring_cameras])
        return [
            pb.Frame(camera=name, codec=pb.CODEC_RING, height=images[name].shape[0],
                     width=images[name].shape[1], ring_slot=slot, ring_offset=offset)
            for name, offset in zip(self._ring_cameras, offsets)
        ]  # fmt: skip

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self._remeasuring.shutdown(wait=False)
        if self.ring is not None:
            self.ring.close()
