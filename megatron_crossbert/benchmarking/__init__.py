"""``crossbert-bench``'s benchmarks and what they share (README.md maps the modules); nothing here is imported by
training, evaluation or conversion. Import from the modules: this face defines and re-exports nothing."""
