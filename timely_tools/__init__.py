"""Tools around the runtime: benchmarks, the evaluation harness, the simulator and training. They import the runtime; the runtime never imports them."""
