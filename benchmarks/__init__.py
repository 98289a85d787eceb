"""ortstate's benchmarks: ``python -m benchmarks`` lists the suites, ``python -m benchmarks NAME
[args...]`` runs one (``--help`` after the name gives its options). Every suite writes its results
through :func:`benchmarks.common.write_results`: one document shape (the machine from ortstate's
own reader of the CPU, the versions, the git source, the load average before and after, the
suite's data under ``data``) and its markdown under ``benchmarks/results/``;
``scripts/make_performance_doc.py`` makes ``docs/performance.md`` from them. Suites set ortstate
up through its public options only (``ORTSTATE_GROUPED_DECODE``, session options, keyword
arguments), never by patching its modules. This package imports nothing but the standard library
at the entry point, so it runs in any Python (``realsize-build`` runs in a venv holding optimum-intel)."""
