"""Hand-written MLX architectures that load torchvision-format checkpoints (``porter.zoo``)."""
