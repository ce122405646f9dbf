"""The GPU suites (``suites``), their runner (``suite``) and the checks their steps run."""
