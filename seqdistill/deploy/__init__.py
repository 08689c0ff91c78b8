"""What users run a trained model with: evaluation and prediction, export to ONNX, the HTTP server,
model cards, and the measurements of a sweep (``distill-train sweep``)."""
