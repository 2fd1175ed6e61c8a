"""Evaluation harness (issue #7): trace library, workload specs, ``eval``/``report``/``paper``,
rosbag2 recording and replay, and a best-found upper bound for small workloads."""
