"""ortstate's benchmarks: ``python -m benchmarks`` lists the suites, ``python -m benchmarks NAME
[args...]`` runs one (``--help`` after the name gives its options). Every suite records the machine,
its CPU flags, the versions and the load average through :mod:`benchmarks.common`, and writes its
results (markdown and JSON) under ``benchmarks/results/``; ``scripts/make_performance_doc.py`` makes
``docs/performance.md`` from them. This package imports nothing but the standard library, so the
entry point runs in any Python (``realsize-build`` runs in a venv holding optimum-intel)."""
