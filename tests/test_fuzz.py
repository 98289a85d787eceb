"""Damaged real IRs (fuzz_ir.py, run by fuzz_pool.py): a seeded, bounded fuzz run, and checks that the
harness itself can fail.

Longer campaigns: ``python scripts/fuzz_campaign.py --mutants N --seed S``.
"""

from __future__ import annotations

import collections
from pathlib import Path

import fuzz_ir
import pytest
from fuzz_ir import ACCEPTABLE, BASES, ROOT, Mutant, mutant, verdict
from fuzz_pool import Pool, campaign

SEED = 20261121
MUTANTS = 800  # x 2 forms; ~20 s on 2 cores


def test_harness_sees_crashes_hangs_and_memory_hogs() -> None:
    """A worker that aborts, sleeps forever or allocates 8 GB is caught, and the pool carries on."""
    jobs = [{"probe": p} for p in ("crash", "ok", "hang", "alloc", "ok")]
    results = dict(Pool(workers=2, timeout=3.0).run(jobs))
    assert [results[i]["outcome"] for i in range(len(jobs))] == ["crash", "ok", "hang", "memory", "ok"]
    assert results[0]["returncode"] < 0  # killed by SIGABRT, not a clean exit


def _mutant(layer: str | None = None) -> Mutant:
    return Mutant(0, BASES[0], "attr_junk", "test", layer, b"", b"")


@pytest.mark.parametrize(
    ("layer", "result", "expected"),
    [
        (None, {"outcome": "ok"}, "ok"),
        (None, {"outcome": "exception", "message": "IndexError"}, "exception"),
        (None, {"outcome": "rejected", "stage": "convert", "error": "IRError", "message": "bad"}, "unnamed_file"),
        ("w", {"outcome": "rejected", "stage": "convert", "error": "IRError", "message": "/m/model.xml: bad"},
         "unlocated"),
        ("w", {"outcome": "rejected", "stage": "convert", "error": "IRError",
               "message": "/m/model.xml: layer 'w' (id 1): bad"}, "rejected"),
        (None, {"outcome": "rejected", "stage": "load", "error": "OrtStateError",
                "message": "model (converted from model.xml): onnxruntime cannot load the model"}, "rejected"),
        (None, {"outcome": "run_error", "message": "Failed to allocate memory for requested buffer"}, "run_oom"),
    ],
)  # fmt: skip
def test_verdicts(layer: str | None, result: dict, expected: str) -> None:
    assert verdict(_mutant(layer), "/m/model.xml", result) == expected


def test_every_base_model_converts_and_runs() -> None:
    """Mutants start from IRs that work in both forms with the harness's generated feeds."""
    jobs = [{"xml": str(ROOT / b), "explicit": ex, "seed": 0} for b in BASES for ex in (False, True)]
    results = dict(Pool(workers=2, timeout=120.0).run(jobs))
    failed = {jobs[i]["xml"]: r for i, r in results.items() if r["outcome"] != "ok"}
    assert not failed
    assert any("llm" in b for b in BASES) and any("lowlatency" in b for b in BASES)


def test_mutants_are_reproducible_and_varied() -> None:
    first = [mutant(SEED, i) for i in range(300)]
    assert first[17] == mutant(SEED, 17)
    assert {m.kind for m in first} == set(fuzz_ir._OPS)
    assert {m.base for m in first} == set(BASES)
    changed = [m for m in first if (m.xml, m.bin) != fuzz_ir.base_files(m.base)[:2]]
    assert len(changed) >= 0.95 * len(first)


def test_seeded_fuzz_run(tmp_path: Path) -> None:
    """Every mutant converts and runs a step (RunError allowed), or is refused with an OrtStateError
    naming the file (and the layer, for damage aimed at one): no other exception, crash, hang or
    memory blow-up, in either form."""
    records = list(campaign(SEED, MUTANTS, tmp_path, Pool(workers=2, timeout=60.0)))
    assert len(records) == 2 * MUTANTS
    bad = [r.describe() for r in records if r.verdict not in ACCEPTABLE]
    assert not bad, f"seed {SEED}: {len(bad)} bad outcome(s):\n" + "\n".join(bad[:20])
    counts = collections.Counter(r.verdict for r in records)
    # A run that refuses everything (or runs nothing) tests little: both paths must be well exercised.
    assert counts["ok"] >= 0.1 * len(records), counts
    assert counts["rejected"] >= 0.3 * len(records), counts
    assert counts["run_error"] > 0, counts
