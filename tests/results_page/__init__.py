"""Tests of megatron_crossbert.results_page."""
