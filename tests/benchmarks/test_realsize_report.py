"""The real-size benchmark's verdicts (benchmarks/realsize_report.py) and engine specs, on made-up results.

The benchmark itself never runs in tests (it needs GBs and minutes); what it concludes from its numbers
is checked here, because those PASS/MISS lines decide whether issue 12 is done.
"""

import pytest

from benchmarks import realsize_context_report, realsize_report
from benchmarks.realsize_engines import BUILTIN, parse_engine


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


def test_markdown_holds_every_table(results_doc):
    data = {
        "model": "m",
        "config": {"threads": 2, "prompt": 32, "steps": 64, "rounds": 5},
        "engines": _entry()["engines"][:2],
        "precisions": [_entry() | {"loadavg": [1.0, 2.0]}],
    }
    text = realsize_report.markdown(results_doc(data, "real-size"))
    assert text.startswith("Run 2026-01-01T00:00:00 (60 s); CPU X, 2 cores (avx2, fma); Python 3.11.7")
    assert "Load average (1 min) per precision, start → end: int4 1.0 → 2.0." in text
    assert "| int4 | 400 MiB | 440 MiB | 0.88 GiB / 1.56 GiB |" in text
    assert "| int4 | ortstate | 120.0 | 29.0 | n/a | 0.97× |" in text


def test_engine_specs():
    fast = parse_engine("fast:accuracy_level=4,form=explicit,mode=blocked")
    assert (fast.kind, fast.form, fast.convert) == ("ortstate", "explicit", {"accuracy_level": 4, "mode": "blocked"})
    assert parse_engine("openvino-default").ov_config == {}
    for bad in ("nonesuch", "x:novalue"):
        with pytest.raises(ValueError):
            parse_engine(bad)


def _ctx(decode: list[float], prefill: list[float | None], match: list[bool]) -> dict:
    return {
        str(c): {"decode_p50_ms": d, "prefill_ms": p, "tokens_match": m, "first_mismatch": None if m else 3}
        | {"max_abs_logits_diff": 1e-5, "timed_positions": [c + 4, c + 83]}
        for c, d, p, m in zip((32, 2048, 4000), decode, prefill, match)
    }


def _context_entry() -> dict:
    engines = [BUILTIN["openvino-exact"].to_dict(), BUILTIN["ortstate"].to_dict(), {"name": "co", "kind": "ortstate"}]
    yes = [True] * 3
    return {
        "precision": "int4",
        "model": "m",
        "kv_heads": 2,
        "engines": engines,
        "contexts": {
            "openvino-exact": _ctx([40.0, 44.0, 48.0], [300.0, 10000.0, 30000.0], yes),  # grows 1.2×
            "ortstate": _ctx([41.0, 46.0, 60.0], [200.0, 9000.0, 31000.0], yes),  # grows 1.46× = 1.22× OV's
            "co": _ctx([41.9, 47.0, 55.0], [200.0, 9000.0, None], [True, True, False]),  # 1.31× = 1.09× OV's
        },
        "load": {"openvino-exact": {"peak_rss_mib": 1000.0}, "ortstate": {"peak_rss_mib": 1500.0}},
    }


def test_context_targets_by_issue_19s_limits():
    got = [(t["target"], t["status"]) for t in realsize_context_report.targets(_context_entry())]
    tag = "int4 m, 2 KV heads"
    assert got == [
        (f"{tag}, ortstate: decode p50 at 32 ≤ 1.05× OpenVINO exact", "PASS"),
        (f"{tag}, ortstate: decode p50 at 2048 ≤ 1.05× OpenVINO exact", "PASS"),  # 1.045×
        (f"{tag}, ortstate: decode p50 at 4000 ≤ 1.05× OpenVINO exact", "MISS"),
        (f"{tag}, ortstate: decode(4000)/decode(32) ≤ 1.2× OpenVINO's", "MISS"),
        (f"{tag}, ortstate: prefill of 2048 ≤ OpenVINO exact", "PASS"),
        (f"{tag}, ortstate: prefill of 4000 ≤ OpenVINO exact", "MISS"),
        (f"{tag}, ortstate: greedy tokens = OpenVINO exact's at every context", "PASS"),
        (f"{tag}, ortstate: peak RSS at 4000 ≤ 1.5× OpenVINO's", "PASS"),  # at the limit
        (f"{tag}, co: decode p50 at 32 ≤ 1.05× OpenVINO exact", "PASS"),
        (f"{tag}, co: decode p50 at 2048 ≤ 1.05× OpenVINO exact", "MISS"),
        (f"{tag}, co: decode p50 at 4000 ≤ 1.05× OpenVINO exact", "MISS"),
        (f"{tag}, co: decode(4000)/decode(32) ≤ 1.2× OpenVINO's", "PASS"),
        (f"{tag}, co: prefill of 2048 ≤ OpenVINO exact", "PASS"),
        (f"{tag}, co: prefill of 4000 ≤ OpenVINO exact", "n/a"),  # not measured is not a pass
        (f"{tag}, co: greedy tokens = OpenVINO exact's at every context", "MISS"),
        (f"{tag}, co: peak RSS at 4000 ≤ 1.5× OpenVINO's", "n/a"),
    ]


def test_context_markdown_rows(results_doc):
    data = {
        "model": "m",
        "config": {"threads": 2, "steps": 16, "rounds": 5, "warmup": 4, "rss_steps": 8, "contexts": [32, 2048, 4000]},
        "engines": _context_entry()["engines"][:2],
        "precisions": [
            _context_entry()
            | {"loadavg_1_5_15": [[1.0, 2.0, 3.0], [1.5, 2.0, 3.0]], "contexts_process": {"peak_rss_mib": 3072.0}}
        ],
    }
    text = realsize_context_report.markdown(results_doc(data, "real-size-context"))
    row = "| 4000 | 4004–4083 | 48.0 → 60.0 | 1.25× | 1.20× / 1.46× | 30,000.0 → 31,000.0 | 1.03× | yes | 1.0e-05 |"
    assert row in text
    assert "| int4 m, 2 KV heads | ortstate |" in text and "1.00/2.00/3.00 → 1.50/2.00/3.00" in text
    assert "in turn, peaked at int4 m, 2 KV heads 3.0 GiB." in text


def test_contexts_beyond_the_models_positions_are_refused(capsys):
    from benchmarks import realsize

    with pytest.raises(SystemExit):
        realsize.main(["int4", "--contexts", "32,4000", "--steps", "64"])  # 4000 + 4 + 5 × 64 > 4096
    assert "max_position_embeddings 4096" in capsys.readouterr().err
