"""Stage one: ``distill-cache build``, a teacher's layer of a cache from corpora (``build.py``).

Reads corpora (``seqdistill.corpora``), runs a teacher (``seqdistill.teachers``) over batches of
sentences and writes shards through ``seqdistill.cache_schema``; never imports students."""
