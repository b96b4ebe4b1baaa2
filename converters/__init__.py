"""Converters from captured torch graphs to MLX (``porter.converters``)."""
