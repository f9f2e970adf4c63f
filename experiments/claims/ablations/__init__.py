"""The collapse ablations (``python -m experiments.claims.ablations``): probe-time readings and decoder
variants that name why CrossBERT's raw features collapse (``run``), and their section of the results page (``page``)."""
