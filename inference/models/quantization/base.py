"""How a linear layer holds its weights and multiplies with them: the LinearMethod contract, which is all a
layer or an architecture knows of quantization.

As in vLLM, the layer only calls `method.apply`; what the weights are (the dense parameter, a oneDNN
prepacked copy, our AMX tile layout, torch's int4 layout, a GGUF's own blocks) is the method's business,
chosen once at load (quantization/setup.py) from the weight plan (plan.py). A token embedding may likewise
be given an EmbeddingLookup in place of its dense table.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
import torch.nn.functional as F


class LinearMethod(ABC):
    name: ClassVar[str]

    @property
    def keeps_dense(self) -> bool:
        """Whether the layer's dense weight must stay (False: the method holds all it multiplies with)."""
        return False

    @abstractmethod
    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [..., in] -> [..., out]; `weight` is the layer's dense parameter (empty once dropped)."""

    def nbytes(self) -> int:
        """Memory held beyond the layer's parameters (those are counted with the model's)."""
        return 0


class DenseMethod(LinearMethod):
    name = "dense"

    @property
    def keeps_dense(self) -> bool:
        return True

    def apply(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, weight, bias)


DENSE = DenseMethod()  # stateless: every layer that multiplies its own parameter shares it


class EmbeddingLookup(ABC):
    """Rows of an embedding table held other than as a dense parameter (a GGUF's blocks)."""

    @abstractmethod
    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows `ids` (any shape) in fp32: [*ids.shape, hidden]."""

    @abstractmethod
    def nbytes(self) -> int:
        """Memory held beyond what the model's linear methods count (0 where it shares a head's)."""
