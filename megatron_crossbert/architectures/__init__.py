"""One module per pretraining architecture, each importing its parts into a ``TrainSpec`` (``spec.py``);
``registry.py`` is the table (``get_train_spec``). Import the modules directly; this file stays empty."""
