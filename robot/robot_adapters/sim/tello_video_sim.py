"""The Tello simulator's camera: a rendered view of the scene, streamed as H.264 like a real Tello.

:class:`SceneRenderer` draws what the drone's camera sees from a pose ``(x, y, z, yaw)`` (cm and
degrees, x forward / y right / z up from the take-off point, as in ``robot_adapters.scene``):

* a plain room: a painted wall (a faint real brick texture, lit from above, with a baseboard) at
  ``WALL_DISTANCE_CM`` all around, a ceiling at ``ROOM_HEIGHT_CM``, and a floor of real brick
  paving (``skimage.data.brick()``) in perspective, so moving and turning show on the floor;
* REAL PHOTOGRAPHS of the scene's objects (:data:`PHOTOS`, from scikit-image's bundled images),
  composited where the camera model of ``scene.py`` puts them: the same ``H_FOV_DEG`` /
  ``V_FOV_DEG`` (70 / 55 degrees), the image position linear in the bearing and elevation
  (``Scene.object_x/object_y``), the apparent size from the object's size in cm and its distance
  (``Scene.object_width/object_height``), hidden when ``Scene.is_visible`` would say so (centre
  out of the field of view, or farther than ``MAX_RANGE_CM``). Far objects are drawn first.
  An object whose label (``attrs["label"]``, else its name without a trailing number; see
  :data:`ALIASES` for other names of the photographed labels) has no
  photo is drawn as nothing, and logged once: never a made-up drawing.

A render is cached and reused while the pose (to 0.1 cm / 0.01 degree) and the scene's objects
are unchanged, so a drone hovering in place costs only the encoder.

:class:`VideoStreamer` is the drone's video transmitter: a thread that renders at ``fps``, encodes
with PyAV's libx264 (``ultrafast``, ``zerolatency``, yuv420p, one IDR keyframe a second with SPS
and PPS before it, so a decoder that joins late starts at the next keyframe) and sends the H.264
Annex-B elementary stream to ``(client ip, video port)`` in UDP datagrams of at most 1460 bytes,
as a real Tello does. Defaults: 480x360 at 10 fps (a real Tello sends 960x720 at 30 fps; this
machine shares two cores with the LLM engine). ``stats()`` measures what it costs
(``python -m robot_adapters.sim.tello_video_sim --bench`` prints it). Measured on the 2-core
development machine at the defaults: hovering (the cached image re-encoded) ~1.1 ms per frame,
~2 % of one core, ~0.44 Mbit/s; turning or moving (every frame drawn) ~10 ms render + ~4 ms
encode per frame, ~12 % of one core, ~0.9 Mbit/s; the first image of a renderer loads the photos
and textures (~0.5 s, once). At a real Tello's 960x720 at 30 fps: ~28 ms render + ~8 ms encode,
a whole core while moving (it falls behind and keeps the rate by dropping the backlog).

djitellopy's ``get_frame_read()`` (PyAV: ``av.open('udp://@0.0.0.0:11111')``) returns ~5 s after
``streamon``: PyAV's stream probing reads 5 s of stream (bounded by djitellopy's
``FRAME_GRAB_TIMEOUT`` of 5 s), frames follow at the stream's rate from then on.
"""

from __future__ import annotations

import argparse
import logging
import math
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping

import numpy as np

from robot_adapters.scene import H_FOV_DEG, MAX_RANGE_CM, V_FOV_DEG, Scene, SceneObject

log = logging.getLogger("timely_fleet.tello_sim")

DEFAULT_FRAME_SIZE = (480, 360)  # width, height (a real Tello: 960x720)
DEFAULT_FPS = 10.0  # a real Tello: 30
MAX_DATAGRAM = 1460  # bytes of H.264 byte stream per UDP datagram, as a real Tello sends
WALL_DISTANCE_CM = 800.0  # the room's walls, all around the drone (beyond MAX_RANGE_CM)
ROOM_HEIGHT_CM = 350.0
FLOOR_TEXTURE_CM = 150.0  # the brick photo (512 px) covers this much floor
WALL_TEXTURE_CM = 200.0

Pose = tuple[float, float, float, float]  # x, y, z (cm), yaw (degrees)


@dataclass(frozen=True)
class PhotoSource:
    """A real photograph of an object: a ``skimage.data`` image and the crop that holds the object
    (rows top..bottom, columns left..right of the source image)."""

    image: str  # name of the skimage.data function
    crop: tuple[int, int, int, int]  # top, bottom, left, right (pixels of the source)
    what: str  # what the photo shows


#: label -> photograph (scikit-image's bundled images; no download at run time)
PHOTOS: dict[str, PhotoSource] = {
    "cat": PhotoSource("chelsea", (0, 300, 25, 405), "Chelsea the cat, face and chest"),
    "cup": PhotoSource("coffee", (10, 305, 165, 425), "an espresso cup with its handle and spoon"),
    "person": PhotoSource("astronaut", (0, 512, 40, 340), "Eileen Collins in her flight suit, head to waist"),
    "rocket": PhotoSource("rocket", (125, 408, 295, 350), "a Falcon 9 on the launch pad"),
    "motorcycle": PhotoSource("stereo_motorcycle", (55, 455, 95, 690), "a red motorcycle in a garage"),
}

#: other names of the photographed labels
ALIASES: dict[str, str] = {
    "kitten": "cat", "kitty": "cat",
    "coffee": "cup", "coffee_cup": "cup", "mug": "cup", "espresso": "cup", "teacup": "cup",
    "astronaut": "person", "human": "person", "man": "person", "woman": "person", "people": "person",
    "pilot": "person",
    "motorbike": "motorcycle", "bike": "motorcycle",
}


def photo_label(obj: SceneObject) -> str:
    """The label an object's photo is looked up by: ``attrs["label"]``, else the object's name
    without a trailing number (``cat_2`` -> ``cat``), then the last word (``red_cup`` -> ``cup``)."""
    raw = str(obj.attrs.get("label") or obj.name).strip().lower().replace("-", "_").replace(" ", "_")
    base = raw.rstrip("0123456789").rstrip("_") or raw
    for cand in (raw, base, base.rsplit("_", 1)[-1]):
        cand = ALIASES.get(cand, cand)
        if cand in PHOTOS:
            return cand
    return base


def _load_skimage(name: str) -> np.ndarray | None:
    try:
        from skimage import data as skdata  # noqa: PLC0415 - heavy, only when a frame is drawn
    except ImportError:
        return None
    try:
        img = getattr(skdata, name)()
    except Exception as e:  # noqa: BLE001 - a missing bundled file: the object is not drawn
        log.warning("scikit-image photo %s unavailable: %s", name, e)
        return None
    if name == "stereo_motorcycle":
        img = img[0]
    return np.asarray(img)


@dataclass(frozen=True)
class ImageBox:
    """An object's box in the image (pixels, floats, may extend past the borders)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def clipped(self, width: int, height: int) -> tuple[int, int, int, int] | None:
        x0, y0 = max(0, int(round(self.x0))), max(0, int(round(self.y0)))
        x1, y1 = min(width, int(round(self.x1))), min(height, int(round(self.y1)))
        return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


def project(obj: SceneObject, pose: Pose, frame_size: tuple[int, int] = DEFAULT_FRAME_SIZE,
            ) -> tuple[ImageBox, float] | None:
    """Where ``scene.py``'s camera model puts ``obj`` seen from ``pose``: (box in pixels, distance
    cm), or None when ``Scene.is_visible`` would be false. The same geometry as ``Scene._rel`` /
    ``object_x`` / ``object_width`` (no clamp of the apparent size to the image)."""
    w, h = frame_size
    x, y, z, yaw = pose
    dx, dy, dz = obj.pos[0] - x, obj.pos[1] - y, obj.pos[2] - z
    dist = math.sqrt(dx * dx + dy * dy + dz * dz)
    bearing = (math.degrees(math.atan2(dy, dx)) - yaw + 180.0) % 360.0 - 180.0
    elev = math.degrees(math.atan2(dz, max(math.hypot(dx, dy), 1e-6)))
    if dist > MAX_RANGE_CM or abs(bearing) > H_FOV_DEG / 2 or abs(elev) > V_FOV_DEG / 2:
        return None
    cx = (0.5 + bearing / H_FOV_DEG) * w
    cy = (0.5 - elev / V_FOV_DEG) * h
    bw = math.degrees(2 * math.atan2(obj.size[0] / 2, max(dist, 1.0))) / H_FOV_DEG * w
    bh = math.degrees(2 * math.atan2(obj.size[1] / 2, max(dist, 1.0))) / V_FOV_DEG * h
    return ImageBox(cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2), dist


class SceneRenderer:
    """Draws the camera view of ``scene`` (its objects; the pose is an argument) as RGB uint8.

    ``render(pose)`` returns a read-only ``height x width x 3`` array, cached while the pose and
    the objects do not change. ``photos`` overrides :data:`PHOTOS` (label -> RGB array or
    :class:`PhotoSource`)."""

    def __init__(self, scene: Scene | None = None, frame_size: tuple[int, int] = DEFAULT_FRAME_SIZE,
                 photos: Mapping[str, Any] | None = None) -> None:
        w, h = int(frame_size[0]), int(frame_size[1])
        if w < 16 or h < 16 or w % 2 or h % 2:
            raise ValueError(f"frame_size {frame_size}: even width and height of at least 16 pixels")
        self.scene = scene
        self.frame_size = (w, h)
        self._photo_specs: dict[str, Any] = dict(PHOTOS if photos is None else photos)
        self._photos: dict[str, np.ndarray | None] = {}
        self._resized: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._missing_logged: set[str] = set()
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._image: np.ndarray | None = None
        self.renders = 0  # how many images were drawn (not taken from the cache)
        # per-column / per-row viewing angles (degrees): linear in the angle, as scene.py's model
        self._theta = ((np.arange(w, dtype=np.float32) + 0.5) / w - 0.5) * np.float32(H_FOV_DEG)
        self._phi = ((np.arange(h, dtype=np.float32) + 0.5) / h - 0.5) * np.float32(V_FOV_DEG)  # + = down
        self._textures: dict[str, list[np.ndarray]] | None = None

    # ------------------------------------------------------------------ assets
    def photo(self, label: str) -> np.ndarray | None:
        """The cropped RGB photo of ``label`` (None when there is none)."""
        if label not in self._photos:
            spec = self._photo_specs.get(label)
            img = None
            if isinstance(spec, PhotoSource):
                src = _load_skimage(spec.image)
                if src is not None:
                    t, b, l, r = spec.crop
                    img = src[t:b, l:r]
            elif spec is not None:
                img = np.asarray(spec)
            if img is not None:
                if img.ndim == 2:
                    img = np.repeat(img[:, :, None], 3, axis=2)
                img = np.ascontiguousarray(img[:, :, :3].astype(np.uint8))
            self._photos[label] = img
        return self._photos[label]

    def _texture_levels(self) -> dict[str, list[np.ndarray]]:
        """Grey textures (0..1, float32) at 1, 1/2, 1/4, 1/8 resolution (mip levels against
        aliasing far away): the brick photo as floor paving, and turned as a painted brick wall.
        Without scikit-image: flat (the gradients alone)."""
        if self._textures is None:
            brick = _load_skimage("brick")
            if brick is None:
                brick = np.full((64, 64), 160, np.uint8)
            from PIL import Image  # noqa: PLC0415

            def levels(a: np.ndarray) -> list[np.ndarray]:
                out, im = [], Image.fromarray(a)
                for k in range(4):
                    s = max(1, a.shape[0] >> k)
                    out.append(np.asarray(im.resize((s, s), Image.BOX), np.float32) / 255.0)
                return out

            self._textures = {"floor": levels(brick), "wall": levels(np.ascontiguousarray(brick.T))}
        return self._textures

    # ------------------------------------------------------------------ drawing
    def _signature(self) -> tuple:
        if self.scene is None:
            return ()
        with self.scene._lock:
            return tuple((o.name, tuple(o.pos), tuple(o.size), str(o.attrs.get("label", "")))
                         for o in self.scene.objects.values())

    def render(self, pose: Pose) -> np.ndarray:
        x, y, z, yaw = (float(v) for v in pose)
        key = (round(x, 1), round(y, 1), round(z, 1), round(yaw, 2), self._signature())
        with self._lock:
            if key != self._key or self._image is None:
                img = self._background((x, y, z, yaw))
                self._draw_objects(img, (x, y, z, yaw))
                img.flags.writeable = False
                self._key, self._image = key, img
                self.renders += 1
            return self._image

    def visible_boxes(self, pose: Pose) -> dict[str, tuple[ImageBox, float]]:
        """Objects in view from ``pose`` with their boxes and distances (whether photographed or not)."""
        if self.scene is None:
            return {}
        with self.scene._lock:
            objs = list(self.scene.objects.values())
        out = {}
        for o in objs:
            p = project(o, pose, self.frame_size)
            if p is not None:
                out[o.name] = p
        return out

    def _background(self, pose: Pose) -> np.ndarray:
        w, h = self.frame_size
        x, y, z, yaw = pose
        tex = self._texture_levels()
        cam_h = max(z, 8.0)
        phi = np.radians(self._phi)  # + = below the horizon
        az = np.radians(self._theta + np.float32(yaw))  # world azimuth of each column
        img = np.empty((h, w, 3), np.float32)
        rad_per_px = math.radians(H_FOV_DEG / w)
        tan_phi = np.tan(phi)
        # rows hitting the floor before the wall; then the wall; then the ceiling (above ROOM_HEIGHT)
        phi_floor = math.atan2(cam_h, WALL_DISTANCE_CM)
        floor_rows = np.nonzero(phi > phi_floor)[0]
        if floor_rows.size:
            d = (cam_h / tan_phi[floor_rows]).astype(np.float32)  # horizontal distance, cm
            wx = np.float32(x) + d[:, None] * np.cos(az)[None, :]
            wy = np.float32(y) + d[:, None] * np.sin(az)[None, :]
            levels = tex["floor"]
            tpc = levels[0].shape[0] / FLOOR_TEXTURE_CM
            foot = d * rad_per_px * tpc  # texels per pixel across
            lev = np.clip(np.floor(np.log2(np.maximum(foot, 1.0))), 0, len(levels) - 1).astype(int)
            shade = np.empty((floor_rows.size, w), np.float32)
            for k in np.unique(lev):
                rows = np.nonzero(lev == k)[0]
                t = levels[k]
                n = t.shape[0]
                s = tpc / (1 << k)
                u = (wy[rows] * s).astype(np.int64) % n
                v = (wx[rows] * s).astype(np.int64) % n
                shade[rows] = t[v, u]
            fog = np.exp(-d / 900.0)[:, None]  # far floor fades to the wall's light
            base = np.array([0.62, 0.47, 0.36], np.float32)  # warm brick paving
            light = (0.55 + 0.6 * shade) * (0.75 + 0.25 * fog)
            img[floor_rows] = base[None, None, :] * light[:, :, None] * 255.0
        wall_rows = np.nonzero(phi <= phi_floor)[0]
        if wall_rows.size:
            hw = cam_h - WALL_DISTANCE_CM * tan_phi[wall_rows]  # height on the wall, cm
            levels = tex["wall"]
            tpc = levels[0].shape[0] / WALL_TEXTURE_CM
            k = int(min(len(levels) - 1, max(0, math.floor(math.log2(max(WALL_DISTANCE_CM * rad_per_px * tpc, 1.0))))))
            t = levels[k]
            n = t.shape[0]
            s = tpc / (1 << k)
            u = (WALL_DISTANCE_CM * az * s).astype(np.int64) % n
            v = (np.maximum(hw, 0) * s).astype(np.int64) % n
            shade = t[v[:, None], u[None, :]]
            paint = np.array([0.86, 0.83, 0.76], np.float32)  # off-white paint
            lit = np.clip(0.78 + 0.22 * (hw / ROOM_HEIGHT_CM), 0.7, 1.0)[:, None]  # lamps above
            light = lit * (0.9 + 0.12 * shade)
            wall = paint[None, None, :] * light[:, :, None] * 255.0
            base_board = hw < 12.0
            wall[base_board] = np.array([92, 70, 55], np.float32) * (0.9 + 0.1 * shade[base_board])[..., None]
            ceiling = hw > ROOM_HEIGHT_CM
            if cam_h < ROOM_HEIGHT_CM and ceiling.any():
                wall[ceiling] = np.array([236, 234, 228], np.float32)
            img[wall_rows] = wall
        return np.clip(img, 0, 255).astype(np.uint8)

    def _draw_objects(self, img: np.ndarray, pose: Pose) -> None:
        if self.scene is None:
            return
        with self.scene._lock:
            objs = list(self.scene.objects.values())
        h_img, w_img = img.shape[:2]
        drawn = []
        for o in objs:
            p = project(o, pose, self.frame_size)
            if p is not None:
                drawn.append((p[1], o, p[0]))
        for _dist, o, box in sorted(drawn, key=lambda t: -t[0]):  # far first
            label = photo_label(o)
            photo = self.photo(label)
            if photo is None:
                if label not in self._missing_logged:
                    self._missing_logged.add(label)
                    log.warning("tello_sim video: no photo for %r (object %r): not drawn; photos exist for %s",
                                label, o.name, ", ".join(sorted(self._photo_specs)))
                continue
            ox, oy = int(round(box.x0)), int(round(box.y0))
            bw, bh = int(round(box.x1)) - ox, int(round(box.y1)) - oy
            if bw < 2 or bh < 2:
                continue
            x0, y0 = max(ox, 0), max(oy, 0)
            x1, y1 = min(ox + bw, w_img), min(oy + bh, h_img)
            if x1 <= x0 or y1 <= y0:
                continue
            scaled = self._scaled(label, photo, bw, bh)
            img[y0:y1, x0:x1] = scaled[y0 - oy:y1 - oy, x0 - ox:x1 - ox]

    def _scaled(self, label: str, photo: np.ndarray, bw: int, bh: int) -> np.ndarray:
        key = (label, bw, bh)
        hit = self._resized.get(key)
        if hit is not None:
            self._resized.move_to_end(key)
            return hit
        from PIL import Image  # noqa: PLC0415

        out = np.asarray(Image.fromarray(photo).resize((bw, bh), Image.BILINEAR))
        self._resized[key] = out
        if len(self._resized) > 64:
            self._resized.popitem(last=False)
        return out


class VideoStreamer:
    """The drone's video transmitter: renders ``pose_fn()`` at ``fps``, encodes H.264 (libx264
    ultrafast/zerolatency, yuv420p, an IDR with SPS/PPS every ``keyframe_s``) and sends the Annex-B
    byte stream to ``dest_fn()`` (``(ip, port)``, read per frame so a ``port`` command takes effect
    at once; None: nothing sent) in datagrams of at most ``max_datagram`` bytes from ``sock``.

    Every ``start()`` begins a new stream with a fresh encoder (its first frame is an IDR);
    ``stop()`` ends it. ``stats()``: frames, keyframes, bytes, mean render / encode ms per frame and
    the thread's CPU share of one core."""

    def __init__(self, renderer: SceneRenderer, pose_fn: Callable[[], Pose],
                 dest_fn: Callable[[], tuple[str, int] | None], sock: socket.socket | None = None, *,
                 fps: float = DEFAULT_FPS, keyframe_s: float = 1.0, crf: int = 23,
                 max_datagram: int = MAX_DATAGRAM) -> None:
        if not fps > 0:
            raise ValueError("fps must be positive")
        self.renderer = renderer
        self.pose_fn = pose_fn
        self.dest_fn = dest_fn
        self.sock = sock
        self.fps = float(fps)
        self.gop = max(1, int(round(keyframe_s * self.fps)))
        self.crf = int(crf)
        self.max_datagram = int(max_datagram)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats_lock = threading.Lock()
        self._reset_stats()

    def _reset_stats(self) -> None:
        with self._stats_lock:
            self._st = {"frames": 0, "renders": 0, "keyframes": 0, "bytes": 0, "datagrams": 0,
                        "render_s": 0.0, "encode_s": 0.0, "cpu_s": 0.0, "wall_s": 0.0}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "VideoStreamer":
        if self.running:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tello-sim-video", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sending; returns when the thread has sent its last datagram."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        self._thread = None

    def stats(self) -> dict[str, float]:
        with self._stats_lock:
            st = dict(self._st)
        n = max(st["frames"], 1)
        st["render_ms"] = 1000.0 * st["render_s"] / max(st["renders"], 1)  # per image drawn
        st["encode_ms"] = 1000.0 * st["encode_s"] / n  # per frame sent (colour conversion included)
        st["cpu_share"] = st["cpu_s"] / st["wall_s"] if st["wall_s"] > 0 else 0.0
        return st

    def make_encoder(self) -> Any:
        import av  # noqa: PLC0415

        w, h = self.renderer.frame_size
        ctx = av.CodecContext.create("libx264", "w")
        ctx.width, ctx.height = w, h
        ctx.pix_fmt = "yuv420p"
        rate = Fraction(self.fps).limit_denominator(1000)
        ctx.framerate = rate
        ctx.time_base = 1 / rate  # one tick per frame: pts = frame number
        ctx.gop_size = self.gop
        ctx.thread_count = 1  # two cores, shared with the LLM engine
        ctx.options = {
            "preset": "ultrafast", "tune": "zerolatency", "crf": str(self.crf),
            # IDR every gop frames, no scene-cut keyframes, SPS/PPS before every IDR
            "x264-params": f"keyint={self.gop}:min-keyint={self.gop}:scenecut=0:repeat-headers=1:threads=1",
        }
        ctx.open()
        return ctx

    def encode_packets(self, enc: Any, frame: Any) -> list[bytes]:
        return [bytes(p) for p in enc.encode(frame)]

    def _send(self, data: bytes) -> int:
        dest = self.dest_fn()
        if dest is None or self.sock is None:
            return 0
        sent = 0
        for i in range(0, len(data), self.max_datagram):
            try:
                self.sock.sendto(data[i:i + self.max_datagram], dest)
                sent += 1
            except OSError:
                return sent  # no route / closed: a real drone does not care either
        return sent

    def _run(self) -> None:
        import av  # noqa: PLC0415

        try:
            enc = self.make_encoder()
        except Exception:  # noqa: BLE001 - logged; the command channel goes on without video
            log.exception("tello_sim video: cannot open the libx264 encoder")
            return
        period = 1.0 / self.fps
        last_img: np.ndarray | None = None
        vframe = None
        n = 0
        next_t = time.monotonic()
        cpu0, wall0 = time.thread_time(), time.monotonic()
        while not self._stop.is_set():
            t0 = time.perf_counter()
            img = self.renderer.render(self.pose_fn())
            t1 = time.perf_counter()
            drawn = img is not last_img or vframe is None
            if drawn:  # a new image: convert it once, re-encode the converted frame while it lasts
                vframe = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuv420p")
                last_img = img
            vframe.pts = n
            vframe.pict_type = av.video.frame.PictureType.NONE
            packets = self.encode_packets(enc, vframe)
            t2 = time.perf_counter()
            n += 1
            nbytes = ndgrams = keys = 0
            for data in packets:
                ndgrams += self._send(data)
                nbytes += len(data)
                keys += _has_idr(data)
            with self._stats_lock:
                st = self._st
                st["frames"] += 1
                st["renders"] += int(drawn)
                st["keyframes"] += keys
                st["bytes"] += nbytes
                st["datagrams"] += ndgrams
                st["render_s"] += t1 - t0
                st["encode_s"] += t2 - t1
                st["cpu_s"] = time.thread_time() - cpu0
                st["wall_s"] = time.monotonic() - wall0
            next_t += period
            delay = next_t - time.monotonic()
            if delay < -period:  # fell behind (a busy machine): keep the rate, drop the backlog
                next_t = time.monotonic()
                delay = 0.0
            if delay > 0:
                self._stop.wait(delay)


def nal_units(data: bytes) -> list[int]:
    """NAL unit types in an Annex-B byte stream (7 SPS, 8 PPS, 5 IDR slice, 1 slice, 6 SEI)."""
    out = []
    i = data.find(b"\x00\x00\x01")
    while i >= 0 and i + 3 < len(data):
        out.append(data[i + 3] & 0x1F)
        i = data.find(b"\x00\x00\x01", i + 3)
    return out


def _has_idr(data: bytes) -> int:
    return int(5 in nal_units(data))


def bench(frame_size: tuple[int, int] = DEFAULT_FRAME_SIZE, fps: float = DEFAULT_FPS, seconds: float = 5.0,
          moving: bool = False) -> dict[str, float]:
    """Render + encode for ``seconds`` of stream (nothing sent) with a cat and a cup in view;
    ``moving`` turns the drone every frame (every frame rendered), else it hovers (cached render)."""
    scene = Scene.from_dict({"objects": {"cat": {"pos": [250, -40, 60], "size": [60, 45]},
                                         "cup": {"pos": [200, 60, 70], "size": [15, 15]}}})
    r = SceneRenderer(scene, frame_size)
    r.render((0.0, 0.0, 80.0, 90.0))  # loads the photos and textures (once per renderer, ~0.5 s)
    t0 = time.monotonic()
    pose = (lambda: (0.0, 0.0, 80.0, 10.0 * math.sin(time.monotonic() - t0))) if moving else (lambda: (0.0, 0.0, 80.0, 0.0))
    s = VideoStreamer(r, pose, lambda: None, None, fps=fps).start()
    time.sleep(seconds)
    s.stop()
    return s.stats()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Tello simulator video: render + encode cost, or one frame as PNG")
    p.add_argument("--bench", action="store_true", help="measure render + encode per frame")
    p.add_argument("--size", default="%dx%d" % DEFAULT_FRAME_SIZE)
    p.add_argument("--fps", type=float, default=DEFAULT_FPS)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--png", help="write the frame seen from --pose with the bench scene")
    p.add_argument("--pose", default="0,0,80,0", help="x,y,z,yaw")
    a = p.parse_args(argv)
    size = tuple(int(v) for v in a.size.lower().split("x"))
    if a.png:
        from PIL import Image  # noqa: PLC0415

        scene = Scene.from_dict({"objects": {"cat": {"pos": [250, -40, 60], "size": [60, 45]},
                                             "cup": {"pos": [200, 60, 70], "size": [15, 15]},
                                             "person": {"pos": [500, 150, 85], "size": [50, 170]}}})
        img = SceneRenderer(scene, size).render(tuple(float(v) for v in a.pose.split(",")))  # type: ignore[arg-type]
        Image.fromarray(img).save(a.png)
        print(f"wrote {a.png}")
    if a.bench or not a.png:
        for moving in (False, True):
            st = bench(size, a.fps, a.seconds, moving)  # type: ignore[arg-type]
            print(f"{size[0]}x{size[1]} @ {a.fps:g} fps, {'turning' if moving else 'hovering'}: "
                  f"render {st['render_ms']:.2f} ms per image drawn, encode {st['encode_ms']:.2f} ms per frame, "
                  f"CPU {100 * st['cpu_share']:.1f}% of one core, {st['bytes'] / max(st['wall_s'], 1e-9) * 8 / 1000:.0f} kbit/s, "
                  f"{st['frames']:.0f} frames, {st['keyframes']:.0f} keyframes, {st['renders']:.0f} renders")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
