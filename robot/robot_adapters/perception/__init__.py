"""Perception ports of the real adapters: camera frames, detectors, detection sources."""
