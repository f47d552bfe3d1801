"""Outside simulators behind the env contract."""
