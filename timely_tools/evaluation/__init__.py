"""Evaluation harness: trace library, workload specs, ``eval``/``report``/``paper``,
rosbag2 recording and replay, a best-found schedule search for small workloads and a real
upper bound (hindsight MILP, :mod:`.bound_milp`)."""
