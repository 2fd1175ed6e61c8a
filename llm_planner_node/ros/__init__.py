"""The ROS 2 edge: the planner node (action server, topics, services, parameters, diagnostics), its messages and QoS, and the GoalClient library."""
