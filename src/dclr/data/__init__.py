"""Evaluation data (SentEval layout), training corpora and downloads."""
