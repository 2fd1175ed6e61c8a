"""`timely-fleet bench grammar`'s report and JSON with nothing timed: a model that never produced
a segment (or a token after its first) leaves the timing medians and ratios None; the report shows
"-" instead of crashing (it raised TypeError: float * NoneType with a real model's params)."""

from __future__ import annotations

import json

from timely_tools.bench.grammar_bench import Outcome, report, summarize, timing


class _Item:
    def __init__(self, instruction: str, category: str = "paraphrase") -> None:
        self.instruction, self.category = instruction, category
        self.robot_kind, self.skill_set, self.expected_plan = "drone", "tello_minispec", "tp;"


def _result(tm: dict) -> dict:
    nothing = [Outcome(_Item("take a photo"), status="invalid", error="invalid plan: skill 'Sure' is not ..."),
               Outcome(_Item("land"), status="timeout")]
    return {"instructions": 2, "model": "some-instruct-model", "matcher": None,
            "grammar": summarize(nothing) | {"wall_s": 0.5}, "free": summarize(nothing) | {"wall_s": 0.4},
            "timing": tm, "ratios": tm["ratios"], "differences": []}


def test_report_and_json_with_none_timings():
    tm = timing(engine=None, build=None, items=[])  # nothing timed: every median and ratio is None
    assert tm["grammar"] == {"decode_per_token_s": None, "first_segment_s": None}
    assert tm["ratios"] == {"decode_per_token": None, "first_segment": None}
    r = _result(tm)
    text = report(r)
    assert "decode per token: grammar -, free - -> ratio -" in text
    assert "time to first segment: grammar -, free - -> ratio -" in text
    assert "target (0 INVALID_PLAN and 0 adapter refusals with the grammar): NOT met" in text
    back = json.loads(json.dumps(r, default=str))
    assert back["timing"]["free"]["first_segment_s"] is None and back["ratios"]["first_segment"] is None


def test_report_with_some_timings_missing():
    tm = {"runs_per_mode": 1, "grammar": {"decode_per_token_s": 0.002, "first_segment_s": 0.03},
          "free": {"decode_per_token_s": 0.0018, "first_segment_s": None},
          "ratios": {"decode_per_token": 0.002 / 0.0018, "first_segment": None}}
    text = report(_result(tm))
    assert "decode per token: grammar 2.00 ms, free 1.80 ms -> ratio 1.11" in text
    assert "time to first segment: grammar 30.0 ms, free - -> ratio -" in text


def test_model_flag_overrides_the_yaml_model():
    from llm_planner_node.cli import build_parser

    for cmd in ("grammar", "live", "segmentation"):
        a = build_parser(f"bench {cmd}").parse_args(["bench", cmd, "--model", "smollm2-135m-instruct"])
        assert a.model == "smollm2-135m-instruct"


def test_model_flag_reaches_the_engine_params(monkeypatch):
    import importlib.util

    import pytest

    from timely_tools.bench import grammar_bench, live_bench
    from llm_planner_node.cli import build_parser

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("the commands stop before measuring without vLLM")

    class Seen(Exception):
        pass

    from llm_planner_node.models import resolve_model

    def fake_measure(engine_params, *a, **kw):
        raise Seen((engine_params.model, engine_params.max_model_len, engine_params.kv_cache_gib))

    # the model's prepared directory and its own engine sizes, as `up --model` applies them; the
    # default parameter file's model without --model
    for cmd, module in (("grammar", grammar_bench), ("live", live_bench)):
        monkeypatch.setattr(module, "measure", fake_measure)
        for argv, model in ((["--model", "smollm2-135m-instruct"], "smollm2-135m-instruct"),
                            ([], "smollm2-135m-planner"), (["--model", "embedded"], "embedded")):
            args = build_parser(f"bench {cmd}").parse_args(["bench", cmd, *argv])
            with pytest.raises(Seen) as e:
                module.run(args)
            sizes = (1024, 0.25) if model == "embedded" else (2048, 3.0)
            assert e.value.args[0] == ((model if model == "embedded" else resolve_model(model)), *sizes)
