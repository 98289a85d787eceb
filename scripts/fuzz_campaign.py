"""Fuzz ortstate with damaged real IRs: ``python scripts/fuzz_campaign.py --mutants N --seed S``.

Every mutant (see ``tests/fuzz_ir.py``, run by ``tests/fuzz_pool.py``) is converted in both forms
and run one step in a worker process under an address-space limit; the summary counts outcomes per
form and lists every bad one with what reproduces it (seed and mutant index). Exit status 1 if any
outcome is bad.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import fuzz_ir  # noqa: E402
import fuzz_pool  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first mutant index (one: --start I --mutants 1)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per mutant and form")
    parser.add_argument("--keep", type=Path, help="keep the mutants' files in this directory")
    parser.add_argument("--bases", nargs="+", help="IR .xml files relative to the repository (default: fuzz_ir.BASES)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every outcome")
    args = parser.parse_args(argv)

    bases = tuple(args.bases) if args.bases else fuzz_ir.BASES
    directory = args.keep or Path(tempfile.mkdtemp(prefix="ortstate-fuzz-"))
    pool = fuzz_pool.Pool(args.workers, args.timeout)
    started = time.monotonic()
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    kinds: collections.defaultdict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    bad: list[fuzz_pool.Record] = []
    try:
        for record in fuzz_pool.campaign(args.seed, args.mutants, directory, pool, args.start, bases):
            counts[(record.verdict, "explicit" if record.explicit else "custom-op")] += 1
            kinds[record.mutant.kind][record.verdict] += 1
            if record.verdict not in fuzz_ir.ACCEPTABLE:
                bad.append(record)
            if args.verbose or record.verdict not in fuzz_ir.ACCEPTABLE:
                print(record.describe(), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)
    elapsed = time.monotonic() - started
    print(
        f"\nseed {args.seed}, mutants {args.start}..{args.start + args.mutants - 1} ({args.mutants}), "
        f"{2 * args.mutants} runs (both forms), {args.workers} workers, {elapsed:.0f} s"
    )
    print(f"{'outcome':<14}{'custom-op':>10}{'explicit':>10}")
    for outcome in sorted({o for o, _ in counts}, key=lambda o: (o not in fuzz_ir.ACCEPTABLE, o)):
        print(f"{outcome:<14}{counts[(outcome, 'custom-op')]:>10}{counts[(outcome, 'explicit')]:>10}")
    print("\nper mutation kind: " + "; ".join(
        f"{k} " + ", ".join(f"{o} {n}" for o, n in sorted(c.items())) for k, c in sorted(kinds.items())
    ))  # fmt: skip
    print(f"\n{len(bad)} bad outcome(s)" if bad else "\nno bad outcomes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
