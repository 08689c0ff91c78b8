"""The one trainer that teachers' fine-tuning and students' recipes both run on: stages and plans
(``stage.py``), the loop with its checkpoints, resume and DDP (``loop.py``), and the records it
writes (``records.py``)."""

from .loop import NOT_IDENTITY, check_identity, run, settings
from .records import REPORTERS, reporters
from .stage import ListBatches, Plan, Stage

__all__ = [
    "NOT_IDENTITY",
    "REPORTERS",
    "ListBatches",
    "Plan",
    "Stage",
    "check_identity",
    "reporters",
    "run",
    "settings",
]
