"""Console entry points: thin argparse front ends over importable functions."""
