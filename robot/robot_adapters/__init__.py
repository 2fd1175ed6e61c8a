"""Robot adapter nodes (drone, arm, simulated fleet) and the protocol simulators used in tests."""
