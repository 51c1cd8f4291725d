"""The engine families of ``benchmarks/bench_engines.py``, one module per family of engines."""
