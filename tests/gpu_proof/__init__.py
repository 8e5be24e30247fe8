"""The GPU proof harness of ``scripts/gpu_proof.sh``: a test tool of the project, not library code."""
