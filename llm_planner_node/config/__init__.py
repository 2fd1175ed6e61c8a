"""The fleet parameter file: loading and validation, its schema, and export as a ROS 2 parameters file."""
