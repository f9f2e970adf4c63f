"""One module per pretraining architecture, each a ``TrainSpec`` subclass (``spec.py``) whose methods call its real parts;
``registry.py`` is the table (``get_train_spec``). Import the modules directly; this file stays empty."""
