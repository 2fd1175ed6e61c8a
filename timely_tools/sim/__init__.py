"""Discrete-event simulation of a robot fleet served by the planner and the simulated engine."""
