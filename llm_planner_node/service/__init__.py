"""The ROS-free planning service: goal intake, the scheduler loop over the core planner and the engine, segment delivery and operator control."""
