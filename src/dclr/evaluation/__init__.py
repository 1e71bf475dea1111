"""Evaluators: STS (SentEval-exact), embedding geometry (alignment, uniformity)."""
