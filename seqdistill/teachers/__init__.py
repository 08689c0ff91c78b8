"""Everything that needs teacher weights: teacher models, fine-tuning, running them on a batch."""
