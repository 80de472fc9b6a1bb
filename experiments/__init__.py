"""The studies users run: stall, cost, simulate, sweep, calibrate; the CLI; reports and plots."""
