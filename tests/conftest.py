import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))  # `from helpers import ...` in every test file

torch.manual_seed(0)
