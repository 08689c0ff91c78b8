"""Stage two: streaming dataset, students, losses, recipes, trainer, evaluation.

Never imports ``seqdistill.teachers``: a student needs only the cache.
"""
