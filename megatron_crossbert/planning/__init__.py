"""``crossbert-plan``'s model of a run: parameters, memory per GPU, step time and layouts, from the config alone.

Checked against the built model, the distributed optimizer's buffers and the bytes autograd saves
(``check.py``, ``tests/planning``); FLOPs come from ``models.flops``, never recomputed here.
"""
