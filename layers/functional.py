"""Functional forms of Porter's layers, with torch.nn.functional's names and argument order (channels-last)."""
