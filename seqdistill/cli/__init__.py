"""The command lines, each a thin layer over functions users can call: ``distill-cache``
(``cache.py``), ``distill-train`` (``train.py``)."""
