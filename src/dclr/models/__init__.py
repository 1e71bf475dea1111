"""Encoders (backbone + pooler), loading and export."""
