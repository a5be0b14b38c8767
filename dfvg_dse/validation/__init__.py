"""Calibration and validation (issue 7): the analytical model against the running reference decoder."""
