"""The CPU demo (``crossbert-demo``): the whole pipeline in minutes on an embedded docstring corpus.

Installed as its own top-level package beside the library (pyproject's package finder also looks
in ``experiments/``), so the console script works after a plain ``pip install`` while the library
(``megatron_crossbert``) never imports it. It imports only the library, never another experiment.
``pipeline`` runs the stages, ``corpus`` builds the embedded corpus, ``cli`` is the console script.
"""
