"""The real-size benchmark's verdicts (benchmarks/realsize_report.py) and engine specs, on made-up results.

The benchmark itself never runs in tests (it needs GBs and minutes); what it concludes from its numbers
is checked here, because those PASS/MISS lines decide whether issue 12 is done.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import realsize_report  # noqa: E402
from realsize_engines import BUILTIN, parse_engine  # noqa: E402


def _entry() -> dict:
    engines = [BUILTIN["openvino-exact"].to_dict(), BUILTIN["ortstate"].to_dict(), {"name": "co", "kind": "ortstate"}]
    conv = {"onnx_mib": 440.0, "seconds": 12.0, "peak_rss_mib": 900.0}  # cap: 1.5 × 400 + 300 = 900
    return {
        "precision": "int4",
        "ir_bin_mib": 400.0,
        "engines": engines,
        "conversions": {"ortstate": conv, "co": {**conv, "shared_with": "ortstate"}},
        "load": {"openvino-exact": {"peak_rss_mib": 1000.0}, "ortstate": {"peak_rss_mib": 1600.0}},
        "speed": {
            "openvino-exact": {"decode_p50_ms": 30.0, "prefill_ms": 100.0},
            "ortstate": {"decode_p50_ms": 29.0, "prefill_ms": 120.0, "tokens_match": True, "max_abs_logits_diff": 2e-3},
            "co": {"decode_p50_ms": 30.0, "prefill_ms": 90.0, "tokens_match": False, "first_mismatch": 3},
        },
    }


def test_targets_pass_and_miss_by_the_issues_limits():
    got = [(t["target"], t["status"]) for t in realsize_report.targets(_entry())]
    assert got == [
        ("int4, ortstate: ONNX file ≤ 1.15× IR .bin", "PASS"),  # 1.10×
        ("int4, ortstate: convert peak RSS ≤ 1.5× .bin + 300 MiB (900 MiB)", "PASS"),  # at the cap
        ("int4, ortstate: convert ≤ 10 s", "MISS"),
        ("int4, ortstate: load + decode peak RSS ≤ 1.5× OpenVINO's", "MISS"),  # 1.6×
        ("int4, ortstate: decode p50 ≤ OpenVINO exact", "PASS"),
        ("int4, ortstate: prefill ≤ OpenVINO exact", "MISS"),
        ("int4, ortstate: greedy tokens = OpenVINO exact's, logits within 1e-3", "MISS"),  # logits 2e-3
        # a shared conversion is judged once; an engine with no load run is n/a, not a pass
        ("int4, co: load + decode peak RSS ≤ 1.5× OpenVINO's", "n/a"),
        ("int4, co: decode p50 ≤ OpenVINO exact", "PASS"),
        ("int4, co: prefill ≤ OpenVINO exact", "PASS"),
        ("int4, co: greedy tokens = OpenVINO exact's, logits within 1e-3", "MISS"),
    ]


def test_markdown_holds_every_table():
    doc = {
        "started": "2026-01-01T00:00:00",
        "seconds": 60.0,
        "model": "m",
        "config": {"threads": 2, "prompt": 32, "steps": 64, "rounds": 5},
        "machine": {"cpu": "cpu", "cores": 2, "onnxruntime": "1", "openvino": "2", "ortstate": "0"},
        "engines": _entry()["engines"][:2],
        "precisions": [_entry() | {"loadavg": [1.0, 2.0]}],
    }
    text = realsize_report.markdown(doc)
    assert "| int4 | 400 MiB | 440 MiB | 0.88 GiB / 1.56 GiB |" in text
    assert "| int4 | ortstate | 120.0 | 29.0 | n/a | 0.97× |" in text


def test_engine_specs():
    fast = parse_engine("fast:accuracy_level=4,form=explicit,mode=blocked")
    assert (fast.kind, fast.form, fast.convert) == ("ortstate", "explicit", {"accuracy_level": 4, "mode": "blocked"})
    assert parse_engine("openvino-default").ov_config == {}
    for bad in ("nonesuch", "x:novalue"):
        with pytest.raises(ValueError):
            parse_engine(bad)
