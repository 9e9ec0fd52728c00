"""The calibration summary in ComfyUI. Node module: `node` (H3kitCalibrationReport); `summary` reads the file."""
