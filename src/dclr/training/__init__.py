"""Configuration, checkpoints and the training loop."""
