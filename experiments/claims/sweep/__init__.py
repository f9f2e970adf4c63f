"""The recipe sweep (``python -m experiments.claims.sweep``): short runs that choose a study's recipe (``run``)
and its section of the results page (``page``)."""
