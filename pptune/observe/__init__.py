"""trace-report and monitor: analysis of measured traces and GPU samples."""
