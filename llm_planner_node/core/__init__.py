"""Pure-Python scheduling core: no ROS and no vLLM imports (numpy only).

Everything here takes time from an injected clock and is deterministic under a seed, so the
same code drives the live vLLM engine and the simulated engine.
"""
